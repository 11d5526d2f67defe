// Package sweep runs `goinfer bench` over a grid of experiments, batch sizes
// and compile settings, each run in a fresh process so that every cold
// start (warmup latency) is real, and appends one row per run to one CSV.
//
// Experiments are named presets of bench flags (see Presets): the
// reference's CHANGELOG steps (original, copy_streams, workers2-4) and
// goinfer's own (precision, input dtype, bench's defaults). Other bench
// flags given to the sweep (BenchFlags) are forwarded to every run; an
// experiment's own flags win over them.
//
// The sweep is resumable: a configuration (experiment, batch size, compile
// setting and the effective bench flags that rows record) counts as done
// when the CSV holds Repeats rows for it, and only the missing repeats run.
// Each run writes its row to a private file; the sweep checks it and
// appends it to the CSV in one write, so interrupting a sweep (Ctrl-C,
// context cancellation) leaves only complete rows.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"goinfer/internal/metrics"
)

// Runner runs a sweep's bench invocations as child processes.
type Runner struct {
	// Command is the program and leading arguments that make `goinfer
	// bench` (normally the running binary and "bench"); a run's flags
	// follow.
	Command []string
	// Env is added to the children's environment.
	Env []string
	// CSV is the results file the rows are appended to.
	CSV string
	// Log receives progress (normally stderr).
	Log io.Writer
	// Terminal draws a progress bar with an ETA; otherwise one plain line
	// per run.
	Terminal bool
	// Width is the terminal's width for the bar (0: 80).
	Width int
	// Verbose copies the children's output to Log (and turns the bar off,
	// which that output would break).
	Verbose bool
	// Timeout bounds each run (0: no limit), so one hung run cannot stall
	// the sweep.
	Timeout time.Duration
	// KillAfter is how long a run may take to stop after SIGINT (on
	// interruption or timeout) before it is killed (0: 5 s).
	KillAfter time.Duration
}

// Failure is a run that did not produce a row.
type Failure struct {
	Run Run
	Err error
}

// Result says what a sweep did.
type Result struct {
	Total      int // runs in the whole grid
	DoneBefore int // already in the CSV at the start
	Ran        int // completed and appended now
	Skipped    int // not tried because their configuration failed earlier
	Failed     []Failure
}

// Run runs the runs of cfg still missing from the CSV. After a run fails,
// the other repeats of its configuration are skipped (they would fail the
// same way) and the rest of the grid goes on; the returned error then lists
// the failures. Cancelling ctx stops the current run (SIGINT, then SIGKILL
// after KillAfter) and returns ctx's error with every finished row saved.
func (rn *Runner) Run(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	if len(rn.Command) == 0 {
		return res, errors.New("sweep: no bench command")
	}
	log := rn.Log
	if log == nil {
		log = io.Discard
	}
	rows, note, err := loadCSV(rn.CSV)
	if err != nil {
		return res, err
	}
	if note != "" {
		fmt.Fprintln(log, "sweep: "+note)
	}
	plan, err := cfg.Plan(rows)
	if err != nil {
		return res, err
	}
	res.Total = cfg.Total()
	res.DoneBefore = res.Total - len(plan)
	fmt.Fprintf(log, "sweep: %s x %s x %s x %s = %s; %d already in %s; %d to run\n",
		count(len(cfg.Experiments), "experiment"), count(len(cfg.BatchSizes), "batch size"),
		count(len(cfg.Compile), "compile setting"), count(cfg.Repeats, "repeat"), count(res.Total, "run"),
		res.DoneBefore, rn.CSV, len(plan))
	if len(plan) == 0 {
		return res, nil
	}
	tmp, err := os.MkdirTemp("", "goinfer-sweep-")
	if err != nil {
		return res, fmt.Errorf("sweep: %w", err)
	}
	defer os.RemoveAll(tmp)

	prog := newProgress(log, rn.Terminal && !rn.Verbose, rn.Width, res.Total, res.DoneBefore, len(plan))
	defer prog.close()
	failed := map[string]bool{} // configurations, by Run.String
	for i, run := range plan {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if failed[run.String()] {
			prog.skip(run, "an earlier run of this configuration failed")
			res.Skipped++
			continue
		}
		prog.start(run)
		t0 := time.Now()
		row, err := rn.execute(ctx, run, filepath.Join(tmp, fmt.Sprintf("run-%d.csv", i)))
		d := time.Since(t0)
		if err != nil && ctx.Err() != nil {
			prog.note("[interrupted] %s: no row written", run)
			return res, ctx.Err()
		}
		if err == nil {
			if err = metrics.AppendRow(rn.CSV, row); err != nil {
				return res, fmt.Errorf("sweep: %w", err)
			}
			res.Ran++
			prog.finish(run, row.Throughput, d, nil)
			continue
		}
		prog.finish(run, 0, d, err)
		if detail := errDetail(err); detail != "" {
			prog.note("%s", indent(detail, "    "))
		}
		res.Failed = append(res.Failed, Failure{Run: run, Err: err})
		failed[run.String()] = true
	}
	if len(res.Failed) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%d of %d runs failed:", len(res.Failed), len(plan))
		for _, f := range res.Failed {
			fmt.Fprintf(&b, "\n  %s: %s", f.Run, firstLine(f.Err.Error()))
		}
		return res, errors.New(b.String())
	}
	return res, nil
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// runError is a failed bench run: what happened and the end of its output.
type runError struct {
	msg    string
	output string
}

func (e *runError) Error() string {
	if e.output == "" {
		return e.msg
	}
	return e.msg + "\n" + e.output
}

func errDetail(err error) string {
	var re *runError
	if errors.As(err, &re) {
		return re.output
	}
	return ""
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

// execute runs one bench process writing its row to out, and returns that
// row after checking it is the run's.
func (rn *Runner) execute(ctx context.Context, run Run, out string) (metrics.Row, error) {
	rctx := ctx
	if rn.Timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, rn.Timeout)
		defer cancel()
	}
	args := slices.Concat(rn.Command[1:], run.Args,
		[]string{"--results_dir=" + filepath.Dir(out), "--output_file=" + filepath.Base(out)})
	cmd := exec.CommandContext(rctx, rn.Command[0], args...)
	cmd.Env = append(os.Environ(), rn.Env...)
	tail := &tailBuffer{max: 4 << 10}
	var w io.Writer = tail
	if rn.Verbose && rn.Log != nil {
		w = io.MultiWriter(tail, rn.Log)
	}
	cmd.Stdout, cmd.Stderr = w, w
	// Ask bench to stop as Ctrl-C would (it then writes no row); kill it
	// if it does not within WaitDelay.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = rn.KillAfter
	if cmd.WaitDelay <= 0 {
		cmd.WaitDelay = 5 * time.Second
	}
	err := cmd.Run()
	switch {
	case err != nil && errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		return metrics.Row{}, &runError{msg: fmt.Sprintf("timed out after %s (raise --timeout)", rn.Timeout), output: tail.String()}
	case err != nil:
		return metrics.Row{}, &runError{msg: fmt.Sprintf("bench: %v", err), output: tail.String()}
	}
	row, err := readRunRow(out)
	if err != nil {
		return metrics.Row{}, &runError{msg: err.Error(), output: tail.String()}
	}
	if row.Experiment != run.Experiment || row.BatchSize != run.BatchSize || row.Compile != run.Compile {
		return metrics.Row{}, fmt.Errorf("bench wrote a row for experiment %q bs=%d compile=%t, want %s",
			row.Experiment, row.BatchSize, row.Compile, run)
	}
	os.Remove(out)
	return row, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if t.cut {
		s = "..." + s
	}
	return s
}
