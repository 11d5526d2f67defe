package irexec

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"goinfer/internal/ir"
)

// TestProfileSplitAB alternates forwards of one whole-batch plan and of a
// Split in one process, so that both see the same load on a shared
// machine, and prints each one's minimum, 25th percentile and median. A
// tool, not a check: it runs only with IREXEC_SPLIT_AB=model (an arch or
// .onnx file), with IREXEC_BATCH (default 32), IREXEC_SPLIT (the chunk,
// default 1), IREXEC_THREADS (default GOMAXPROCS) and IREXEC_ITERS
// (default 15) pairs of forwards.
func TestProfileSplitAB(t *testing.T) {
	model := os.Getenv("IREXEC_SPLIT_AB")
	if model == "" {
		t.Skip("a profiling tool: set IREXEC_SPLIT_AB=model to run it")
	}
	batch, chunk, iters := envInt("IREXEC_BATCH", 32), envInt("IREXEC_SPLIT", 1), profileIters()
	g, err := profileGraph(model)
	if err != nil {
		t.Fatal(err)
	}
	compile := func(n, threads int) *Plan {
		b, _, err := ir.Optimize(g, n)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Compile(context.Background(), b, Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	whole := compile(batch, envInt("IREXEC_THREADS", 0))
	x := whole.NewExec()
	defer x.Close()
	s, err := NewSplit(compile(chunk, 1), chunk, whole.threads)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in := [][]byte{make([]byte, whole.vals[whole.inputs[0]].nbytes)}
	out := make([][]byte, len(whole.outputs))
	for i, v := range whole.outputs {
		out[i] = make([]byte, whole.vals[v].nbytes)
	}
	var tw, ts []float64
	for range iters {
		t0 := time.Now()
		if err := x.Run(context.Background(), in, out); err != nil {
			t.Fatal(err)
		}
		tw = append(tw, float64(time.Since(t0).Microseconds())/1e3)
		t0 = time.Now()
		if err := s.Run(context.Background(), in, out, batch); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, float64(time.Since(t0).Microseconds())/1e3)
	}
	slices.Sort(tw)
	slices.Sort(ts)
	fmt.Printf("%s bs%d threads %d, %d alternating pairs (ms): whole batch min %.1f p25 %.1f median %.1f | split in chunks of %d min %.1f p25 %.1f median %.1f\n",
		model, batch, whole.threads, iters, tw[0], tw[iters/4], tw[iters/2], chunk, ts[0], ts[iters/4], ts[iters/2])
}
