// Command fleettable prints the figures of several `controlplane load -o
// json` reports of the same fleet as one Markdown table: a column per run,
// then the min and the median, as make bench-fleet's closing table.
package main
