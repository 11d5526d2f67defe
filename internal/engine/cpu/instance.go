package cpu

import (
	"errors"
	"fmt"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu/parallel"
	"goinfer/internal/engine/cpu/winograd"
	"goinfer/internal/hugepage"
	"goinfer/internal/tensor"
)

// instance is one worker's private state: its stream, worker pool,
// activation slots and per-worker packing scratch.
type instance struct {
	m      *cpuModel
	plan   *plan
	stream stream
	pool   *parallel.Pool

	slots [][]float32 // activation slots, plan.chunk images each
	linC  []float32   // a linear step's product, Out x plan.chunk
	// phaseBuf holds a strided convolution's input split into phases.
	phaseBuf []float32
	// sharedB holds B packed once for all of a convolution's tasks.
	sharedB []float32
	// wino is the Winograd convolutions' state, nil without any.
	wino  *winograd.Scratch
	vals  [][]float32 // per value, the current call's view
	bytes int64

	conv  convJob
	phase phaseJob
	pack  packJob
	lin   linJob
	elt   eltJob

	closed bool
}

func newInstance(m *cpuModel, p *plan, threads int) *instance {
	in := &instance{m: m, plan: p, pool: parallel.NewIn(&m.cores, threads)}
	in.slots = make([][]float32, len(p.slotElems))
	for i, e := range p.slotElems {
		in.slots[i] = hugepage.Float32s(e * p.chunk)
		in.bytes += int64(4 * len(in.slots[i]))
	}
	in.linC = make([]float32, p.linScratch*p.chunk)
	in.vals = make([][]float32, len(p.dims))
	ws := make([]scratch, threads)
	for w := range ws {
		ws[w] = newScratch(p.maxKK)
		in.bytes += ws[w].bytes()
	}
	in.conv.scratch, in.lin.scratch = ws, ws
	in.elt.rows = make([][]float32, threads)
	for w := range in.elt.rows {
		in.elt.rows[w] = make([]float32, p.maxRow)
	}
	in.bytes += int64(4 * threads * p.maxRow)
	in.phaseBuf = hugepage.Float32s(p.phaseElems * p.chunk)
	in.sharedB = hugepage.Float32s(p.sharedElems)
	in.bytes += int64(4 * (len(in.linC) + len(in.phaseBuf) + len(in.sharedB)))
	if p.winoElems > 0 {
		in.wino = winograd.NewScratch(threads, hugepage.Float32s(p.winoElems), p.winoWorker)
		in.bytes += 4*int64(p.winoElems) + in.wino.Bytes()
	}
	return in
}

// Stream implements engine.Instance.
func (in *instance) Stream() engine.Stream { return &in.stream }

// MemoryBytes implements engine.Instance.
func (in *instance) MemoryBytes() int64 { return in.bytes }

// Forward implements engine.Instance: it runs the n images of in through the
// network now, on this goroutine and the instance's workers.
func (in *instance) Forward(src, dst engine.Buffer, n int) error {
	if in.closed {
		return errors.New("cpu: Forward on a closed instance")
	}
	if err := in.stream.check(); err != nil {
		return err
	}
	p := in.plan
	if n < 1 || n > p.maxBatch {
		return fmt.Errorf("cpu: Forward of %d images: batch must be in [1, MaxBatch=%d]", n, p.maxBatch)
	}
	inElems := p.inC * p.h * p.w
	x, err := bufferBytes(src, 0, n*inElems*p.inDType.Size(), "input")
	if err != nil {
		return fmt.Errorf("%w (%d images of %dx%dx%d %s)", err, n, p.inC, p.h, p.w, p.inDType)
	}
	y, err := bufferBytes(dst, 0, 4*n*p.classes, "output")
	if err != nil {
		return fmt.Errorf("%w (%d x %d float32 logits)", err, n, p.classes)
	}
	in.pass(x, tensor.BytesF32(y), n, nil)
	return nil
}

// pass runs n images of input x through the plan into logits, chunk by
// chunk. With sum non-nil it adds each step's wall time to sum[step]
// (the profile); Forward passes nil and reads no clock.
func (in *instance) pass(x []byte, logits []float32, n int, sum []time.Duration) {
	p := in.plan
	inElems := p.inC * p.h * p.w
	for c0 := 0; c0 < n; c0 += p.chunk {
		nc := min(p.chunk, n-c0)
		for v, s := range p.slotOf {
			if s >= 0 {
				in.vals[v] = in.slots[s][:nc*p.dims[v].Elements()]
			}
		}
		if p.inDType == tensor.Float32 {
			in.vals[0] = tensor.BytesF32(x[4*c0*inElems : 4*(c0+nc)*inElems])
		} else {
			sz := p.inDType.Size()
			j := &in.elt
			j.s, j.inBytes, j.out = p.input, x[sz*c0*inElems:sz*(c0+nc)*inElems], in.vals[0]
			in.runPlanes(j, nc*p.inC, p.h*p.w)
			j.inBytes = nil
		}
		for i, s := range p.steps {
			if sum == nil {
				s.run(in, nc)
				continue
			}
			t0 := time.Now()
			s.run(in, nc)
			sum[i] += time.Since(t0)
		}
		copy(logits[c0*p.classes:(c0+nc)*p.classes], in.vals[p.output])
	}
	clear(in.vals)
}

// Close implements engine.Instance: it stops the workers.
func (in *instance) Close() error {
	if in.closed {
		return errors.New("cpu: instance closed twice")
	}
	in.closed = true
	in.pool.Close()
	in.slots, in.vals, in.linC, in.phaseBuf, in.sharedB, in.wino = nil, nil, nil, nil, nil, nil
	in.m.release()
	return nil
}
