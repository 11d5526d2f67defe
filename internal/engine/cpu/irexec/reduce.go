package irexec

import (
	"fmt"
	"math"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// reduceStep computes each output element from its reduced sub-space:
// kept coordinates give the input base offset, red lists the offsets of
// the reduced coordinates. Sums run in float64.
type reduceStep struct {
	src, dst int
	fn       ir.ReduceKind
	keptDims []int // kept dimensions' sizes (output order)
	keptStr  []int // their input strides
	red      []int
	// arg: ArgMax/ArgMin (red walks one axis in order).
	arg, argMax, last bool
}

// reduceAxes resolves Reduce's axes to a mask over the input dimensions.
func reduceAxes(nc *nodeCtx, op *ir.Reduce, rank int) ([]bool, error) {
	axes := op.Axes
	if v := nc.n.Input(1); v != nil {
		if v.Const == nil {
			return nil, unsupportedf("with runtime axes", "axes are computed at run time")
		}
		a, err := ir.ArrayFromTensor(v.Const)
		if err != nil {
			return nil, err
		}
		axes = a.Ints()
		nc.consumed(1)
	}
	red := make([]bool, rank)
	if len(axes) == 0 {
		if !op.NoopWithEmptyAxes {
			for i := range red {
				red[i] = true
			}
		}
		return red, nil
	}
	for _, a := range axes {
		if a < 0 {
			a += rank
		}
		if a < 0 || a >= rank {
			return nil, fmt.Errorf("axis %v out of range for rank %d", axes, rank)
		}
		red[a] = true
	}
	return red, nil
}

func newReduce(nc *nodeCtx, red []bool) *reduceStep {
	x := nc.inVal(0)
	str := stridesOf(x.shape)
	s := &reduceStep{src: nc.in[0], dst: nc.out[0]}
	var redDims, redStr []int
	for d, n := range x.shape {
		if red[d] {
			redDims, redStr = append(redDims, n), append(redStr, str[d])
		} else {
			s.keptDims, s.keptStr = append(s.keptDims, n), append(s.keptStr, str[d])
		}
	}
	count := 1
	for _, n := range redDims {
		count *= n
	}
	s.red = make([]int, count)
	for i := range s.red {
		o, r := 0, i
		for d := len(redDims) - 1; d >= 0; d-- {
			o += (r % redDims[d]) * redStr[d]
			r /= redDims[d]
		}
		s.red[i] = o
	}
	return s
}

func buildReduce(nc *nodeCtx) (step, error) {
	op := nc.n.Op.(*ir.Reduce)
	x := nc.inVal(0)
	if x.dtype != tensor.Float32 {
		return nil, unsupportedf(x.dtype.String(), "%s of %s", op.Fn, x.dtype)
	}
	red, err := reduceAxes(nc, op, len(x.shape))
	if err != nil {
		return nil, err
	}
	s := newReduce(nc, red)
	s.fn = op.Fn
	return s, nil
}

func buildArgReduce(nc *nodeCtx) (step, error) {
	op := nc.n.Op.(*ir.ArgReduce)
	x := nc.inVal(0)
	if x.dtype != tensor.Float32 {
		return nil, unsupportedf(x.dtype.String(), "%s of %s", op.Kind(), x.dtype)
	}
	axis := op.Axis
	if axis < 0 {
		axis += len(x.shape)
	}
	if axis < 0 || axis >= len(x.shape) {
		return nil, fmt.Errorf("axis %d out of range for %v", op.Axis, x.shape)
	}
	red := make([]bool, len(x.shape))
	red[axis] = true
	s := newReduce(nc, red)
	s.arg, s.argMax, s.last = true, op.Max, op.SelectLastIndex
	return s, nil
}

func (s *reduceStep) run(x *Exec) error {
	n := x.p.vals[s.dst].elems
	x.parRange(s, n, max(1, eltGrain/max(len(s.red), 1)))
	return nil
}

func (s *reduceStep) rng(x *Exec, _, lo, hi int) {
	src := x.f32(s.src)
	for o := lo; o < hi; o++ {
		base, r := 0, o
		for d := len(s.keptDims) - 1; d >= 0; d-- {
			base += (r % s.keptDims[d]) * s.keptStr[d]
			r /= s.keptDims[d]
		}
		if s.arg {
			best, bi := 0.0, 0
			for i, off := range s.red {
				v := float64(src[base+off])
				switch {
				case i == 0:
					best, bi = v, 0
				case s.argMax && (v > best || s.last && v == best),
					!s.argMax && (v < best || s.last && v == best):
					best, bi = v, i
				}
			}
			i64(x.view(s.dst))[o] = int64(bi)
			continue
		}
		x.f32(s.dst)[o] = float32(s.reduce(src, base))
	}
}

func (s *reduceStep) reduce(src []float32, base int) float64 {
	switch s.fn {
	case ir.ReduceMax, ir.ReduceMin:
		m := math.Inf(1)
		if s.fn == ir.ReduceMax {
			m = math.Inf(-1)
		}
		for _, off := range s.red {
			v := float64(src[base+off])
			switch {
			case v != v || m != m:
				m = math.NaN()
			case s.fn == ir.ReduceMax:
				m = math.Max(m, v)
			default:
				m = math.Min(m, v)
			}
		}
		return m
	case ir.ReduceLogSumExp:
		m := math.Inf(-1)
		for _, off := range s.red {
			m = math.Max(m, float64(src[base+off]))
		}
		if math.IsInf(m, 0) {
			return m
		}
		var sum float64
		for _, off := range s.red {
			sum += math.Exp(float64(src[base+off]) - m)
		}
		return m + math.Log(sum)
	case ir.ReduceProd:
		p := 1.0
		for _, off := range s.red {
			p *= float64(src[base+off])
		}
		return p
	}
	var sum float64
	for _, off := range s.red {
		v := float64(src[base+off])
		switch s.fn {
		case ir.ReduceL1:
			sum += math.Abs(v)
		case ir.ReduceL2, ir.ReduceSumSquare:
			sum += v * v
		default:
			sum += v
		}
	}
	switch s.fn {
	case ir.ReduceMean:
		return sum / float64(len(s.red))
	case ir.ReduceL2:
		return math.Sqrt(sum)
	case ir.ReduceLogSum:
		return math.Log(sum)
	}
	return sum
}
