package irexec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"goinfer/internal/engine/cpu/parallel"
)

// Split runs a batch as chunks of a per-chunk plan, one single-threaded
// Exec per worker, the workers taking chunks in turn. At large batches a
// step of a whole-batch plan streams every activation through memory
// (MobileNetV3's 112x112 maps are tens of MB at batch 32), while a chunk's
// activations stay in its core's caches from one step to the next, and the
// workers never wait on each other inside a forward. It is only valid for
// graphs whose images are independent (no op mixes the batch dimension):
// the caller says so by using it.
type Split struct {
	p     *Plan
	execs []*Exec
	// pool runs the chunks, worker w on execs[w]; ownPool says whether
	// Close closes it.
	pool    *parallel.Pool
	ownPool bool
	// chunk is the images of one plan forward; inBytes and outBytes are
	// each input's and output's bytes per chunk.
	chunk             int
	inBytes, outBytes []int
	// job is the running call's: its context, whole-batch buffers, each
	// worker's chunk views and first error.
	job splitJob
}

// splitJob runs one chunk per task on the worker's Exec (parallel.Job).
type splitJob struct {
	s       *Split
	ctx     context.Context
	in, out [][]byte
	ci, co  [][][]byte // per worker
	errs    []error    // per worker
	// prof, set by Profile, receives each worker's step times.
	prof [][]time.Duration
}

// NewSplit makes a Split of workers Execs over p, a plan compiled for
// chunk images (its inputs' and outputs' leading dimension) with one
// thread, run by a pool of its own.
func NewSplit(p *Plan, chunk, workers int) (*Split, error) {
	if workers < 1 {
		return nil, fmt.Errorf("irexec: Split of %d-image chunks on %d workers", chunk, workers)
	}
	pool := parallel.New(workers)
	s, err := NewSplitShared(p, chunk, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownPool = true
	return s, nil
}

// NewSplitShared is NewSplit on pool's workers, one Exec each; pool stays
// the caller's and must not run anything else during Run.
func NewSplitShared(p *Plan, chunk int, pool *parallel.Pool) (*Split, error) {
	if chunk < 1 {
		return nil, fmt.Errorf("irexec: Split of %d-image chunks", chunk)
	}
	if p.threads != 1 {
		return nil, fmt.Errorf("irexec: Split over a plan of %d threads: compile it with Threads 1", p.threads)
	}
	s := &Split{p: p, pool: pool, chunk: chunk}
	for _, list := range []struct {
		vals  []int
		bytes *[]int
	}{{p.inputs, &s.inBytes}, {p.outputs, &s.outBytes}} {
		for _, v := range list.vals {
			val := &p.vals[v]
			if len(val.shape) == 0 || val.shape[0] != chunk {
				return nil, fmt.Errorf("irexec: Split: %q has shape %v, not a leading dimension of %d images", val.name, val.shape, chunk)
			}
			*list.bytes = append(*list.bytes, val.nbytes)
		}
	}
	workers := pool.Size()
	s.job = splitJob{s: s, ci: make([][][]byte, workers), co: make([][][]byte, workers), errs: make([]error, workers)}
	for w := range workers {
		s.execs = append(s.execs, p.NewExec())
		s.job.ci[w] = make([][]byte, len(s.inBytes))
		s.job.co[w] = make([][]byte, len(s.outBytes))
	}
	return s, nil
}

// MemoryBytes is the Execs' memory (arenas and scratch).
func (s *Split) MemoryBytes() int64 {
	var n int64
	for _, x := range s.execs {
		n += x.MemoryBytes()
	}
	return n
}

// Close releases the Execs, and the pool when it is the Split's own.
func (s *Split) Close() error {
	var err error
	for _, x := range s.execs {
		err = errors.Join(err, x.Close())
	}
	if s.ownPool {
		s.pool.Close()
	}
	return err
}

// Run computes n images (a multiple of the chunk): in[i] and out[i] hold
// n images of input and output i, laid out as Exec.Run's.
func (s *Split) Run(ctx context.Context, in, out [][]byte, n int) error {
	if n < 1 || n%s.chunk != 0 {
		return fmt.Errorf("irexec: Split.Run of %d images in chunks of %d", n, s.chunk)
	}
	if len(in) != len(s.inBytes) || len(out) != len(s.outBytes) {
		return fmt.Errorf("irexec: Split.Run with %d inputs and %d outputs, the graph has %d and %d", len(in), len(out), len(s.inBytes), len(s.outBytes))
	}
	chunks := n / s.chunk
	for i, b := range s.inBytes {
		if len(in[i]) != chunks*b {
			return fmt.Errorf("irexec: Split.Run: input %d has %d bytes, %d images need %d", i, len(in[i]), n, chunks*b)
		}
	}
	for i, b := range s.outBytes {
		if len(out[i]) != chunks*b {
			return fmt.Errorf("irexec: Split.Run: output %d has %d bytes, %d images need %d", i, len(out[i]), n, chunks*b)
		}
	}
	j := &s.job
	j.ctx, j.in, j.out = ctx, in, out
	clear(j.errs)
	s.pool.Run(j, chunks)
	j.ctx, j.in, j.out = nil, nil, nil
	return errors.Join(j.errs...)
}

// Run computes chunk task on worker's Exec (parallel.Job); after a
// worker's first error its later chunks are skipped.
func (j *splitJob) Run(worker, task int) {
	if j.errs[worker] != nil {
		return
	}
	s, ci, co := j.s, j.ci[worker], j.co[worker]
	for i, b := range s.inBytes {
		ci[i] = j.in[i][task*b : (task+1)*b]
	}
	for i, b := range s.outBytes {
		co[i] = j.out[i][task*b : (task+1)*b]
	}
	var err error
	if j.prof != nil {
		err = s.execs[worker].runTimed(j.ctx, ci, co, j.prof[worker])
	} else {
		err = s.execs[worker].Run(j.ctx, ci, co)
	}
	if err != nil {
		j.errs[worker] = fmt.Errorf("irexec: Split chunk %d: %w", task, err)
	}
	clear(ci)
	clear(co)
}
