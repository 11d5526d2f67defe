package irexec

import (
	"context"
	"errors"
	"fmt"

	"goinfer/internal/engine/cpu/parallel"
	"goinfer/internal/tensor"
)

// Exec is one worker's state for running a plan: its arena, per-worker
// scratch and thread pool. It is not safe for concurrent use; Clone gives
// another goroutine its own.
type Exec struct {
	p       *Plan
	pool    *parallel.Pool
	slots   [][]byte
	views   [][]byte    // per value, its bytes
	scratch [][]float32 // per worker
	shared  []float32
	job     taskJob
	rjob    rangeJob
	// Convolution state: the job structs and their buffers.
	conv     convJob
	phaseJ   phaseJob
	packJ    packJob
	phaseBuf []float32
	sharedB  []float32
	closed   bool
}

// NewExec allocates an Exec for p, with p's thread count.
func (p *Plan) NewExec() *Exec {
	x := &Exec{p: p, pool: parallel.New(p.threads)}
	x.slots = make([][]byte, len(p.slotBytes))
	for i, n := range p.slotBytes {
		x.slots[i] = alignedBytes(n)
	}
	x.views = make([][]byte, len(p.vals))
	for i := range p.vals {
		v := &p.vals[i]
		r := &p.vals[p.root(i)]
		switch {
		case r.kind == kindConst:
			if r.cnst != nil { // else only packed at compile time
				x.views[i] = r.cnst[:v.nbytes:v.nbytes]
			}
		case r.slot >= 0:
			x.views[i] = x.slots[r.slot][:v.nbytes:v.nbytes]
		}
	}
	x.scratch = make([][]float32, x.pool.Size())
	for w := range x.scratch {
		x.scratch[w] = make([]float32, p.scratch)
	}
	x.shared = make([]float32, p.shared)
	if p.maxKK > 0 {
		x.conv.scratch = make([]convScratch, x.pool.Size())
		for w := range x.conv.scratch {
			x.conv.scratch[w] = newConvScratch(p.maxKK)
		}
		x.phaseBuf = make([]float32, p.phase)
		x.sharedB = make([]float32, p.sharedB)
	}
	x.job.x, x.rjob.x = x, x
	return x
}

// Clone returns a new Exec over the same plan and weights.
func (x *Exec) Clone() *Exec { return x.p.NewExec() }

// Plan returns the plan x runs.
func (x *Exec) Plan() *Plan { return x.p }

// MemoryBytes is the memory x holds: arena and scratch.
func (x *Exec) MemoryBytes() int64 {
	n := x.p.ArenaBytes() + 4*int64(len(x.shared)+len(x.scratch)*x.p.scratch+len(x.phaseBuf)+len(x.sharedB))
	for i := range x.conv.scratch {
		n += x.conv.scratch[i].bytes()
	}
	return n
}

// Close stops x's workers.
func (x *Exec) Close() error {
	if x.closed {
		return errors.New("irexec: Exec closed twice")
	}
	x.closed = true
	x.pool.Close()
	x.slots, x.views, x.scratch, x.shared = nil, nil, nil, nil
	x.conv.scratch, x.phaseBuf, x.sharedB = nil, nil, nil
	return nil
}

// Run computes the graph's outputs from its inputs: in[i] holds graph
// input i's bytes (little-endian, its dtype and shape exactly), out[i]
// receives output i's. It checks ctx between steps and allocates nothing.
func (x *Exec) Run(ctx context.Context, in, out [][]byte) error {
	if x.closed {
		return errors.New("irexec: Run on a closed Exec")
	}
	p := x.p
	if len(in) != len(p.inputs) || len(out) != len(p.outputs) {
		return fmt.Errorf("irexec: Run with %d inputs and %d outputs, the graph has %d and %d", len(in), len(out), len(p.inputs), len(p.outputs))
	}
	for i, v := range p.inputs {
		if len(in[i]) != p.vals[v].nbytes {
			val := &p.vals[v]
			return fmt.Errorf("irexec: input %q: got %d bytes, %s%v needs %d", val.name, len(in[i]), val.dtype, val.shape, val.nbytes)
		}
	}
	for i, v := range p.outputs {
		if len(out[i]) != p.vals[v].nbytes {
			val := &p.vals[v]
			return fmt.Errorf("irexec: output %q: got a %d-byte buffer, %s%v needs %d", val.name, len(out[i]), val.dtype, val.shape, val.nbytes)
		}
	}
	for i, v := range p.inputs {
		copy(x.views[v], in[i])
	}
	for _, s := range p.steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.s.run(x); err != nil {
			return fmt.Errorf("irexec: %s: %w", s.node, err)
		}
	}
	for i, v := range p.outputs {
		copy(out[i], x.views[v])
	}
	return nil
}

// RunTensors is Run over tensors, allocating the outputs: the convenient
// form for tools and tests.
func (x *Exec) RunTensors(ctx context.Context, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	p := x.p
	if len(in) != len(p.inputs) {
		return nil, fmt.Errorf("irexec: %d inputs given, the graph has %d", len(in), len(p.inputs))
	}
	ib := make([][]byte, len(in))
	for i, t := range in {
		v := &p.vals[p.inputs[i]]
		if t.DType != v.dtype || !t.Shape.Equal(v.shape) {
			return nil, fmt.Errorf("irexec: input %q: got %s%v, want %s%v", v.name, t.DType, t.Shape, v.dtype, v.shape)
		}
		ib[i] = t.Data
	}
	outs := make([]*tensor.Tensor, len(p.outputs))
	ob := make([][]byte, len(outs))
	for i, o := range p.outputs {
		v := &p.vals[o]
		outs[i] = tensor.New(v.dtype, v.shape...)
		ob[i] = outs[i].Data
	}
	if err := x.Run(ctx, ib, ob); err != nil {
		return nil, err
	}
	return outs, nil
}

// view returns value v's bytes.
func (x *Exec) view(v int) []byte { return x.views[v] }

// f32 returns value v's bytes as float32s.
func (x *Exec) f32(v int) []float32 { return f32(x.views[v]) }

// task is a step's parallel body.
type task interface {
	task(x *Exec, worker, t int)
}

// taskJob adapts a task to the pool.
type taskJob struct {
	x *Exec
	t task
}

func (j *taskJob) Run(w, t int) { j.t.task(j.x, w, t) }

// par runs tasks [0, n) of t on x's workers.
func (x *Exec) par(t task, n int) {
	x.job.t = t
	x.pool.Run(&x.job, n)
	x.job.t = nil
}

// ranger is a step's body over a range of some index space.
type ranger interface {
	rng(x *Exec, worker, lo, hi int)
}

// rangeJob splits [0, n) into chunks of at least grain.
type rangeJob struct {
	x        *Exec
	r        ranger
	n, chunk int
}

func (j *rangeJob) Run(w, t int) {
	lo := t * j.chunk
	j.r.rng(j.x, w, lo, min(j.n, lo+j.chunk))
}

// parRange runs r over [0, n) in chunks of at least grain indices, about
// four per worker so that uneven chunks even out.
func (x *Exec) parRange(r ranger, n, grain int) {
	if n <= 0 {
		return
	}
	workers := x.pool.Size()
	chunk := max(grain, (n+4*workers-1)/(4*workers), 1)
	if workers == 1 || chunk >= n {
		r.rng(x, 0, 0, n)
		return
	}
	x.rjob.r, x.rjob.n, x.rjob.chunk = r, n, chunk
	x.pool.Run(&x.rjob, (n+chunk-1)/chunk)
	x.rjob.r = nil
}
