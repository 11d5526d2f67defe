package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"goinfer/internal/checkpoint"
	"goinfer/internal/leakcheck"
	"goinfer/internal/metrics"
	"goinfer/internal/model"
	"goinfer/internal/trace"
)

// benchCheckpoint writes a narrow ResNet (one block per stage, width 8, 10
// classes): a bench run on it takes milliseconds on the cpu engine.
func benchCheckpoint(t *testing.T) string {
	t.Helper()
	sd, err := model.Init(context.Background(), model.NewArch(model.Basic, []int{1, 1, 1, 1}, 8, 10, 1, 64), 7)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "narrow.safetensors")
	if err := checkpoint.Save(path, sd); err != nil {
		t.Fatal(err)
	}
	return path
}

type benchRun struct {
	code           int
	stdout, stderr string
}

func runBenchArgs(ctx context.Context, args ...string) benchRun {
	var stdout, stderr bytes.Buffer
	code := run(ctx, append([]string{"bench"}, args...), &stdout, &stderr)
	return benchRun{code, stdout.String(), stderr.String()}
}

func readRows(t *testing.T, path string) []metrics.Row {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := metrics.ReadRows(f)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// checkBenchNoLeak fails the test if goroutines started during it (the
// pipeline's stages, the engine's thread pools, the sampler) outlive it.
func checkBenchNoLeak(t *testing.T) {
	t.Helper()
	leakcheck.Check(t)
}

func TestBenchReferenceInvocation(t *testing.T) {
	checkBenchNoLeak(t)
	ckpt := benchCheckpoint(t)
	dir := t.TempDir()
	// The reference's flags, spelled as its README does, plus tiny sizes.
	args := []string{"--batch_size", "3", "--num_iters", "6", "--output_file", "x.csv", "--no-compile",
		"--checkpoint", ckpt, "--engine", "cpu", "--image_size", "32", "--results_dir", dir, "--threads", "1"}
	for i := range 2 {
		r := runBenchArgs(context.Background(), args...)
		if r.code != 0 {
			t.Fatalf("run %d: exit %d\nstdout:\n%s\nstderr:\n%s", i, r.code, r.stdout, r.stderr)
		}
		for _, want := range []string{
			"Load time: ", "Compile time: ", "Warmup latency: ", "Average latency (exclude warmup): ", " +/- ",
			"Max latency: ", "Min latency: ", "p50 / p90 / p99 latency: ", "Throughput (exclude warmup): ",
			"samples per second", "Effective compute: ", "Average GPU utilization: N/A", "Peak GPU memory: N/A",
			"Results appended to " + filepath.Join(dir, "x.csv"),
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("summary lacks %q:\n%s", want, r.stdout)
			}
		}
		if strings.Contains(r.stderr, "cpu engine: using") {
			t.Errorf("explicit --num_iters/--batch_size were scaled:\n%s", r.stderr)
		}
	}
	rows := readRows(t, filepath.Join(dir, "x.csv"))
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2 (one per run, appended)", len(rows))
	}
	r := rows[1]
	if r.BatchSize != 3 || r.Compile || r.NumIters != 6 || r.ImageSize != 32 || r.Engine != "cpu" || r.Arch == "" ||
		r.Precision != "fp32" || r.InputDType != "fp32" || r.NumWorkers != defaultNumWorkers || !r.CopyStreams ||
		r.NumDevices != 1 || r.Mode != "flood" || r.Experiment != "" || r.Timestamp == "" {
		t.Errorf("row fields: %+v", r)
	}
	if !(r.Throughput > 0 && r.WarmupLatency > 0 && r.MinLatency <= r.P50Latency && r.P50Latency <= r.P99Latency &&
		r.P99Latency <= r.MaxLatency && r.LoadTime > 0 && r.GFLOPS > 0) {
		t.Errorf("row measurements: %+v", r)
	}
	if !math.IsNaN(r.GPUUtil) || !math.IsNaN(r.GPUMemPeak) {
		t.Errorf("gpu_util %v / memory %v without a GPU: want unknown (NaN), not a number", r.GPUUtil, r.GPUMemPeak)
	}
}

func TestBenchModesDevicesDTypes(t *testing.T) {
	ckpt := benchCheckpoint(t)
	dir := t.TempDir()
	base := []string{"--checkpoint", ckpt, "--engine", "cpu", "--image_size", "32", "--batch_size", "2", "--num_iters", "8",
		"--results_dir", dir, "--output_file", "modes.csv", "--threads", "1"}
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, r metrics.Row, out string)
	}{
		{"concurrency", []string{"--concurrency", "2", "--experiment", "closed"}, func(t *testing.T, r metrics.Row, _ string) {
			if r.Mode != "concurrency=2" || r.Experiment != "closed" {
				t.Errorf("mode %q experiment %q", r.Mode, r.Experiment)
			}
		}},
		{"rate", []string{"--rate", "200"}, func(t *testing.T, r metrics.Row, _ string) {
			if r.Mode != "rate=200" {
				t.Errorf("mode %q", r.Mode)
			}
		}},
		{"original pipeline", []string{"--no-copy_streams", "--num_workers", "1"}, func(t *testing.T, r metrics.Row, _ string) {
			if r.CopyStreams || r.NumWorkers != 1 {
				t.Errorf("copy_streams %v workers %d", r.CopyStreams, r.NumWorkers)
			}
		}},
		{"two devices", []string{"--devices", "0,1", "--queue_depth", "2"}, func(t *testing.T, r metrics.Row, out string) {
			if r.NumDevices != 2 || !strings.Contains(r.Device, "2 x ") || !strings.Contains(out, "device 1: ") {
				t.Errorf("devices %d %q; summary:\n%s", r.NumDevices, r.Device, out)
			}
		}},
		{"fp16 input", []string{"--input_dtype", "fp16"}, func(t *testing.T, r metrics.Row, _ string) {
			if r.InputDType != "fp16" {
				t.Errorf("input dtype %q", r.InputDType)
			}
		}},
		{"uint8 input", []string{"--input_dtype", "uint8", "--compile"}, func(t *testing.T, r metrics.Row, _ string) {
			if r.InputDType != "uint8" || !r.Compile {
				t.Errorf("input dtype %q compile %v", r.InputDType, r.Compile)
			}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runBenchArgs(context.Background(), append(append([]string{}, base...), tt.args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			rows := readRows(t, filepath.Join(dir, "modes.csv"))
			if len(rows) != i+1 {
				t.Fatalf("%d rows after %d runs", len(rows), i+1)
			}
			tt.check(t, rows[i], r.stdout)
		})
	}
}

func TestBenchProfile(t *testing.T) {
	ckpt := benchCheckpoint(t)
	dir := t.TempDir()
	tracePath := filepath.Join(dir, "run.json")
	r := runBenchArgs(context.Background(), "--checkpoint", ckpt, "--engine", "cpu", "--image_size", "32", "--batch_size", "2",
		"--num_iters", "5", "--results_dir", dir, "--profile", "--profile_file", tracePath, "--threads", "1")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "Trace: "+tracePath) {
		t.Errorf("summary does not name the trace:\n%s", r.stdout)
	}
	b, err := os.ReadFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	var f trace.File
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	threads := map[string]bool{}
	spans := map[string]int{}
	for _, e := range f.TraceEvents {
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				threads[e.Args["name"].(string)] = true
			}
		case "X":
			spans[e.Cat]++
		}
	}
	for _, want := range []string{"backend", "H2D stage", "D2H stage", "reply stage", "worker 0", "worker 1",
		"GPU stream: H2D", "GPU stream: D2H", "GPU stream: worker 0"} {
		if !threads[want] {
			t.Errorf("no %q track; have %v", want, threads)
		}
	}
	// Warmup + 5 requests, each with a device span for H2D, forward, D2H.
	if spans["gpu"] != 3*6 || spans["compute"] != 6 || spans["load"] != 2 {
		t.Errorf("spans by category %v, want 18 gpu, 6 compute, 2 load", spans)
	}
}

func TestBenchCPUScaleDown(t *testing.T) {
	ckpt := benchCheckpoint(t)
	dir := t.TempDir()
	r := runBenchArgs(context.Background(), "--checkpoint", ckpt, "--engine", "cpu", "--image_size", "32",
		"--results_dir", dir, "--threads", "1")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "cpu engine: using --num_iters 20 --batch_size 4 instead") {
		t.Errorf("no notice of the scaled defaults:\n%s", r.stderr)
	}
	rows := readRows(t, filepath.Join(dir, "output.csv"))
	if len(rows) != 1 || rows[0].NumIters != cpuNumIters || rows[0].BatchSize != cpuBatchSize {
		t.Fatalf("rows %+v, want the cpu-sized run", rows)
	}
	// An explicit flag is obeyed, and only the other one is scaled.
	r = runBenchArgs(context.Background(), "--checkpoint", ckpt, "--engine", "cpu", "--image_size", "32", "--batch_size", "1",
		"--results_dir", dir, "--threads", "1")
	if r.code != 0 || !strings.Contains(r.stderr, "using --num_iters 20 instead") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if rows := readRows(t, filepath.Join(dir, "output.csv")); rows[1].BatchSize != 1 || rows[1].NumIters != cpuNumIters {
		t.Fatalf("second row %+v", rows[1])
	}
}

func TestBenchUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--concurrency", "2", "--rate", "5"}, "--concurrency and --rate are mutually exclusive"},
		{[]string{"--num_iters", "0"}, "--num_iters 0"},
		{[]string{"--batch_size", "-1"}, "--batch_size -1"},
		{[]string{"--num_workers", "0"}, "--num_workers 0"},
		{[]string{"--image_size", "0"}, "--image_size 0"},
		{[]string{"--rate", "-3"}, "--rate -3"},
		{[]string{"--connections", "-2"}, "--connections -2"},
		{[]string{"--concurrency", "-3"}, "--concurrency -3"},
		{[]string{"--queue_depth", "-1"}, "--queue_depth -1"},
		{[]string{"--devices", "0,x"}, `"x" is not a GPU ordinal`},
		{[]string{"--devices", "1,1"}, "device 1 given twice"},
		{[]string{"--devices", "0", "--device", "1"}, "--device and --devices are mutually exclusive"},
		{[]string{"--input_dtype", "bf16"}, `unknown --input_dtype "bf16"`},
		{[]string{"--output_file", ""}, "--output_file is empty"},
		{[]string{"--no_such_flag"}, "flag provided but not defined"},
		{[]string{"stray"}, `unexpected argument "stray"`},
	}
	for _, tt := range tests {
		r := runBenchArgs(context.Background(), tt.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("bench %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tt.args, r.code, r.stderr, tt.want)
		}
	}
	r := runBenchArgs(context.Background(), "-h")
	if r.code != 0 || !strings.Contains(r.stderr, "--num_iters 20") || !strings.Contains(r.stderr, "-copy_streams") {
		t.Errorf("bench -h: exit %d\n%s", r.code, r.stderr)
	}
}

func TestBenchRefusesForeignCSV(t *testing.T) {
	ckpt := benchCheckpoint(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "output.csv")
	foreign := "batch_size,compile,torch_load_time,warmup_latency\n32,True,1.0,2.0\n"
	if err := os.WriteFile(path, []byte(foreign), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runBenchArgs(context.Background(), "--checkpoint", ckpt, "--engine", "cpu", "--image_size", "32", "--batch_size", "1",
		"--num_iters", "2", "--results_dir", dir, "--threads", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "refusing to append") {
		t.Fatalf("exit %d, stderr:\n%s\nwant a refusal", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(path); string(b) != foreign {
		t.Fatalf("the foreign CSV was modified:\n%s", b)
	}
}

func TestBenchInterrupted(t *testing.T) {
	checkBenchNoLeak(t)
	ckpt := benchCheckpoint(t)
	dir := t.TempDir()
	// As Ctrl-C does, through main's signal.NotifyContext.
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(300*time.Millisecond, cancel).Stop()
	// 1 request per second for 100 s: interrupted well before the end.
	r := runBenchArgs(ctx, "--checkpoint", ckpt, "--engine", "cpu", "--image_size", "32", "--batch_size", "1",
		"--num_iters", "100", "--rate", "1", "--results_dir", dir, "--threads", "1")
	if r.code != 130 || !strings.Contains(r.stderr, "goinfer bench: interrupted") {
		t.Fatalf("exit %d, want 130 and an interruption notice\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "output.csv")); !os.IsNotExist(err) {
		t.Fatalf("an interrupted run wrote a CSV row (stat: %v)", err)
	}
}
