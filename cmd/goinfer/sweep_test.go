package main

import (
	"bytes"
	"context"
	"image"
	_ "image/png"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/checkpoint"
	"goinfer/internal/metrics"
	"goinfer/internal/model"
)

// asMainEnv makes TestGoinferAsChild act as the goinfer binary: sweep
// re-runs this test binary as its bench children, so the end-to-end test
// exercises the real bench without building the command first.
const asMainEnv = "GOINFER_TEST_AS_MAIN"

func TestGoinferAsChild(t *testing.T) {
	if os.Getenv(asMainEnv) != "1" {
		t.Skip("runs as the goinfer binary for the sweep test, not a test by itself")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// childCommand is the bench command line sweep runs in tests.
func childCommand() (cmd, env []string) {
	return []string{os.Args[0], "-test.run=^TestGoinferAsChild$", "--", "bench"},
		// The race detector sleeps 1 s at every exit unless told not to.
		[]string{asMainEnv + "=1", "GORACE=atexit_sleep_ms=0"}
}

// tinyCheckpoint writes a narrow ResNet (one block per stage, width 4,
// 10 classes) so that each run takes milliseconds on the cpu engine.
func tinyCheckpoint(t *testing.T, dir string) string {
	t.Helper()
	sd, err := model.Init(context.Background(), model.NewArch(model.Basic, []int{1, 1, 1, 1}, 4, 10, 1, 64), 1)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tiny.safetensors")
	if err := checkpoint.Save(path, sd); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSweepThenReport(t *testing.T) {
	dir := t.TempDir()
	ckpt := tinyCheckpoint(t, dir)
	results := filepath.Join(dir, "results")
	args := []string{
		"--batch_sizes=1,2", "--experiments=original,workers2", "--repeats=2", "--compile=both",
		"--engine=cpu", "--image_size=32", "--num_iters=2", "--checkpoint=" + ckpt,
		"--results_dir=" + results, "--output_file=sweep.csv",
	}
	cmd, env := childCommand()
	var stdout, stderr bytes.Buffer
	if err := runSweep(context.Background(), args, &stdout, &stderr, cmd, env); err != nil {
		t.Fatalf("sweep: %v\n%s", err, stderr.String())
	}
	csvPath := filepath.Join(results, "sweep.csv")
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := metrics.ReadRows(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 16 {
		t.Fatalf("%d rows, want 2 experiments x 2 batch sizes x 2 compile x 2 repeats = 16\n%s", len(rows), stderr.String())
	}
	for _, r := range rows {
		if r.Engine != "cpu" || r.ImageSize != 32 || r.NumIters != 2 || !(r.Throughput > 0) {
			t.Errorf("row %+v: not the run asked for", r)
		}
		wantWorkers := map[string]int{"original": 1, "workers2": 2}[r.Experiment]
		if r.NumWorkers != wantWorkers {
			t.Errorf("%s row has %d workers, want %d", r.Experiment, r.NumWorkers, wantWorkers)
		}
	}
	if !strings.Contains(stderr.String(), "[16/16] ") || !strings.Contains(stdout.String(), "next: goinfer report") {
		t.Errorf("progress or hint missing:\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}

	// Resuming a complete sweep runs nothing.
	stderr.Reset()
	if err := runSweep(context.Background(), args, &stdout, &stderr, cmd, env); err != nil {
		t.Fatalf("second sweep: %v", err)
	}
	if !strings.Contains(stderr.String(), "16 already in") || !strings.Contains(stderr.String(), "; 0 to run") {
		t.Errorf("second sweep should find everything done:\n%s", stderr.String())
	}

	out := filepath.Join(dir, "report")
	stdout.Reset()
	stderr.Reset()
	if err := runReport(context.Background(), []string{"--out", out, "--width=400", "--height=300", results}, &stdout, &stderr); err != nil {
		t.Fatalf("report: %v\n%s", err, stderr.String())
	}
	for _, name := range []string{"output_1_true.md", "output_1_false.md", "output_2_true.md", "output_2_false.md"} {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if !strings.HasPrefix(s, "## Batch Size ") || !strings.Contains(s, "| original | ") || !strings.Contains(s, "| workers2 | ") {
			t.Errorf("%s:\n%s", name, s)
		}
		// Two runs per cell, no GPU: std present, GPU utilization n/a.
		for _, line := range strings.Split(s, "\n") {
			if strings.HasPrefix(line, "| original") || strings.HasPrefix(line, "| workers2") {
				if !strings.HasSuffix(line, "| n/a | 2 |") || strings.Count(line, "+/-") != 3 {
					t.Errorf("%s: row %q", name, line)
				}
			}
		}
	}
	if _, err := os.Stat(filepath.Join(out, "summary.md")); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"throughput_plot.png", "avg_latency_plot.png", "p99_latency_plot.png", "warmup_latency_plot.png"} {
		f, err := os.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		cfg, format, err := image.DecodeConfig(f)
		f.Close()
		if err != nil || format != "png" || cfg.Width != 400 || cfg.Height != 300 {
			t.Errorf("%s: %s %dx%d, %v; want a 400x300 png", name, format, cfg.Width, cfg.Height, err)
		}
	}
	if !strings.Contains(stderr.String(), "gpu_util_plot.png: no gpu_util values") {
		t.Errorf("the GPU plot of a cpu run should be skipped with a note:\n%s", stderr.String())
	}
}

func TestSweepAndReportFlagErrors(t *testing.T) {
	cmd, env := childCommand()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--batch_sizes=1,x"}, `--batch_sizes: "x" is not an integer`},
		{[]string{"--compile=maybe"}, "--compile:"},
		{[]string{"--experiments=workers9"}, `unknown experiment "workers9"`},
		{[]string{"--repeats=0"}, "repeats 0"},
	}
	for _, tt := range tests {
		var o, e bytes.Buffer
		err := runSweep(context.Background(), tt.args, &o, &e, cmd, env)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("sweep %v: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}

	dir := t.TempDir()
	var o, e bytes.Buffer
	if err := runReport(context.Background(), []string{"--width=10", dir}, &o, &e); err == nil || !strings.Contains(err.Error(), "--width 10") {
		t.Errorf("report --width=10: %v", err)
	}
	if err := runReport(context.Background(), []string{dir}, &o, &e); err == nil || !strings.Contains(err.Error(), "no result rows") {
		t.Errorf("report of an empty folder: %v", err)
	}
}

func TestSweepDryRun(t *testing.T) {
	dir := t.TempDir()
	cmd, env := childCommand()
	var o, e bytes.Buffer
	args := []string{"--dry_run", "--batch_sizes=8", "--experiments=fp16", "--repeats=2", "--compile=false",
		"--results_dir=" + dir, "--engine=cpu", "--threads=2"}
	if err := runSweep(context.Background(), args, &o, &e, cmd, env); err != nil {
		t.Fatal(err)
	}
	out := o.String()
	if !strings.HasPrefix(out, "2 of 2 runs to do") || strings.Count(out, "--precision=fp16") != 2 ||
		!strings.Contains(out, "--threads=2") || !strings.Contains(out, "# repeat 2") {
		t.Errorf("dry run:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "sweep.csv")); err == nil {
		t.Error("a dry run wrote the CSV")
	}
}
