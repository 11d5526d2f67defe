package sweep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"goinfer/internal/metrics"
)

// The runner's process handling is tested with this test binary re-run as
// the child (the os/exec helper-process pattern): it writes a row the way
// bench does, or fails, or hangs, as GOINFER_SWEEP_TEST_MODE says. The
// command's end-to-end test runs the real bench.
const childEnv = "GOINFER_SWEEP_TEST_CHILD"

func TestHelperBench(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("helper process for the runner tests, not a test by itself")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Exit(helperBench(args))
}

func helperBench(args []string) int {
	v := map[string]string{}
	for _, a := range args {
		k, val, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		v[k] = val
	}
	mode, target, _ := strings.Cut(os.Getenv("GOINFER_SWEEP_TEST_MODE"), ":")
	if target == v["experiment"] {
		switch mode {
		case "fail":
			fmt.Fprintln(os.Stderr, "loading model\nerror: out of memory on purpose")
			return 1
		case "hang", "hangkill":
			if m := os.Getenv("GOINFER_SWEEP_TEST_MARK"); m != "" {
				os.WriteFile(m, nil, 0o644)
			}
			sig := make(chan os.Signal, 1)
			if mode == "hang" {
				signal.Notify(sig, os.Interrupt)
			} else {
				signal.Ignore(os.Interrupt)
			}
			select {
			case <-sig:
				return 130 // as bench does on Ctrl-C: no row
			case <-time.After(time.Minute):
				return 3
			}
		case "wrongrow":
			v["batch_size"] = "999"
		}
	}
	bs, _ := strconv.Atoi(v["batch_size"])
	iters, _ := strconv.Atoi(v["num_iters"])
	size, _ := strconv.Atoi(v["image_size"])
	workers, _ := strconv.Atoi(v["num_workers"])
	copyStreams, _ := strconv.ParseBool(v["copy_streams"])
	row := metrics.Row{
		Experiment: v["experiment"], BatchSize: bs, Compile: v["compile"] == "true",
		Engine: v["engine"], Precision: "fp32", InputDType: "float32", ImageSize: size, NumIters: iters,
		NumWorkers: workers, CopyStreams: copyStreams, Mode: "flood",
		Throughput: 100 * float64(bs), AverageLatency: 0.01, WarmupLatency: 0.5,
	}
	if err := metrics.AppendRow(filepath.Join(v["results_dir"], v["output_file"]), row); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// syncBuffer is a bytes.Buffer safe for the progress ticker and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newRunner(t *testing.T, mode string) (*Runner, *syncBuffer) {
	t.Helper()
	log := &syncBuffer{}
	return &Runner{
		Command: []string{os.Args[0], "-test.run=^TestHelperBench$", "--"},
		// The race detector makes every process sleep 1 s at exit unless
		// told otherwise.
		Env:       []string{childEnv + "=1", "GOINFER_SWEEP_TEST_MODE=" + mode, "GORACE=atexit_sleep_ms=0"},
		KillAfter: 300 * time.Millisecond,
		CSV:       filepath.Join(t.TempDir(), "results", "sweep.csv"),
		Log:       log,
		Timeout:   time.Minute,
	}, log
}

func smallConfig(t *testing.T, exps ...string) Config {
	return Config{
		Experiments: mustExperiments(t, exps...),
		BatchSizes:  []int{1, 4},
		Compile:     []bool{false},
		Repeats:     2,
		Bench:       []Flag{{"engine", "cpu"}, {"image_size", "16"}, {"num_iters", "2"}},
	}
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

func TestRunnerRunsTheGridAndResumes(t *testing.T) {
	rn, log := newRunner(t, "")
	cfg := smallConfig(t, "workers2")
	res, err := rn.Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if res.Total != 4 || res.Ran != 4 || res.DoneBefore != 0 {
		t.Errorf("result %+v, want 4 runs made", res)
	}
	rows := readRows(t, rn.CSV)
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for _, r := range rows {
		if r.Experiment != "workers2" || r.NumWorkers != 2 || !r.CopyStreams || r.ImageSize != 16 {
			t.Errorf("row %+v does not carry the experiment's flags", r)
		}
	}
	line := regexp.MustCompile(`(?m)^\[4/4\] workers2 bs=4 compile=false: 400\.0 img/s \(\d+\.\d s\)$`)
	if !line.MatchString(log.String()) {
		t.Errorf("no plain progress line for the last run in:\n%s", log)
	}

	// The same sweep again: everything is in the CSV, nothing runs.
	res, err = rn.Run(context.Background(), cfg)
	if err != nil || res.Ran != 0 || res.DoneBefore != 4 {
		t.Errorf("rerun: %+v, %v; want nothing to do", res, err)
	}
	// One more repeat: only the third repeats run.
	cfg.Repeats = 3
	res, err = rn.Run(context.Background(), cfg)
	if err != nil || res.Ran != 2 {
		t.Errorf("repeats 3: %+v, %v; want 2 runs", res, err)
	}
	if n := len(readRows(t, rn.CSV)); n != 6 {
		t.Errorf("%d rows, want 6", n)
	}
}

func TestRunnerSkipsAFailedConfiguration(t *testing.T) {
	rn, log := newRunner(t, "fail:copy_streams")
	res, err := rn.Run(context.Background(), smallConfig(t, "original", "copy_streams"))
	if err == nil || !strings.Contains(err.Error(), "2 of 8 runs failed") {
		t.Fatalf("error %v, want 2 failures reported\n%s", err, log)
	}
	if res.Ran != 4 || len(res.Failed) != 2 || res.Skipped != 2 {
		t.Errorf("result %+v, want 4 ran, 2 failed, 2 skipped", res)
	}
	if !strings.Contains(log.String(), "    error: out of memory on purpose") {
		t.Errorf("the child's error output is not shown:\n%s", log)
	}
	if !strings.Contains(log.String(), "skipped: an earlier run of this configuration failed") {
		t.Errorf("no skip line:\n%s", log)
	}
	for _, r := range readRows(t, rn.CSV) {
		if r.Experiment != "original" {
			t.Errorf("row of %s written", r.Experiment)
		}
	}
}

func TestRunnerRejectsAnotherRunsRow(t *testing.T) {
	rn, _ := newRunner(t, "wrongrow:original")
	_, err := rn.Run(context.Background(), smallConfig(t, "original"))
	if err == nil || !strings.Contains(err.Error(), "bs=999") {
		t.Fatalf("error %v, want the mismatched row named", err)
	}
	if _, err := os.Stat(rn.CSV); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a mismatched row was appended (stat: %v)", err)
	}
}

func TestRunnerInterruptKeepsOnlyCompleteRows(t *testing.T) {
	for _, mode := range []string{"hang", "hangkill"} {
		t.Run(mode, func(t *testing.T) {
			rn, log := newRunner(t, mode+":copy_streams")
			mark := filepath.Join(t.TempDir(), "started")
			rn.Env = append(rn.Env, "GOINFER_SWEEP_TEST_MARK="+mark)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				for {
					if _, err := os.Stat(mark); err == nil {
						cancel()
						return
					}
					select {
					case <-ctx.Done():
						return
					case <-time.After(10 * time.Millisecond):
					}
				}
			}()
			start := time.Now()
			res, err := rn.Run(ctx, smallConfig(t, "original", "copy_streams"))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("error %v, want context.Canceled\n%s", err, log)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("interrupt took %s", d)
			}
			if res.Ran != 1 {
				t.Errorf("%d runs finished, want 1 (original bs=1, before the hang)", res.Ran)
			}
			data, _ := os.ReadFile(rn.CSV)
			if !bytes.HasSuffix(data, []byte("\n")) {
				t.Errorf("CSV does not end with a complete line:\n%s", data)
			}
			if rows := readRows(t, rn.CSV); len(rows) != 1 {
				t.Errorf("%d rows, want 1", len(rows))
			}
			if !strings.Contains(log.String(), "[interrupted] copy_streams bs=1 compile=false: no row written") {
				t.Errorf("log:\n%s", log)
			}
		})
	}
}

func TestRunnerTimeout(t *testing.T) {
	rn, log := newRunner(t, "hang:original")
	rn.Timeout = 300 * time.Millisecond
	cfg := smallConfig(t, "original")
	cfg.BatchSizes = []int{1}
	cfg.Repeats = 1
	_, err := rn.Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Errorf("error %v, want a timeout\n%s", err, log)
	}
}

func TestProgressBar(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, false, 100, 10, 2, 8)
	defer p.close()
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	if got := p.barLine(); got != "[#####-------------------]  20% 2/10 ETA ?" {
		t.Errorf("bar before any run: %q", got)
	}
	run := Run{Experiment: "workers2", BatchSize: 32}
	p.start(run)
	now = now.Add(4 * time.Second)
	p.finish(run, 1234.56, 4*time.Second, nil)
	p.start(run)
	now = now.Add(time.Second)
	// 7 runs left at 4 s each, 1 s into the current one: 27 s.
	if got := p.barLine(); got != "[#######-----------------]  30% 3/10 ETA 27s  workers2 bs=32 compile=false 1.0 s" {
		t.Errorf("bar: %q", got)
	}
	if got := b.String(); got != "[3/10] workers2 bs=32 compile=false: 1234.6 img/s (4.0 s)\n" {
		t.Errorf("plain output %q", got)
	}
	p.width = 20
	if got := p.barLine(); len(got) != 19 {
		t.Errorf("bar not cut to the width: %q", got)
	}
	if got := fmtETA(3*time.Hour + 5*time.Minute + 7*time.Second); got != "3h05m" {
		t.Errorf("fmtETA = %q", got)
	}
}
