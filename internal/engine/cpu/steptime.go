package cpu

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/tensor"
)

var _ engine.Profiler = (*instance)(nil)

// ProfileLayers implements engine.Profiler for the ResNet plan: iters
// forwards of n images through Forward's pass with the clock read around
// each step, and each step's median over the forwards (summed over the
// chunks of a forward). A step's time includes handing its tasks to the
// pool and waiting for the last worker. The input is seeded noise.
func (in *instance) ProfileLayers(n, iters int) ([]engine.LayerTime, error) {
	if in.closed {
		return nil, errors.New("cpu: ProfileLayers on a closed instance")
	}
	p := in.plan
	if n < 1 || n > p.maxBatch || iters < 1 {
		return nil, fmt.Errorf("cpu: profile of batch %d, %d forwards: batch must be in [1, MaxBatch=%d], forwards at least 1", n, iters, p.maxBatch)
	}
	x := noiseInput(n*p.inC*p.h*p.w, p.inDType)
	logits := make([]float32, n*p.classes)
	// One untimed forward first: the first touches every page.
	in.pass(x, logits, n, nil)
	times := make([][]time.Duration, iters)
	for it := range times {
		times[it] = make([]time.Duration, len(p.steps))
		in.pass(x, logits, n, times[it])
	}
	med := engine.MedianTimes(times, 1)
	res := make([]engine.LayerTime, len(p.steps))
	for i, s := range p.steps {
		res[i] = engine.LayerTime{Name: p.names[i], Kind: p.ops[i], Algo: s.describe(), Time: med[i]}
	}
	return res, nil
}

// noiseInput is elems seeded normal values in dtype's encoding (uint8:
// uniform bytes).
func noiseInput(elems int, dtype tensor.DType) []byte {
	r := rand.New(rand.NewPCG(uint64(elems), 1))
	b := make([]byte, elems*dtype.Size())
	switch dtype {
	case tensor.Uint8:
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
	case tensor.Float16:
		for i := range elems {
			h := tensor.Float32ToF16(float32(r.NormFloat64()))
			b[2*i], b[2*i+1] = byte(h), byte(h>>8)
		}
	default:
		f := tensor.BytesF32(b)
		for i := range f {
			f[i] = float32(r.NormFloat64())
		}
	}
	return b
}

func (s *convStep) describe() string {
	d := fmt.Sprintf("convStep %dx%d/%d %d->%d %dx%d", s.k, s.k, s.stride, s.inC, s.outC, s.oh, s.ow)
	if s.groups > 1 {
		d += fmt.Sprintf(" groups %d", s.groups)
	}
	switch s.layout {
	case layoutPhases:
		d += " phases"
		if s.reusePhases {
			d += " (shared)"
		}
	case layoutGather:
		d += " gather"
	}
	return d + epilogueSuffix(s.res >= 0, s.relu)
}

func (s *winoStep) describe() string {
	l := s.l
	return fmt.Sprintf("winoStep F(4x4,3x3) %d->%d %dx%d", l.C, l.K, l.OH, l.OW) + epilogueSuffix(s.res >= 0, l.ReLU)
}

func (s *linearStep) describe() string { return fmt.Sprintf("linearStep %d->%d", s.in, s.out) }

func (s *eltStep) describe() string {
	switch s.kind {
	case eltBN:
		return fmt.Sprintf("eltStep batchnorm %dch", s.c)
	case eltReLU:
		return fmt.Sprintf("eltStep relu %dch", s.c)
	case eltAdd:
		return fmt.Sprintf("eltStep add %dch", s.c)
	case eltMaxPool:
		return fmt.Sprintf("eltStep maxpool %dx%d/%d %dch %dx%d", s.mp.KH, s.mp.KW, s.mp.SH, s.c, s.mp.OutH, s.mp.OutW)
	case eltAvgPool:
		return fmt.Sprintf("eltStep avgpool %dch", s.c)
	}
	return "eltStep"
}

// epilogueSuffix names what a convolution fuses into its stores.
func epilogueSuffix(residual, relu bool) string {
	var d string
	if residual {
		d += " +add"
	}
	if relu {
		d += " +relu"
	}
	return d
}
