package irexec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	// chunk is the images of one plan forward; inBytes and outBytes are
	// each input's and output's bytes per chunk.
	chunk             int
	inBytes, outBytes []int
	errs              []error
}

// NewSplit makes a Split of workers Execs over p, a plan compiled for
// chunk images (its inputs' and outputs' leading dimension) with one
// thread.
func NewSplit(p *Plan, chunk, workers int) (*Split, error) {
	if chunk < 1 || workers < 1 {
		return nil, fmt.Errorf("irexec: Split of %d-image chunks on %d workers", chunk, workers)
	}
	if p.threads != 1 {
		return nil, fmt.Errorf("irexec: Split over a plan of %d threads: compile it with Threads 1", p.threads)
	}
	s := &Split{p: p, chunk: chunk, errs: make([]error, workers)}
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
	for range workers {
		s.execs = append(s.execs, p.NewExec())
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

// Close releases the Execs.
func (s *Split) Close() error {
	var err error
	for _, x := range s.execs {
		err = errors.Join(err, x.Close())
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
	var next atomic.Int64
	var wg sync.WaitGroup
	workers := min(len(s.execs), chunks)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := s.execs[w]
			ci, co := make([][]byte, len(in)), make([][]byte, len(out))
			s.errs[w] = nil
			for {
				c := int(next.Add(1)) - 1
				if c >= chunks {
					return
				}
				for i, b := range s.inBytes {
					ci[i] = in[i][c*b : (c+1)*b]
				}
				for i, b := range s.outBytes {
					co[i] = out[i][c*b : (c+1)*b]
				}
				if err := x.Run(ctx, ci, co); err != nil {
					s.errs[w] = fmt.Errorf("irexec: Split chunk %d: %w", c, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(s.errs[:workers]...)
}
