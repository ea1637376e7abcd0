#!/bin/bash
# make bench's plotting (tests/bench/plot-lib.sh, plot.gp) on fixed tables, no rig: plot_join joins
# per-series "X Y" lists on X with "-" where one has no value; plot draws each series of a table into
# its SVG (its title in the key, one point per value); a series without any value, no table or no
# gnuplot are said in PLOT_MSG and fail plot_check (the bench then fails as one that could not plot).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/rig/ntb-lib.sh"
. "$top/tests/bench/plot-lib.sh"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fails=0
check() { "$@" || fails=$((fails + 1)); }
# points SVG TITLE: the points gnuplot drew for the series TITLE: its SVG group (gnuplot_plot_N, the key's
# entry drawn last, in a second group of the same id) holds the key's sample and one point per value.
points() {
	awk -v t="$2" '/<g id="gnuplot_plot_/ { g = $2 } g && /<use xlink:href=.#gpPt/ { n[g]++ }
		g && !(g in title) && match($0, /<text>.*<\/text>/) { title[g] = substr($0, RSTART + 6, RLENGTH - 13) }
		END { for (g in title) if (title[g] == t) print n[g] + 0 }' "$1"
}

plot_join "percentile" "local=1 0.5
50 1.25
99 4" "farpass=1 0.75
99 9
" "none=" >"$t/latency.dat"
check expect_eq "plot_join: a header, rows in X order, '-' where a series has no value (an empty line is none)" \
	"$(tr '\t\n' ',;' <"$t/latency.dat")" "percentile,local,farpass,none;1,0.5,0.75,-;50,1.25,-,-;99,4,9,-;"

cut -f1-3 "$t/latency.dat" >"$t/two.dat"
plot percentiles "$t/two.dat" "title" "x" "y"
check expect_eq "two series: drawn" "$PLOT_MSG" "plot: $t/two.svg (from two.dat)"
check expect_eq "... the key's sample and 3 points of local" "$(points "$t/two.svg" local)" 4
check expect_eq "... and 2 of farpass (its 50th percentile missing)" "$(points "$t/two.svg" farpass)" 3
check expect "... and plot_check passes" plot_check

plot paired "$t/latency.dat" "title" "x" "y"
check expect_eq "a series without values: the others drawn, it named" "$PLOT_MSG" \
	"plot: $t/latency.svg (from latency.dat), without none: no values"
check expect_eq "... local and farpass in the SVG" "$(points "$t/latency.svg" local) $(points "$t/latency.svg" farpass)" "4 3"
check expect_eq "... plot_check fails naming it" "$(plot_check)" "could not plot: latency.svg (see the plot lines above)"

PLOT_FAILED=()
mkdir "$t/bin" && ln -s "$(command -v rm)" "$(command -v basename)" "$t/bin"
PATH=$t/bin plot percentiles "$t/two.dat" "title" "x" "y"
check expect_eq "no gnuplot: said, no SVG" "$PLOT_MSG $([ -e "$t/two.svg" ] && echo svg)" \
	"could not plot $t/two.svg: no gnuplot (vm-images/setup.sh apt installs gnuplot-nox) "
plot percentiles "$t/absent.dat" "title" "x" "y"
check expect_eq "no table: said" "$PLOT_MSG" "could not plot $t/absent.svg: no table $t/absent.dat"
check expect_eq "... both fail plot_check" "$(plot_check)" "could not plot: two.svg absent.svg (see the plot lines above)"
[ $fails -eq 0 ]
