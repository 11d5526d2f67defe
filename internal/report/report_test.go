package report

import (
	"bytes"
	"image"
	_ "image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"goinfer/internal/metrics"
)

var order = []string{"original", "copy_streams", "workers2", "default"}

// row is a result row of the cpu engine with the given experiment, batch
// size, compile flag and metrics (warmup, average latency, throughput);
// other fields hold one common setup.
func row(exp string, bs int, compile bool, warmup, avg, tput float64) metrics.Row {
	return metrics.Row{
		BatchSize: bs, Compile: compile, Experiment: exp,
		WarmupLatency: warmup, AverageLatency: avg, Throughput: tput, P99Latency: avg * 1.5,
		GPUUtil: math.NaN(), GPUMemPeak: math.NaN(),
		Engine: "cpu", Device: "Test CPU", Arch: "resnet18", Precision: "fp32", InputDType: "float32",
		NumWorkers: 1, CopyStreams: true, ImageSize: 64, NumIters: 10, Mode: "flood",
	}
}

func TestAggregateGroupsByConfiguration(t *testing.T) {
	rows := []metrics.Row{
		row("workers2", 32, false, 1, 0.5, 100),
		row("original", 32, false, 2, 0.6, 90),
		row("workers2", 32, false, 3, 0.7, 110),
		row("workers2", 32, true, 4, 0.2, 300),
		row("workers2", 1, false, 5, 0.1, 10),
		row("zeta", 1, false, 6, 0.1, 10),
		row("", 1, false, 7, 0.1, 10),
	}
	reps := Aggregate(rows, order)
	if len(reps) != 1 {
		t.Fatalf("got %d platforms, want 1", len(reps))
	}
	p := reps[0]
	var labels []string
	for _, s := range p.Series {
		labels = append(labels, s.Label)
	}
	// Known names in the given order, then the others alphabetically;
	// rows without a name are "bench".
	if want := []string{"original", "workers2", "bench", "zeta"}; !slices.Equal(labels, want) {
		t.Errorf("series %v, want %v", labels, want)
	}
	if !slices.Equal(p.BatchSizes, []int{1, 32}) || !slices.Equal(p.Compiles, []bool{false, true}) {
		t.Errorf("batch sizes %v compiles %v", p.BatchSizes, p.Compiles)
	}
	g := p.Group(p.Series[1], 32, false)
	if g == nil || g.Runs != 2 {
		t.Fatalf("workers2 bs32 compile=false: %+v, want 2 runs", g)
	}
	if s := g.Stat(WarmupLatency); s.Mean != 2 || !close(s.Std, math.Sqrt2) {
		t.Errorf("warmup %+v, want 2 +/- 1.414", s)
	}
	if s := g.Stat(Throughput); s.Mean != 105 {
		t.Errorf("throughput %+v, want mean 105", s)
	}
	if s := g.Stat(GPUUtil); s.Valid() {
		t.Errorf("gpu_util of NaN rows = %+v, want no value", s)
	}
	if g := p.Group(p.Series[1], 32, true); g == nil || g.Runs != 1 {
		t.Errorf("compile=true must be its own group: %+v", g)
	}
	if p.Common != "resnet18, fp32, float32 input, 64x64 images, 10 iterations per run, 1 worker, copy streams, flood" {
		t.Errorf("common setup %q", p.Common)
	}
}

func TestAggregateKeepsPlatformsAndSetupsApart(t *testing.T) {
	a := row("default", 1, false, 1, 0.1, 10)
	b := a
	b.Engine, b.Device = "cuda", "NVIDIA H200"
	c := a
	c.ImageSize = 250 // same experiment, another image size
	d := a
	d.Precision = "fp16"
	d.ImageSize = 250
	reps := Aggregate([]metrics.Row{a, b, c, d, a}, nil)
	if len(reps) != 2 {
		t.Fatalf("got %d platforms, want 2 (cpu and cuda rows must not be averaged)", len(reps))
	}
	if reps[0].Platform.Engine != "cpu" || reps[1].Platform.Engine != "cuda" {
		t.Errorf("platforms %v, %v", reps[0].Platform, reps[1].Platform)
	}
	cpu := reps[0]
	var labels []string
	for _, s := range cpu.Series {
		labels = append(labels, s.Label)
	}
	want := []string{
		"default (fp32, 250x250 images)",
		"default (fp32, 64x64 images)",
		"default (fp16, 250x250 images)",
	}
	slices.Sort(want)
	if !slices.Equal(labels, want) {
		t.Errorf("labels %q, want %q", labels, want)
	}
	for _, s := range cpu.Series {
		g := cpu.Group(s, 1, false)
		wantRuns := 1
		if s.Setup.ImageSize == 64 {
			wantRuns = 2
		}
		if g.Runs != wantRuns {
			t.Errorf("%s: %d runs, want %d", s.Label, g.Runs, wantRuns)
		}
	}
	if got := reps[1].Platform.Slug(); got != "cuda-nvidia-h200" {
		t.Errorf("slug %q", got)
	}
}

func TestWriteBatchTable(t *testing.T) {
	rows := []metrics.Row{
		row("original", 128, false, 5.0, 14.0, 500),
		row("original", 128, false, 5.6, 14.4, 520),
		row("original", 128, false, 5.45, 14.1, 536),
		row("copy_streams", 128, false, 3.8, 0.0123, 550),
		row("copy_streams", 128, true, 9, 9, 9), // another table
	}
	rows[0].GPUUtil, rows[1].GPUUtil = 50, 60 // the third run had no sample
	p := Aggregate(rows, order)[0]
	var b bytes.Buffer
	if err := WriteBatchTable(&b, p, 128, false); err != nil {
		t.Fatal(err)
	}
	want := `## Batch Size 128 Compile false

Measured with the cpu engine on Test CPU: resnet18, fp32, float32 input, 64x64 images, 10 iterations per run, 1 worker, copy streams, flood.

| Experiment | Warmup_latency (s) | Average_latency (s) | Throughput (samples/sec) | GPU Utilization (%) | Runs |
| ---------- | ------------------ | ------------------- | ------------------------ | ------------------- | ---- |
| original | 5.350 +/- 0.312 | 14.167 +/- 0.208 | 518.667 +/- 18.037 | 55.000 +/- 7.071 | 3 |
| copy_streams | 3.800 +/- n/a | 0.0123 +/- n/a | 550.000 +/- n/a | n/a | 1 |
`
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteSummary(t *testing.T) {
	rows := []metrics.Row{
		row("original", 1, false, 1, 0.5, 100),
		row("original", 1, false, 1, 0.5, 110),
		row("original", 32, true, 1, 0.5, 1000),
	}
	p := Aggregate(rows, order)[0]
	var b bytes.Buffer
	links := SummaryLinks{Plots: PlotFiles[:1], Tables: []string{"output_1_false.md"}}
	if err := WriteSummary(&b, p, links); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"# Benchmark summary: cpu engine on Test CPU\n",
		"\n## Throughput (samples/sec)\n\n| Experiment | Compile | bs 1 | bs 32 |\n| ---------- | ------- | ---- | ----- |\n" +
			"| original | false | 105.000 +/- 7.071 | - |\n| original | true | - | 1000.000 +/- n/a |\n",
		"\n## GPU utilization (%)\n",
		"![Throughput against batch size](throughput_plot.png)\n",
		"- [output_1_false](output_1_false.md)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q; got:\n%s", want, got)
		}
	}
}

func TestWritePlotIsPNGOfRequestedSize(t *testing.T) {
	rows := []metrics.Row{
		row("original", 1, false, 1, 0.01, 100),
		row("original", 1, false, 1.2, 0.02, 120),
		row("original", 32, false, 1.1, 0.5, 1000),
		row("original", 32, false, 1.1, 0.4, 1500),
		row("default", 1, true, 20, 0.001, 900),
		row("default", 32, true, 21, 0.03, 30000),
		row("default", 256, true, 0, 0, 0), // zeros must not break a log axis
	}
	// Error bars reaching below zero on a log axis must not panic.
	big := row("default", 32, true, 1, 0.0001, 10)
	rows = append(rows, big)
	p := Aggregate(rows, order)[0]
	// Drawing is slow under -race: every plot small, one at the default size.
	for _, size := range []PlotOptions{{Width: 400, Height: 250, DPI: 60}, {}} {
		for i, pf := range PlotFiles {
			if size.Width == 0 && i > 0 {
				break
			}
			var b bytes.Buffer
			drawn, err := WritePlot(&b, p, pf, size)
			if err != nil {
				t.Fatalf("%s: %v", pf.Name, err)
			}
			if pf.Metric == GPUUtil {
				if drawn || b.Len() > 0 {
					t.Errorf("%s drawn without any gpu_util value", pf.Name)
				}
				continue
			}
			if !drawn {
				t.Fatalf("%s: not drawn", pf.Name)
			}
			cfg, format, err := image.DecodeConfig(&b)
			if err != nil {
				t.Fatalf("%s: %v", pf.Name, err)
			}
			want := size.withDefaults()
			if format != "png" || cfg.Width != want.Width || cfg.Height != want.Height {
				t.Errorf("%s: %s %dx%d, want png %dx%d", pf.Name, format, cfg.Width, cfg.Height, want.Width, want.Height)
			}
		}
	}
}

func TestLogTicks(t *testing.T) {
	tests := []struct {
		lo, hi float64
		want   []string
	}{
		{90, 17000, []string{"100", "200", "500", "1000", "2000", "5000", "10,000"}},
		{0.0005, 20, []string{"0.001", "0.01", "0.1", "1", "10"}},
		{1.1, 1.9, []string{"2"}[:0]}, // no 1-9 multiple inside: nothing to label but also no panic
		{2.5, 7.5, []string{"3", "4", "5", "6", "7"}},
	}
	for _, tt := range tests {
		var labels []string
		for _, tk := range (logTicks{}).Ticks(math.Log10(tt.lo), math.Log10(tt.hi)) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if !slices.Equal(labels, tt.want) {
			t.Errorf("ticks over [%v, %v] = %q, want %q", tt.lo, tt.hi, labels, tt.want)
		}
	}
}

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	rows := []metrics.Row{
		row("original", 1, false, 1, 0.01, 100),
		row("original", 1, false, 1.2, 0.02, 120),
		row("original", 32, true, 1.1, 0.5, 1000),
	}
	gpu := rows[0]
	gpu.Engine, gpu.Device, gpu.GPUUtil = "cuda", "NVIDIA H200", 40
	csvPath := filepath.Join(dir, "in", "sweep.csv")
	if err := metrics.AppendRow(csvPath, rows[0]); err != nil {
		t.Fatal(err)
	}
	for _, r := range append(rows[1:], gpu) {
		if err := metrics.AppendRow(csvPath, r); err != nil {
			t.Fatal(err)
		}
	}
	got, files, err := ReadCSVs([]string{filepath.Join(dir, "in")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || !slices.Equal(files, []string{csvPath}) {
		t.Fatalf("read %d rows from %v", len(got), files)
	}
	out := filepath.Join(dir, "out")
	res, err := Write(out, got, Options{Order: order, Plot: PlotOptions{Width: 300, Height: 200, DPI: 50}})
	if err != nil {
		t.Fatal(err)
	}
	// Two platforms: a sub-folder each and an index.
	want := []string{
		"cpu-test-cpu/output_1_false.md", "cpu-test-cpu/output_32_true.md",
		"cpu-test-cpu/throughput_plot.png", "cpu-test-cpu/avg_latency_plot.png",
		"cpu-test-cpu/p99_latency_plot.png", "cpu-test-cpu/warmup_latency_plot.png",
		"cpu-test-cpu/summary.md",
		"cuda-nvidia-h200/output_1_false.md",
		"cuda-nvidia-h200/throughput_plot.png", "cuda-nvidia-h200/avg_latency_plot.png",
		"cuda-nvidia-h200/p99_latency_plot.png", "cuda-nvidia-h200/gpu_util_plot.png",
		"cuda-nvidia-h200/warmup_latency_plot.png", "cuda-nvidia-h200/summary.md",
		"summary.md",
	}
	var rel []string
	for _, f := range res.Files {
		r, _ := filepath.Rel(out, f)
		rel = append(rel, filepath.ToSlash(r))
	}
	if !slices.Equal(rel, want) {
		t.Errorf("wrote %q\nwant %q", rel, want)
	}
	if len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0], "gpu_util_plot.png") {
		t.Errorf("skipped %q, want the cpu gpu_util plot", res.Skipped)
	}
	entries, _ := os.ReadDir(filepath.Join(out, "cpu-test-cpu"))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	index, err := os.ReadFile(filepath.Join(out, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(index), "[cuda engine on NVIDIA H200](cuda-nvidia-h200/summary.md): 1 runs") {
		t.Errorf("index:\n%s", index)
	}

	if _, err := Write(out, nil, Options{}); err == nil {
		t.Error("Write with no rows: no error")
	}
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("a,b\n1,2\n"), 0o644)
	if _, _, err := ReadCSVs([]string{bad}); err == nil || !strings.Contains(err.Error(), "bad.csv") {
		t.Errorf("non-results CSV: error %v, want one naming the file", err)
	}
	if _, _, err := ReadCSVs([]string{filepath.Join(dir, "missing.csv")}); err == nil {
		t.Error("missing file: no error")
	}
}
