// Package report turns benchmark result rows (the CSVs that `goinfer bench`
// and `goinfer sweep` append to) into the files people read: the
// reference's per-configuration markdown tables, a summary across batch
// sizes, and PNG plots.
//
// Rows are grouped by platform (engine and device), series (experiment name
// plus the setup fields that change a result: architecture, precision,
// input dtype, image size, iterations, workers, copy streams, devices, load
// mode), batch size and compile flag; each group's metrics are aggregated as
// pandas does (mean, sample standard deviation with ddof=1, NaN skipped).
// Rows from different platforms are never averaged together.
//
// Files written, for one platform, into the output folder:
//
//	output_{batch_size}_{compile}.md  one per batch size and compile setting
//	summary.md                        every metric across batch sizes, plots inline
//	throughput_plot.png, avg_latency_plot.png, p99_latency_plot.png,
//	gpu_util_plot.png, warmup_latency_plot.png
//
// When the rows come from several platforms, each platform gets those files
// in its own sub-folder (named after engine and device, e.g.
// "cuda-nvidia-h200") and the output folder gets a summary.md that links
// them. A plot with no data (GPU utilization on the cpu engine) is skipped.
//
// A standard deviation that pandas gives as NaN (one run) and a metric with
// no value at all are shown as "n/a".
package report

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"goinfer/internal/metrics"
)

// ReadCSVs reads result rows from each path: a CSV file, or a folder whose
// *.csv files are read (not its sub-folders). It returns the rows and the
// files they came from. A file that is not a result CSV is an error naming
// the file.
func ReadCSVs(paths []string) ([]metrics.Row, []string, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, nil, fmt.Errorf("reading results: %w", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		m, err := filepath.Glob(filepath.Join(p, "*.csv"))
		if err != nil {
			return nil, nil, fmt.Errorf("listing %s: %w", p, err)
		}
		slices.Sort(m)
		files = append(files, m...)
	}
	var rows []metrics.Row
	for _, f := range files {
		rs, err := readCSV(f)
		if err != nil {
			return nil, nil, err
		}
		rows = append(rows, rs...)
	}
	return rows, files, nil
}

func readCSV(path string) ([]metrics.Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading results: %w", err)
	}
	defer f.Close()
	rows, err := metrics.ReadRows(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

// Options tune Write.
type Options struct {
	// Order lists experiment names in display order; others follow,
	// alphabetically.
	Order []string
	// Plot sets the PNG size.
	Plot PlotOptions
	// NoPlots skips the PNGs.
	NoPlots bool
}

// Result says what Write did.
type Result struct {
	Files   []string // written, in order
	Skipped []string // plots left out, with the reason
}

// Write aggregates rows and writes the tables, summaries and plots into
// dir (created if needed). Each file is written to a temporary name and
// renamed, so an interrupted report leaves whole files only.
func Write(dir string, rows []metrics.Row, opt Options) (Result, error) {
	var res Result
	if len(rows) == 0 {
		return res, errors.New("no result rows to report")
	}
	reps := Aggregate(rows, opt.Order)
	if len(reps) == 1 {
		err := writePlatform(dir, reps[0], opt, &res)
		return res, err
	}
	used := map[string]int{}
	var index bytes.Buffer
	fmt.Fprintf(&index, "# Benchmark summary\n\n%d runs measured on %d platforms; each has its own tables and plots:\n\n", len(rows), len(reps))
	for _, p := range reps {
		name := p.Platform.Slug()
		if used[name]++; used[name] > 1 {
			name = fmt.Sprintf("%s-%d", name, used[name])
		}
		if err := writePlatform(filepath.Join(dir, name), p, opt, &res); err != nil {
			return res, err
		}
		fmt.Fprintf(&index, "- [%s](%s/summary.md): %d runs\n", escape(p.Platform.String()), name, p.Rows)
	}
	path := filepath.Join(dir, "summary.md")
	if err := writeFile(path, func(w io.Writer) error { _, err := w.Write(index.Bytes()); return err }); err != nil {
		return res, err
	}
	res.Files = append(res.Files, path)
	return res, nil
}

func writePlatform(dir string, p *PlatformReport, opt Options, res *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating output folder: %w", err)
	}
	var links SummaryLinks
	for _, b := range p.BatchSizes {
		for _, c := range p.Compiles {
			if !hasCell(p, b, c) {
				continue
			}
			name := fmt.Sprintf("output_%d_%t.md", b, c)
			path := filepath.Join(dir, name)
			if err := writeFile(path, func(w io.Writer) error { return WriteBatchTable(w, p, b, c) }); err != nil {
				return err
			}
			res.Files = append(res.Files, path)
			links.Tables = append(links.Tables, name)
		}
	}
	if !opt.NoPlots {
		for _, pf := range PlotFiles {
			path := filepath.Join(dir, pf.Name)
			var drawn bool
			err := writeFileIf(path, func(w io.Writer) (bool, error) {
				var err error
				drawn, err = WritePlot(w, p, pf, opt.Plot)
				return drawn, err
			})
			if err != nil {
				return err
			}
			if !drawn {
				res.Skipped = append(res.Skipped, fmt.Sprintf("%s: no %s values in the rows", path, pf.Metric.Column()))
				continue
			}
			res.Files = append(res.Files, path)
			links.Plots = append(links.Plots, pf)
		}
	}
	path := filepath.Join(dir, "summary.md")
	if err := writeFile(path, func(w io.Writer) error { return WriteSummary(w, p, links) }); err != nil {
		return err
	}
	res.Files = append(res.Files, path)
	return nil
}

func hasCell(p *PlatformReport, batchSize int, compile bool) bool {
	for _, s := range p.Series {
		if p.Group(s, batchSize, compile) != nil {
			return true
		}
	}
	return false
}

func writeFile(path string, fill func(io.Writer) error) error {
	return writeFileIf(path, func(w io.Writer) (bool, error) { return true, fill(w) })
}

// writeFileIf writes path through a temporary file in the same folder and
// renames it into place, unless fill says there is nothing to write.
func writeFileIf(path string, fill func(io.Writer) (bool, error)) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+strings.TrimSuffix(base, filepath.Ext(base))+"-*.tmp")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	bw := bufio.NewWriter(tmp)
	keep, err := fill(bw)
	if err == nil && keep {
		err = bw.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if !keep {
		return nil
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
