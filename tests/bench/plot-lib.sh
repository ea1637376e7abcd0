# shellcheck shell=bash
# make bench's plots, sourced by the benches: a table the bench wrote (NAME.dat) drawn as NAME.svg beside
# it by gnuplot (tests/bench/plot.gp). A table is tab-separated: a header of column titles (the first is
# the x axis's values), then one row per x, "-" where a series has no value.
PLOT_GP=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/plot.gp
PLOT_FAILED=() # the SVGs not drawn in full
PLOT_MSG=      # what the last plot drew, or why it did not

# plot_join XTITLE TITLE=LIST...: a table of lists of "X Y" lines joined on X (in the order the lists
# give them), "-" where a list has no Y for an X; an empty list gives a column of "-", empty lines are none.
plot_join() {
	local s i=0
	printf '%s' "$1"
	shift
	for s; do printf '\t%s' "${s%%=*}"; done
	echo
	for s; do
		i=$((i + 1))
		[ -z "${s#*=}" ] || sed "s/^/$i /" <<<"${s#*=}"
	done | awk -v n=$# 'NF == 3 { if (!($2 in seen)) { seen[$2] = 1; xs[++nx] = $2 } y[$2, $1] = $3 }
		END { for (r = 1; r <= nx; r++) { printf "%s", xs[r]; for (c = 1; c <= n; c++) printf "\t%s", ((xs[r], c) in y) ? y[xs[r], c] : "-"; print "" } }'
}

# plot KIND TABLE TITLE XLABEL YLABEL: draws TABLE (NAME.dat) as NAME.svg, KIND "percentiles" or "paired"
# (plot.gp), every column with a value. PLOT_MSG says where the SVG is, or why it was not drawn; a
# column without any value (its series not measured) or no SVG puts it in PLOT_FAILED: the bench then
# fails as one that could not measure (plot_check).
plot() {
	local kind=$1 dat=$2 svg=${2%.dat}.svg cols empty out q=\'
	shift 2
	rm -f "$svg"
	if ! command -v gnuplot >/dev/null; then
		PLOT_MSG="could not plot $svg: no gnuplot (vm-images/setup.sh apt installs gnuplot-nox)"
	elif [ ! -s "$dat" ]; then
		PLOT_MSG="could not plot $svg: no table $dat"
	else
		# "COLS|EMPTY": the columns with a number, the titles of those without.
		IFS='|' read -r cols empty < <(awk -F'\t' 'NR == 1 { n = NF; for (i = 2; i <= NF; i++) t[i] = $i; next }
			{ for (i = 2; i <= NF; i++) if ($i ~ /^[0-9.]+$/) has[i] = 1 }
			END { for (i = 2; i <= n; i++) if (i in has) c = c i " "; else e = e (e == "" ? "" : ", ") t[i]; print c "|" e }' "$dat")
		if [ -z "$cols" ]; then
			PLOT_MSG="could not plot $svg: no values in $dat"
		elif ! out=$(gnuplot -e "dat='${dat//$q/$q$q}'; out='${svg//$q/$q$q}'; kind='$kind'; cols='$cols';
			title='${1//$q/$q$q}'; xlabel='${2//$q/$q$q}'; ylabel='${3//$q/$q$q}'" "$PLOT_GP" 2>&1) || [ ! -s "$svg" ]; then
			PLOT_MSG="could not plot $svg: gnuplot failed: $(tr '\n' ' ' <<<"$out")"
		elif [ -n "$empty" ]; then
			PLOT_MSG="plot: $svg (from $(basename "$dat")), without $empty: no values"
		else
			PLOT_MSG="plot: $svg (from $(basename "$dat"))"
			return 0
		fi
	fi
	PLOT_FAILED+=("$(basename "$svg")")
}

# plot_check: fails, naming them, when plots were not drawn in full.
plot_check() {
	((${#PLOT_FAILED[@]} == 0)) || { echo "could not plot: ${PLOT_FAILED[*]} (see the plot lines above)" && return 1; }
}
