package report

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// NA is how a table shows a value that does not exist: the mean of a metric
// with no data (gpu_util without a GPU) or the standard deviation of a
// single run (pandas gives NaN; "nan" in a results table reads like a bug).
const NA = "n/a"

// FormatStat renders a stat as the reference does ("14.172 +/- 0.267"),
// with one change: values below 0.1 keep three significant digits
// ("0.00123 +/- 0.00004") instead of rounding to "0.001 +/- 0.000", since
// goinfer's latencies are often milliseconds. The std uses the mean's
// decimals so the two line up.
func FormatStat(s Stat) string {
	if !s.Valid() {
		return NA
	}
	d := decimals(s.Mean)
	m := strconv.FormatFloat(s.Mean, 'f', d, 64)
	if math.IsNaN(s.Std) {
		return m + " +/- " + NA
	}
	return m + " +/- " + strconv.FormatFloat(s.Std, 'f', d, 64)
}

// decimals is 3 (the reference's %.3f) for |v| >= 0.1 and enough to keep
// three significant digits below that, capped at 9.
func decimals(v float64) int {
	a := math.Abs(v)
	if a == 0 || a >= 0.1 || math.IsInf(a, 0) {
		return 3
	}
	return min(9, max(3, 2-int(math.Floor(math.Log10(a)))))
}

// tableMetrics are the reference's four columns, in its order.
var tableMetrics = []Metric{WarmupLatency, AverageLatency, Throughput, GPUUtil}

// refHeader is the reference's column title for a metric.
func refHeader(m Metric) string {
	switch m {
	case WarmupLatency:
		return "Warmup_latency (s)"
	case AverageLatency:
		return "Average_latency (s)"
	case Throughput:
		return "Throughput (samples/sec)"
	case GPUUtil:
		return "GPU Utilization (%)"
	}
	return m.Title() + " (" + m.Unit() + ")"
}

// WriteBatchTable writes output_{batch_size}_{compile}.md in the reference's
// form: a "## Batch Size B Compile C" heading and one table row per
// experiment with warmup latency, average latency, throughput and GPU
// utilization as mean +/- sample std. goinfer adds a line saying what was
// measured and a Runs column (how many rows each cell aggregates). Series
// with no row at this batch size and compile setting are left out.
func WriteBatchTable(w io.Writer, p *PlatformReport, batchSize int, compile bool) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "## Batch Size %d Compile %t\n\n", batchSize, compile)
	fmt.Fprintf(bw, "%s.\n\n", describe(p))
	cols := []string{"Experiment"}
	for _, m := range tableMetrics {
		cols = append(cols, refHeader(m))
	}
	cols = append(cols, "Runs")
	writeRow(bw, cols)
	writeRule(bw, cols)
	for _, s := range p.Series {
		g := p.Group(s, batchSize, compile)
		if g == nil {
			continue
		}
		cells := []string{escape(s.Label)}
		for _, m := range tableMetrics {
			cells = append(cells, FormatStat(g.Stat(m)))
		}
		cells = append(cells, strconv.Itoa(g.Runs))
		writeRow(bw, cells)
	}
	return bw.Flush()
}

// summaryMetrics are the tables of summary.md, most asked-for first.
var summaryMetrics = []Metric{Throughput, AverageLatency, P99Latency, WarmupLatency, GPUUtil}

// SummaryLinks are the other files of a report that summary.md links to.
type SummaryLinks struct {
	Plots  []PlotFile // written plots, shown inline
	Tables []string   // per batch size tables, relative paths
}

// WriteSummary writes summary.md: one table per metric with a row per
// experiment and compile setting and a column per batch size, so a metric
// can be read across batch sizes at a glance, then the plots and links to
// the per-batch-size tables.
func WriteSummary(w io.Writer, p *PlatformReport, links SummaryLinks) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# Benchmark summary: %s\n\n", escape(p.Platform.String()))
	fmt.Fprintf(bw, "%s. %d runs in all; each cell is the mean +/- sample standard deviation over its runs (%s: no data, or one run for the deviation).\n", describe(p), p.Rows, NA)
	for _, m := range summaryMetrics {
		fmt.Fprintf(bw, "\n## %s (%s)\n\n", m.Title(), m.Unit())
		cols := []string{"Experiment", "Compile"}
		for _, b := range p.BatchSizes {
			cols = append(cols, "bs "+strconv.Itoa(b))
		}
		writeRow(bw, cols)
		writeRule(bw, cols)
		for _, s := range p.Series {
			for _, c := range p.Compiles {
				cells := []string{escape(s.Label), strconv.FormatBool(c)}
				any := false
				for _, b := range p.BatchSizes {
					cell := "-"
					if g := p.Group(s, b, c); g != nil {
						cell = FormatStat(g.Stat(m))
						any = true
					}
					cells = append(cells, cell)
				}
				if any {
					writeRow(bw, cells)
				}
			}
		}
	}
	if len(links.Plots) > 0 {
		fmt.Fprintf(bw, "\n## Plots\n\n")
		for _, pf := range links.Plots {
			fmt.Fprintf(bw, "![%s](%s)\n\n", pf.Title, pf.Name)
		}
	}
	if len(links.Tables) > 0 {
		fmt.Fprintf(bw, "\n## Tables per batch size\n\n")
		for _, t := range links.Tables {
			fmt.Fprintf(bw, "- [%s](%s)\n", strings.TrimSuffix(t, ".md"), t)
		}
	}
	return bw.Flush()
}

// describe is the sentence under a heading: where and what was measured.
func describe(p *PlatformReport) string {
	s := "Measured with the " + p.Platform.String()
	if p.Platform.Engine == "" {
		s = "Measured on " + p.Platform.String()
	}
	if p.Common != "" {
		s += ": " + p.Common
	}
	return escape(s)
}

func writeRow(w io.Writer, cells []string) {
	io.WriteString(w, "| "+strings.Join(cells, " | ")+" |\n")
}

// writeRule writes the separator row with dashes as wide as each header, as
// the reference's tables have.
func writeRule(w io.Writer, cols []string) {
	rule := make([]string, len(cols))
	for i, c := range cols {
		rule[i] = strings.Repeat("-", max(3, len(c)))
	}
	writeRow(w, rule)
}

// escape keeps user-provided text (experiment and device names) from
// breaking a markdown table.
func escape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ").Replace(s)
}
