package irexec

import (
	"context"
	"errors"
	"fmt"

	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/engine/cpu/parallel"
	"goinfer/internal/engine/cpu/winograd"
	"goinfer/internal/tensor"
)

// Exec is one worker's state for running a plan: its arena (activations
// and convolution workspace), per-worker scratch and thread pool. It is not
// safe for concurrent use; Clone gives another goroutine its own. Execs of
// several plans that never run at once (one per batch size of a model)
// can share one pool and one arena (NewExecShared).
type Exec struct {
	p       *Plan
	pool    *parallel.Pool
	ownPool bool
	arena   []byte
	views   [][]byte    // per value, its bytes
	scratch [][]float32 // per worker
	shared  []float32
	job     taskJob
	rjob    rangeJob
	// Convolution state: the job structs and their buffers.
	conv   convJob
	phaseJ phaseJob
	packJ  packJob
	// reduceJ adds the partial sums of a convolution split over K.
	reduceJ reduceJob
	// convSplits caches each convolution's split for this pool's size.
	convSplits map[*convStep]convSplit
	phaseBuf   []float32
	sharedB    []float32
	// wino is the Winograd convolutions' state, nil without any.
	wino *winograd.Scratch
	// mmRun counts matrix-product steps run, and mmPacked says, per
	// worker, which run and row block its scratch holds L packed for.
	mmRun    uint64
	mmPacked []mmPackedL
	// seA and seAs hold a convolution's weights scaled per channel
	// (convStep.scaledA).
	seA  gemm.PackedA
	seAs [1]*gemm.PackedA
	// fuseImg is the image a stemPoolStep is computing.
	fuseImg int
	closed  bool
}

// arenaAlign keeps every slot of an arena on its own cache line.
const arenaAlign = 64

// arenaLayout returns each slot's offset in the arena, then the offsets of
// the phase planes, the shared packing of B and the Winograd workspace,
// and the arena's size.
func (p *Plan) arenaLayout() (slots []int, phase, sharedB, wino, size int) {
	slots = make([]int, len(p.slotBytes))
	for i, n := range p.slotBytes {
		slots[i] = size
		size += roundUp(n, arenaAlign)
	}
	phase = size
	size += roundUp(4*p.phase, arenaAlign)
	sharedB = size
	size += roundUp(4*p.sharedB, arenaAlign)
	wino = size
	size += roundUp(4*p.wino, arenaAlign)
	return slots, phase, sharedB, wino, size
}

// ArenaBytes is the memory one Exec's arena takes: activations and
// convolution workspace.
func (p *Plan) ArenaBytes() int64 {
	_, _, _, _, size := p.arenaLayout()
	return int64(size)
}

// NewExec allocates an Exec for p, with its own pool of p's thread count
// and its own arena.
func (p *Plan) NewExec() *Exec {
	_, _, _, _, size := p.arenaLayout()
	x := p.newExec(parallel.New(p.threads), alignedBytes(size))
	x.ownPool = true
	return x
}

// NewExecShared makes an Exec that runs on pool and keeps its activations
// in arena (at least ArenaBytes, 8-byte aligned as alignedBytes makes it),
// both owned by the caller, who must not run two Execs sharing them at
// once. Close leaves them alone.
func (p *Plan) NewExecShared(pool *parallel.Pool, arena []byte) (*Exec, error) {
	if pool == nil {
		return nil, errors.New("irexec: NewExecShared without a pool")
	}
	if int64(len(arena)) < p.ArenaBytes() {
		return nil, fmt.Errorf("irexec: arena of %d bytes, the plan needs %d", len(arena), p.ArenaBytes())
	}
	return p.newExec(pool, arena), nil
}

// NewArena allocates an arena of n bytes suitable for NewExecShared.
func NewArena(n int64) []byte { return alignedBytes(int(n)) }

func (p *Plan) newExec(pool *parallel.Pool, arena []byte) *Exec {
	x := &Exec{p: p, pool: pool, arena: arena}
	slotOff, phaseOff, sharedOff, winoOff, _ := p.arenaLayout()
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
			o := slotOff[r.slot]
			x.views[i] = arena[o : o+v.nbytes : o+v.nbytes]
		}
	}
	x.mmPacked = make([]mmPackedL, x.pool.Size())
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
		x.phaseBuf = f32(arena[phaseOff : phaseOff+4*p.phase])
		x.sharedB = f32(arena[sharedOff : sharedOff+4*p.sharedB])
	}
	if p.wino > 0 {
		x.wino = winograd.NewScratch(x.pool.Size(), f32(arena[winoOff:winoOff+4*p.wino]), p.winoWorker)
	}
	// Every convolution's split now, not on its first run: a split
	// batch's chunks go to whichever worker's Exec takes them, and an Exec
	// first used after warm-up would allocate inside a forward.
	for _, ps := range p.steps {
		if s, ok := ps.s.(*convStep); ok {
			x.convSplitFor(s)
		}
	}
	x.job.x, x.rjob.x = x, x
	return x
}

// Clone returns a new Exec over the same plan and weights, with its own
// pool and arena.
func (x *Exec) Clone() *Exec { return x.p.NewExec() }

// Plan returns the plan x runs.
func (x *Exec) Plan() *Plan { return x.p }

// MemoryBytes is the memory x holds: arena and scratch.
func (x *Exec) MemoryBytes() int64 {
	n := x.p.ArenaBytes() + 4*int64(len(x.shared)+len(x.scratch)*x.p.scratch)
	if x.wino != nil {
		n += x.wino.Bytes()
	}
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
	if x.ownPool {
		x.pool.Close()
	}
	x.arena, x.views, x.scratch, x.shared = nil, nil, nil, nil
	x.conv.scratch, x.phaseBuf, x.sharedB = nil, nil, nil
	return nil
}

// Run computes the graph's outputs from its inputs: in[i] holds graph
// input i's bytes (little-endian, its dtype and shape exactly), out[i]
// receives output i's. It checks ctx between steps and allocates nothing.
func (x *Exec) Run(ctx context.Context, in, out [][]byte) error {
	if err := x.checkIO(in, out); err != nil {
		return err
	}
	p := x.p
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

// checkIO checks that x is open and that in and out match the plan's
// inputs and outputs.
func (x *Exec) checkIO(in, out [][]byte) error {
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

// rangeJob splits [0, n) into tasks of whole grains (the last may be
// short), dealt out evenly: task t holds grains t*units/tasks up to
// (t+1)*units/tasks.
type rangeJob struct {
	x                   *Exec
	r                   ranger
	n, grain, units, nt int
}

func (j *rangeJob) Run(w, t int) {
	lo := t * j.units / j.nt * j.grain
	hi := min(j.n, (t+1)*j.units/j.nt*j.grain)
	j.r.rng(j.x, w, lo, hi)
}

// parRange runs r over [0, n) in tasks of at least grain indices, about
// four per worker so that uneven tasks even out, in a count the workers
// divide where the grains allow (parTasks), the grains dealt out evenly:
// 42 channel blocks for 2 workers are 6 tasks of 7 blocks, not 7 of 6 (4
// of which one worker ran while the other ran 3). From 4
// workers on, a range of more than one grain may go in chunks as thin as
// a quarter grain where whole grains would leave workers without one
// (batch 1's squeeze-and-excitation steps made 4 tasks for 16 workers).
func (x *Exec) parRange(r ranger, n, grain int) {
	if n <= 0 {
		return
	}
	workers := x.pool.Size()
	grain = max(grain, 1)
	if workers >= 4 && n > grain {
		grain = min(grain, max(grain/4, (n+workers-1)/workers))
	}
	units := (n + grain - 1) / grain
	nt := parTasks(units, workers)
	if workers == 1 || nt <= 1 {
		r.rng(x, 0, 0, n)
		return
	}
	x.rjob.r, x.rjob.n, x.rjob.grain, x.rjob.units, x.rjob.nt = r, n, grain, units, nt
	x.pool.Run(&x.rjob, nt)
	x.rjob.r = nil
}

// parTasks is how many tasks parRange deals units grains out to for
// workers workers: the most, tasksPerThread-1 to tasksPerThread a worker,
// that are equal and a multiple of the workers (12 stem strips on 2
// workers: 6 tasks of 2, where 8 tasks of 1 or 2 left one worker 7
// strips); on two or three workers, else the fewest more that are (the
// 14 strips of ResNet-18's 7x7 stem: 14 tasks of 1, where 8 tasks of 1
// or 2 ran 8:6 strips, 91% of two workers in TestSimThreads); else up to
// tasksPerThread a worker, dealt out evenly (fewer equal tasks would
// leave less for dynamic scheduling to even out when a worker loses its
// core).
func parTasks(units, workers int) int {
	for nt := tasksPerThread * workers; nt >= (tasksPerThread-1)*workers && workers > 1; nt -= workers {
		if units%nt == 0 {
			return nt
		}
	}
	if workers > 1 && workers < 4 {
		for nt := (tasksPerThread + 1) * workers; nt <= min(units, 4*tasksPerThread*workers); nt += workers {
			if units%nt == 0 {
				return nt
			}
		}
	}
	return min(units, tasksPerThread*workers)
}
