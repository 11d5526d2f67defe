package irexec

import (
	"fmt"
	"math"

	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// softmaxStep normalizes along one axis: the input is (outer, d, inner),
// and each of the outer*inner lines of d values (stride inner) becomes
// exp(x - max) / sum, or its log.
type softmaxStep struct {
	src, dst        int
	outer, d, inner int
	log, hard       bool
}

func buildSoftmax(nc *nodeCtx) (step, error) {
	op := any(nc.n.Op).(*ir.Softmax)
	x := nc.inVal(0)
	if x.dtype != tensor.Float32 {
		return nil, unsupportedf(x.dtype.String(), "Softmax of %s", x.dtype)
	}
	axis := op.Axis
	if axis < 0 {
		axis += len(x.shape)
	}
	if len(x.shape) == 0 {
		return nil, unsupportedf("of a scalar", "%s of a scalar", op.Kind())
	}
	if axis < 0 || axis >= len(x.shape) {
		return nil, fmt.Errorf("axis %d out of range for %v", op.Axis, x.shape)
	}
	s := &softmaxStep{src: nc.in[0], dst: nc.out[0], log: op.Log, hard: op.Hard}
	s.outer = x.shape[:axis].NumElements()
	if op.Coerce2D {
		// Opset < 13: each row of the 2-D view is normalized as a whole.
		s.d, s.inner = x.shape[axis:].NumElements(), 1
	} else {
		s.d, s.inner = x.shape[axis], x.shape[axis+1:].NumElements()
	}
	return s, nil
}

func (s *softmaxStep) run(x *Exec) error {
	x.parRange(s, s.outer*s.inner, max(1, eltGrain/max(s.d, 1)))
	return nil
}

func (s *softmaxStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.f32(s.src), x.f32(s.dst)
	for l := lo; l < hi; l++ {
		o, i := l/s.inner, l%s.inner
		base := o*s.d*s.inner + i
		if s.inner == 1 && !s.log && !s.hard {
			// A contiguous row: max, exponentials and scale in one
			// vectorized call while the row is in L1.
			vec.SoftmaxRow(dst[base:base+s.d], src[base:base+s.d])
			continue
		}
		m := math.Inf(-1)
		if s.inner == 1 {
			m = float64(rowMax(src[base : base+s.d]))
		} else {
			for k := 0; k < s.d; k++ {
				m = math.Max(m, float64(src[base+k*s.inner]))
			}
		}
		if s.hard {
			// One-hot of the first maximum.
			first := true
			for k := 0; k < s.d; k++ {
				v := float64(src[base+k*s.inner])
				dst[base+k*s.inner] = 0
				if first && v == m {
					dst[base+k*s.inner], first = 1, false
				}
			}
			continue
		}
		var sum float64
		for k := 0; k < s.d; k++ {
			sum += float64(expf(src[base+k*s.inner] - float32(m)))
		}
		if s.log {
			ls := math.Log(sum)
			for k := 0; k < s.d; k++ {
				dst[base+k*s.inner] = float32(float64(src[base+k*s.inner]) - m - ls)
			}
			continue
		}
		inv := 1 / sum
		for k := 0; k < s.d; k++ {
			dst[base+k*s.inner] = float32(float64(expf(src[base+k*s.inner]-float32(m))) * inv)
		}
	}
}

// rowMax is the largest of v (NaN if any is: Go's max propagates it,
// -Inf if v is empty), in four independent chains.
func rowMax(v []float32) float32 {
	inf := float32(math.Inf(-1))
	m0, m1, m2, m3 := inf, inf, inf, inf
	i := 0
	for ; i+4 <= len(v); i += 4 {
		m0, m1, m2, m3 = max(m0, v[i]), max(m1, v[i+1]), max(m2, v[i+2]), max(m3, v[i+3])
	}
	for ; i < len(v); i++ {
		m0 = max(m0, v[i])
	}
	return max(max(m0, m1), max(m2, m3))
}
