package cuda

import (
	"fmt"
	"runtime"
	"time"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
)

// LayerTime is the device time of one op of a forward pass (engine's,
// kept under this name for the cuda engine's callers).
type LayerTime = engine.LayerTime

// Profiler is implemented by cuda instances: per-op device times, each op
// timed as a CUDA graph of repeated calls.
type Profiler = engine.Profiler

// Memoryer is implemented by cuda instances: their memory split.
type Memoryer interface {
	Memory() MemoryStats
}

var (
	_ Profiler          = (*instance)(nil)
	_ Memoryer          = (*instance)(nil)
	_ engine.Instance   = (*instance)(nil)
	_ engine.Model      = (*cudaModel)(nil)
	_ engine.Device     = (*device)(nil)
	_ engine.HostBuffer = (*hostBuffer)(nil)
)

// ProfileLayers times each op of batch n's forward (input conversion
// first, logits bias last) on its own, as a CUDA graph of iters calls (the
// best of two launches), and returns each op's device time per call. Timed
// with events from the host instead, ops of a few microseconds measured the
// host's submission; in a graph they run back to back as in the forward,
// so the times add up to about the forward's. The input is whatever the
// activations hold.
func (i *instance) ProfileLayers(n, iters int) ([]LayerTime, error) {
	if n < 1 || n > i.m.opts.MaxBatch || iters < 1 {
		return nil, fmt.Errorf("cuda engine: profile batch %d, %d iterations: out of range", n, iters)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt := i.d.rt
	if err := rt.SetDevice(i.d.ordinal); err != nil {
		return nil, err
	}
	p := i.plans[n]
	if p == nil {
		var err error
		if p, err = i.lazyPlan(n); err != nil {
			return nil, err
		}
	}
	out, err := i.d.alloc(int64(n)*int64(i.m.graph.Classes)*4, "profile logits")
	if err != nil {
		return nil, err
	}
	defer rt.Free(out)
	in, err := i.d.alloc(int64(n)*int64(i.inBytes), "profile input")
	if err != nil {
		return nil, err
	}
	defer rt.Free(in)
	if err := rt.MemsetAsync(in, 0, int64(n)*int64(i.inBytes), i.stream); err != nil {
		return nil, err
	}
	reps := min(iters, 100)
	times := make([]float32, 0, len(p.ops)+2)
	timeOp := func(name string, run func() error) error {
		ms, err := i.timeCalls(run, reps)
		if err != nil {
			return fmt.Errorf("cuda engine: timing %s: %w", name, err)
		}
		times = append(times, ms)
		return nil
	}
	if err := timeOp("the input conversion", func() error { return i.enqueueInput(in, n) }); err != nil {
		return nil, err
	}
	for _, o := range p.ops {
		if err := timeOp(o.l.name, func() error { return i.runOp(o) }); err != nil {
			return nil, err
		}
	}
	if err := timeOp("the logits bias", func() error { return i.enqueueLogits(out, n) }); err != nil {
		return nil, err
	}
	mean := func(k int) time.Duration {
		return time.Duration(float64(times[k]) * float64(time.Millisecond))
	}
	res := []LayerTime{{Name: "input", Kind: "convert", Time: mean(0)}}
	for k, o := range p.ops {
		lt := LayerTime{Name: o.l.name, Kind: o.l.spec.kind.String(), Time: mean(k + 1)}
		if o.l.spec.kind == opConv {
			if o.mma != nil {
				lt.Algo = fmt.Sprintf("conv_mma split %d", o.mma.splits)
			} else if o.fused {
				lt.Algo = cu.ConvFwdAlgoName(o.algoF) + " fused"
			} else {
				lt.Algo = cu.ConvFwdAlgoName(o.algo)
				if o.epilogue {
					lt.Algo += " + epilogue"
				}
			}
		}
		res = append(res, lt)
	}
	res = append(res, LayerTime{Name: "logits", Kind: "bias", Time: mean(len(times) - 1)})
	return res, nil
}
