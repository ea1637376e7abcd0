# make bench's plots: an SVG of a tab-separated table (tests/bench/plot-lib.sh's plot_svg runs this).
# Variables (gnuplot -e): dat, out, title, xlabel, ylabel; cols: the table's columns to draw ("2 3 5");
# kind: "percentiles": column 1 is a percentile, drawn on a nines scale (50, 90, 99, 99.9 equally apart:
#       a latency distribution's tail gets as much room as its body), each column its own colour;
#       "paired": column 1 on a linear scale, columns 2-3, 4-5, ... a pair in one colour, the second dashed
#       (a figure and its baseline).
# The y axis is logarithmic: the series compared differ by up to 100x.
set terminal svg size 900,540 dynamic noenhanced font "sans,13" background "white"
set output out
set datafile separator "\t"
set datafile missing "-"
set title title
set xlabel xlabel
set ylabel ylabel
set logscale y
set grid
set key outside right top Left reverse box width 1
# Okabe-Ito colours (told apart with colour blindness).
colors = "#0072b2 #d55e00 #009e73 #cc79a7 #e69f00 #56b4e9"
do for [i = 1:12] {
	set linetype i linecolor rgb word(colors, ((kind eq "paired" ? (i + 1) / 2 : i) - 1) % 6 + 1) linewidth 2 pointtype 7 dashtype 1
	if (kind eq "paired" && i % 2 == 0) { set linetype i dashtype 2 }
}
nines(p) = -log10(1 - p / 100.0)
if (kind eq "percentiles") {
	set xtics ("0" 0, "50" nines(50), "90" 1, "99" 2, "99.9" 3, "99.99" 4)
	set xrange [0:4.1]
	x(v) = nines(v)
} else {
	set xrange [0:*]
	x(v) = v
}
plot for [c in cols] dat using (x($1)):(column(int(c))) with linespoints linetype int(c) - 1 title columnhead(int(c))
