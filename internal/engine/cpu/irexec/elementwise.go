package irexec

import (
	"fmt"
	"math"
	"unsafe"

	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// eltGrain is the fewest elements worth a task of an elementwise op.
const eltGrain = 1 << 14

// bools views b as bools (one byte each, 0 or 1).
func bools(b []byte) []bool {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*bool)(unsafe.Pointer(&b[0])), len(b))
}

// unaryStep applies a float32 function elementwise.
type unaryStep struct {
	src, dst int
	f        func(float32) float32
	// ac, when set, is a float32 activation loop run in place on dst.
	ac *act
	// lo, hi are Clip's bounds inputs (-1: none), read at run time.
	lo, hi int
}

func (s *unaryStep) run(x *Exec) error {
	x.parRange(s, len(x.f32(s.dst)), eltGrain)
	return nil
}

func (s *unaryStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.f32(s.src)[lo:hi], x.f32(s.dst)[lo:hi]
	switch {
	case s.ac != nil && s.ac.kind == ir.ActRelu:
		vec.ReLU(dst, src)
	case s.ac != nil:
		copy(dst, src)
		s.ac.apply(dst)
	case s.lo >= 0 || s.hi >= 0:
		l, h := float32(math.Inf(-1)), float32(math.Inf(1))
		if s.lo >= 0 {
			l = x.f32(s.lo)[0]
		}
		if s.hi >= 0 {
			h = x.f32(s.hi)[0]
		}
		for i, v := range src {
			if v == v { // NaN passes through, as in ONNX's reference
				v = min(max(v, l), h)
			}
			dst[i] = v
		}
	default:
		f := s.f
		for i, v := range src {
			dst[i] = f(v)
		}
	}
}

func f64fn(f func(float64) float64) func(float32) float32 {
	return func(v float32) float32 { return float32(f(float64(v))) }
}

func sigmoid64(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

func softplus64(x float64) float64 {
	if x > 30 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// unaryActs are the unary ops with float32 activation loops.
var unaryActs = map[ir.UnaryKind]ir.Activation{
	ir.OpRelu:      ir.ActRelu,
	ir.OpSigmoid:   ir.ActSigmoid,
	ir.OpTanh:      ir.ActTanh,
	ir.OpHardSwish: ir.ActHardSwish,
	ir.OpSiLU:      ir.ActSiLU,
}

// floatUnary are the float32 unary functions, computed in float64.
var floatUnary = map[ir.UnaryKind]func(float64) float64{
	ir.OpSigmoid:    sigmoid64,
	ir.OpTanh:       math.Tanh,
	ir.OpExp:        math.Exp,
	ir.OpLog:        math.Log,
	ir.OpSqrt:       math.Sqrt,
	ir.OpReciprocal: func(x float64) float64 { return 1 / x },
	ir.OpNeg:        func(x float64) float64 { return -x },
	ir.OpAbs:        math.Abs,
	ir.OpErf:        math.Erf,
	ir.OpFloor:      math.Floor,
	ir.OpCeil:       math.Ceil,
	ir.OpSign: func(x float64) float64 {
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		}
		return x // 0 and NaN
	},
	ir.OpSoftplus:  softplus64,
	ir.OpSoftsign:  func(x float64) float64 { return x / (1 + math.Abs(x)) },
	ir.OpSin:       math.Sin,
	ir.OpCos:       math.Cos,
	ir.OpRound:     math.RoundToEven,
	ir.OpHardSwish: func(x float64) float64 { return x * math.Max(0, math.Min(1, x/6+0.5)) },
	ir.OpSiLU:      func(x float64) float64 { return x * sigmoid64(x) },
	ir.OpMish:      func(x float64) float64 { return x * math.Tanh(softplus64(x)) },
}

func buildUnary(nc *nodeCtx) (step, error) {
	op := nc.n.Op.(*ir.Unary)
	in, out := nc.inVal(0), nc.outVal(0)
	if op.Fn == ir.OpIdentity {
		return buildView(nc)
	}
	switch op.Fn {
	case ir.OpIsNaN, ir.OpIsInf:
		if in.dtype != tensor.Float32 {
			return nil, unsupportedf(in.dtype.String(), "%s of %s", op.Fn, in.dtype)
		}
		return &predStep{src: nc.in[0], dst: nc.out[0], nan: op.Fn == ir.OpIsNaN, pos: true, neg: true}, nil
	case ir.OpNot:
		return &intUnaryStep{src: nc.in[0], dst: nc.out[0], dt: in.dtype, fn: op.Fn}, nil
	}
	switch in.dtype {
	case tensor.Float32:
		if k, ok := unaryActs[op.Fn]; ok {
			return &unaryStep{src: nc.in[0], dst: nc.out[0], ac: &act{kind: k}, lo: -1, hi: -1}, nil
		}
		f, ok := floatUnary[op.Fn]
		if !ok {
			return nil, unsupportedf("", "no float32 kernel for %s", op.Fn)
		}
		return &unaryStep{src: nc.in[0], dst: nc.out[0], f: f64fn(f), lo: -1, hi: -1}, nil
	case tensor.Int64, tensor.Int32:
		switch op.Fn {
		case ir.OpNeg, ir.OpAbs, ir.OpSign, ir.OpRelu:
			return &intUnaryStep{src: nc.in[0], dst: nc.out[0], dt: in.dtype, fn: op.Fn}, nil
		}
	}
	_ = out
	return nil, unsupportedf(in.dtype.String(), "%s of %s", op.Fn, in.dtype)
}

// buildParamUnary compiles the float32 activations with attributes.
func buildParamUnary(nc *nodeCtx) (step, error) {
	if dt := nc.inVal(0).dtype; dt != tensor.Float32 {
		return nil, unsupportedf(dt.String(), "%s of %s", nc.n.Op.Kind(), dt)
	}
	s := &unaryStep{src: nc.in[0], dst: nc.out[0], lo: -1, hi: -1}
	switch op := any(nc.n.Op).(type) {
	case *ir.LeakyRelu:
		a := op.Alpha
		s.f = f64fn(func(x float64) float64 {
			if x < 0 {
				return a * x
			}
			return x
		})
	case *ir.Elu:
		a := op.Alpha
		s.f = f64fn(func(x float64) float64 {
			if x < 0 {
				return a * (math.Exp(x) - 1)
			}
			return x
		})
	case *ir.Selu:
		a, g := op.Alpha, op.Gamma
		s.f = f64fn(func(x float64) float64 {
			if x <= 0 {
				return g * (a*math.Exp(x) - a)
			}
			return g * x
		})
	case *ir.Celu:
		a := op.Alpha
		s.f = f64fn(func(x float64) float64 { return math.Max(0, x) + math.Min(0, a*(math.Exp(x/a)-1)) })
	case *ir.HardSigmoid:
		s.ac = &act{kind: ir.ActHardSigmoid, a: float32(op.Alpha), b: float32(op.Beta)}
	case *ir.Gelu:
		s.ac = &act{kind: ir.ActGELU}
		if op.Tanh {
			s.ac.kind = ir.ActGELUTanh
		}
	case *ir.ThresholdedRelu:
		a := op.Alpha
		s.f = f64fn(func(x float64) float64 {
			if x > a {
				return x
			}
			return 0
		})
	case *ir.Shrink:
		b, l := op.Bias, op.Lambd
		s.f = f64fn(func(x float64) float64 {
			switch {
			case x < -l:
				return x + b
			case x > l:
				return x - b
			}
			return 0
		})
	case *ir.Clip:
		for i, p := range []*int{&s.lo, &s.hi} {
			if v := nc.inVal(i + 1); v != nil {
				if v.dtype != tensor.Float32 || v.elems != 1 {
					return nil, fmt.Errorf("Clip bound %d is %s%v, want a float32 scalar", i+1, v.dtype, v.shape)
				}
				*p = nc.in[i+1]
			}
		}
		if s.lo < 0 && s.hi < 0 {
			return buildView(nc)
		}
	default:
		return nil, unsupportedf("", "no kernel")
	}
	return s, nil
}

// predStep is IsNaN / IsInf: float32 in, bool out.
type predStep struct {
	src, dst      int
	nan, pos, neg bool
}

func buildIsInf(nc *nodeCtx) (step, error) {
	op := nc.n.Op.(*ir.IsInf)
	if dt := nc.inVal(0).dtype; dt != tensor.Float32 {
		return nil, unsupportedf(dt.String(), "IsInf of %s", dt)
	}
	return &predStep{src: nc.in[0], dst: nc.out[0], pos: op.DetectPositive, neg: op.DetectNegative}, nil
}

func (s *predStep) run(x *Exec) error {
	src, dst := x.f32(s.src), bools(x.view(s.dst))
	for i, v := range src {
		f := float64(v)
		if s.nan {
			dst[i] = math.IsNaN(f)
		} else {
			dst[i] = s.pos && math.IsInf(f, 1) || s.neg && math.IsInf(f, -1)
		}
	}
	return nil
}

// intUnaryStep is an integer or bool unary op.
type intUnaryStep struct {
	src, dst int
	dt       tensor.DType
	fn       ir.UnaryKind
}

func intUn[T int32 | int64](fn ir.UnaryKind, v T) T {
	switch fn {
	case ir.OpNeg:
		return -v
	case ir.OpAbs:
		if v < 0 {
			return -v
		}
	case ir.OpRelu:
		return max(v, 0)
	case ir.OpSign:
		switch {
		case v > 0:
			return 1
		case v < 0:
			return -1
		}
	}
	return v
}

func (s *intUnaryStep) run(x *Exec) error {
	switch s.dt {
	case tensor.Int64:
		src, dst := i64(x.view(s.src)), i64(x.view(s.dst))
		for i, v := range src {
			dst[i] = intUn(s.fn, v)
		}
	case tensor.Int32:
		src, dst := i32(x.view(s.src)), i32(x.view(s.dst))
		for i, v := range src {
			dst[i] = intUn(s.fn, v)
		}
	default: // Not of bool or numbers: v == 0
		src, dst := x.view(s.src), bools(x.view(s.dst))
		es := s.dt.Size()
		for i := range dst {
			z := true
			for _, c := range src[i*es : (i+1)*es] {
				if c != 0 {
					z = false
				}
			}
			dst[i] = z
		}
	}
	return nil
}
