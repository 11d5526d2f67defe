package cuda

import (
	"fmt"
	"runtime"
	"time"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
)

// LayerTime is the device time of one op of a forward pass.
type LayerTime struct {
	Name string        // the graph node(s): "layer1.0.conv2+layer1.0.bn2+..."
	Kind string        // conv, maxpool, linear, ...
	Algo string        // the convolution algorithm and whether it ran fused
	Time time.Duration // mean over the iterations
}

// Profiler is implemented by cuda instances: per-op device times measured
// with CUDA events around each op, run outside any CUDA graph.
type Profiler interface {
	ProfileLayers(n, iters int) ([]LayerTime, error)
}

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

// ProfileLayers runs the forward of batch n iters times with an event
// between ops (input conversion first, logits bias last) and returns each
// op's mean device time. The input is whatever the activations hold.
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
	steps := len(p.ops) + 2
	evs := make([]cu.Event, steps+1)
	for k := range evs {
		e, err := rt.EventCreate(true)
		if err != nil {
			return nil, err
		}
		evs[k] = e
		defer rt.EventDestroy(e)
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
	sum := make([]float64, steps)
	for it := 0; it <= iters; it++ { // iteration 0 warms up
		if err := rt.EventRecord(evs[0], i.stream); err != nil {
			return nil, err
		}
		if err := i.enqueueInput(in, n); err != nil {
			return nil, err
		}
		if err := rt.EventRecord(evs[1], i.stream); err != nil {
			return nil, err
		}
		for k, o := range p.ops {
			if err := i.runOp(o); err != nil {
				return nil, fmt.Errorf("cuda engine: %s: %w", o.l.name, err)
			}
			if err := rt.EventRecord(evs[k+2], i.stream); err != nil {
				return nil, err
			}
		}
		if err := i.enqueueLogits(out, n); err != nil {
			return nil, err
		}
		if err := rt.EventRecord(evs[steps], i.stream); err != nil {
			return nil, err
		}
		if err := rt.EventSynchronize(evs[steps]); err != nil {
			return nil, err
		}
		if it == 0 {
			continue
		}
		for k := 0; k < steps; k++ {
			ms, err := rt.EventElapsed(evs[k], evs[k+1])
			if err != nil {
				return nil, err
			}
			sum[k] += float64(ms)
		}
	}
	mean := func(k int) time.Duration {
		return time.Duration(sum[k] / float64(iters) * float64(time.Millisecond))
	}
	res := []LayerTime{{Name: "input", Kind: "convert", Time: mean(0)}}
	for k, o := range p.ops {
		lt := LayerTime{Name: o.l.name, Kind: o.l.spec.kind.String(), Time: mean(k + 1)}
		if o.l.spec.kind == opConv {
			if o.fused {
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
	res = append(res, LayerTime{Name: "logits", Kind: "bias", Time: mean(steps - 1)})
	return res, nil
}
