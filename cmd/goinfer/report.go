package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"goinfer/internal/report"
	"goinfer/internal/sweep"
)

func init() {
	register(command{
		name:    "report",
		summary: "write markdown tables and PNG plots (mean +/- std) from result CSVs",
		run:     runReport,
	})
}

func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", "report [flags] [CSV or DIR ...]", stderr)
	out := fs.String("out", "results", "`DIR` to write the tables and plots into")
	width := fs.Int("width", 1200, "plot width in pixels")
	height := fs.Int("height", 750, "plot height in pixels")
	plots := fs.Bool("plots", true, "draw the PNG plots (--no-plots: tables only)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: goinfer report [flags] [CSV or DIR ...]

Reads result CSVs (default results/*.csv; a DIR means DIR/*.csv) and writes
into --out, as the reference's process_metrics.py does:
  output_{batch_size}_{compile}.md  one row per experiment: warmup latency,
                                    average latency, throughput, GPU
                                    utilization as mean +/- sample std
  summary.md                        every metric across batch sizes
  throughput_plot.png, avg_latency_plot.png, p99_latency_plot.png,
  gpu_util_plot.png, warmup_latency_plot.png
Rows are grouped by experiment, batch size and compile setting, and kept
apart when their setup differs (engine, device, precision, image size, ...).
Rows from several engines or devices go into one sub-folder each. A std
over a single run, or a metric with no values, shows as n/a.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, true); err != nil {
		return err
	}
	if *width < 200 || *height < 150 || *width > 10000 || *height > 10000 {
		return fmt.Errorf("--width %d --height %d: want 200..10000 by 150..10000 pixels", *width, *height)
	}
	inputs := fs.Args()
	if len(inputs) == 0 {
		m, err := filepath.Glob(filepath.Join("results", "*.csv"))
		if err != nil {
			return fmt.Errorf("listing results: %w", err)
		}
		if len(m) == 0 {
			return fmt.Errorf("no results/*.csv here: run goinfer bench or goinfer sweep first, or name the CSV files")
		}
		inputs = m
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rows, files, err := report.ReadCSVs(inputs)
	if err != nil {
		return err
	}
	switch {
	case len(files) == 0:
		return fmt.Errorf("no result rows: no .csv files in %s", strings.Join(inputs, ", "))
	case len(rows) == 0:
		return fmt.Errorf("no result rows in %s", strings.Join(files, ", "))
	}
	res, err := report.Write(*out, rows, report.Options{
		Order:   sweep.PresetNames(),
		Plot:    report.PlotOptions{Width: *width, Height: *height},
		NoPlots: !*plots,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "read %d rows from %d files\n", len(rows), len(files))
	for _, f := range res.Files {
		fmt.Fprintln(stdout, "wrote", f)
	}
	for _, s := range res.Skipped {
		fmt.Fprintln(stderr, "skipped", s)
	}
	return nil
}
