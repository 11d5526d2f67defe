package irexec

import (
	"math"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// genericStep is the elementwise path for dtypes without a kernel of their
// own (float64, float16, bfloat16, int8, uint8, mixed-dtype Pow): each
// element is loaded as float64, computed with ir's semantics and stored
// back as its dtype would (floats rounded, integers truncated and
// wrapped), as ir's reference does. Inputs broadcast; one to three of
// them.
type genericStep struct {
	ins []int
	dts []tensor.DType
	dst int
	out tensor.DType
	it  *rowIter
	f   func(v []float64) float64
}

// numeric reports whether the generic path can load and store dt.
func numeric(dt tensor.DType) bool { return castable(dt) }

func newGeneric(nc *nodeCtx, ins []int, f func(v []float64) float64) *genericStep {
	p := nc.c.p
	out := p.vals[nc.out[0]]
	strs := make([][]int, 0, len(ins)+1)
	s := &genericStep{ins: ins, dst: nc.out[0], out: out.dtype, f: f}
	for _, in := range ins {
		strs = append(strs, broadcastStrides(p.vals[in].shape, out.shape))
		s.dts = append(s.dts, p.vals[in].dtype)
	}
	shape, ss := collapse(out.shape, append(strs, stridesOf(out.shape))...)
	s.it = newRowIter(shape, ss[:len(ins)])
	return s
}

func (s *genericStep) run(x *Exec) error {
	x.parRange(s, s.it.rows, max(1, eltGrain/max(1, s.it.inner)))
	return nil
}

func (s *genericStep) rng(x *Exec, _, lo, hi int) {
	var args [3]float64
	var offs [3]int
	it := s.it
	n := it.inner
	dst := x.view(s.dst)
	for row := lo; row < hi; row++ {
		for o := range s.ins {
			offs[o] = it.offset(o, row)
		}
		for i := 0; i < n; i++ {
			for o, in := range s.ins {
				args[o] = loadFloat(x.view(in), s.dts[o], offs[o]+i*it.in[o])
			}
			storeFloat(dst, s.out, row*n+i, s.f(args[:len(s.ins)]))
		}
	}
}

// genericBinary are the binary ops of the generic path, in float64 as ir
// defines them; intDiv truncates (integer Div).
func genericBinary(fn ir.BinaryKind, intDiv bool) func(v []float64) float64 {
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	switch fn {
	case ir.OpAdd:
		return func(v []float64) float64 { return v[0] + v[1] }
	case ir.OpSub:
		return func(v []float64) float64 { return v[0] - v[1] }
	case ir.OpMul:
		return func(v []float64) float64 { return v[0] * v[1] }
	case ir.OpDiv:
		if intDiv {
			return func(v []float64) float64 {
				if v[1] == 0 {
					return 0 // undefined in ONNX; the int kernels give 0 too
				}
				return math.Trunc(v[0] / v[1])
			}
		}
		return func(v []float64) float64 { return v[0] / v[1] }
	case ir.OpPow:
		return func(v []float64) float64 { return math.Pow(v[0], v[1]) }
	case ir.OpMod:
		return func(v []float64) float64 { return pyMod64(v[0], v[1]) }
	case ir.OpFmod:
		return func(v []float64) float64 { return math.Mod(v[0], v[1]) }
	case ir.OpPRelu:
		return func(v []float64) float64 {
			if v[0] < 0 {
				return v[0] * v[1]
			}
			return v[0]
		}
	case ir.OpEqual:
		return func(v []float64) float64 { return b2f(v[0] == v[1]) }
	case ir.OpLess:
		return func(v []float64) float64 { return b2f(v[0] < v[1]) }
	case ir.OpLessOrEqual:
		return func(v []float64) float64 { return b2f(v[0] <= v[1]) }
	case ir.OpGreater:
		return func(v []float64) float64 { return b2f(v[0] > v[1]) }
	case ir.OpGreaterOrEqual:
		return func(v []float64) float64 { return b2f(v[0] >= v[1]) }
	}
	return nil
}

// genericVariadic folds Sum/Max/Min/Mean of up to three inputs (NaN
// propagates through Max and Min, as in ir).
func genericVariadic(fn ir.VariadicKind) func(v []float64) float64 {
	return func(v []float64) float64 {
		acc := v[0]
		for _, x := range v[1:] {
			switch {
			case fn == ir.OpSum || fn == ir.OpMean:
				acc += x
			case math.IsNaN(acc) || math.IsNaN(x):
				acc = math.NaN()
			case fn == ir.OpMax:
				acc = math.Max(acc, x)
			default:
				acc = math.Min(acc, x)
			}
		}
		if fn == ir.OpMean {
			acc /= float64(len(v))
		}
		return acc
	}
}

func isIntDType(dt tensor.DType) bool {
	switch dt {
	case tensor.Int64, tensor.Int32, tensor.Int8, tensor.Uint8:
		return true
	}
	return false
}
