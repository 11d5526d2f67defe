package ir

import (
	"fmt"
	"math"

	"goinfer/internal/tensor"
)

// UnaryKind names an elementwise function of one input.
type UnaryKind string

// The unary elementwise ops (ONNX names).
const (
	OpRelu       UnaryKind = "Relu"
	OpSigmoid    UnaryKind = "Sigmoid"
	OpTanh       UnaryKind = "Tanh"
	OpExp        UnaryKind = "Exp"
	OpLog        UnaryKind = "Log"
	OpSqrt       UnaryKind = "Sqrt"
	OpReciprocal UnaryKind = "Reciprocal"
	OpNeg        UnaryKind = "Neg"
	OpAbs        UnaryKind = "Abs"
	OpErf        UnaryKind = "Erf"
	OpFloor      UnaryKind = "Floor"
	OpCeil       UnaryKind = "Ceil"
	OpSign       UnaryKind = "Sign"
	OpNot        UnaryKind = "Not"
	OpIdentity   UnaryKind = "Identity"
	OpSoftplus   UnaryKind = "Softplus"
	OpSoftsign   UnaryKind = "Softsign"
	OpSin        UnaryKind = "Sin"
	OpCos        UnaryKind = "Cos"
	OpRound      UnaryKind = "Round"
	OpHardSwish  UnaryKind = "HardSwish"
	OpSiLU       UnaryKind = "SiLU" // x * sigmoid(x); not an ONNX op, built from Mul+Sigmoid by fusion
	OpMish       UnaryKind = "Mish"
	OpIsNaN      UnaryKind = "IsNaN"
	OpIsInf      UnaryKind = "IsInf"
)

var unaryFuncs = map[UnaryKind]func(float64) float64{
	OpRelu:       func(x float64) float64 { return math.Max(x, 0) },
	OpSigmoid:    sigmoid,
	OpTanh:       math.Tanh,
	OpExp:        math.Exp,
	OpLog:        math.Log,
	OpSqrt:       math.Sqrt,
	OpReciprocal: func(x float64) float64 { return 1 / x },
	OpNeg:        func(x float64) float64 { return -x },
	OpAbs:        math.Abs,
	OpErf:        math.Erf,
	OpFloor:      math.Floor,
	OpCeil:       math.Ceil,
	OpSign: func(x float64) float64 {
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		}
		return 0
	},
	OpNot:      func(x float64) float64 { return b2f(x == 0) },
	OpIdentity: func(x float64) float64 { return x },
	OpSoftplus: func(x float64) float64 {
		if x > 30 {
			return x
		}
		return math.Log1p(math.Exp(x))
	},
	OpSoftsign:  func(x float64) float64 { return x / (1 + math.Abs(x)) },
	OpSin:       math.Sin,
	OpCos:       math.Cos,
	OpRound:     math.RoundToEven,
	OpHardSwish: func(x float64) float64 { return x * math.Max(0, math.Min(1, x/6+0.5)) },
	OpSiLU:      func(x float64) float64 { return x * sigmoid(x) },
	OpMish: func(x float64) float64 {
		sp := x
		if x <= 30 {
			sp = math.Log1p(math.Exp(x))
		}
		return x * math.Tanh(sp)
	},
	OpIsNaN: func(x float64) float64 { return b2f(math.IsNaN(x)) },
	OpIsInf: func(x float64) float64 { return b2f(math.IsInf(x, 0)) },
}

func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Unary applies an elementwise function of one input.
type Unary struct{ Fn UnaryKind }

// Kind implements Op.
func (u *Unary) Kind() string { return string(u.Fn) }

// Infer implements Op.
func (u *Unary) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if _, ok := unaryFuncs[u.Fn]; !ok {
		return nil, fmt.Errorf("unknown unary op %q", u.Fn)
	}
	t := in[0].Type
	switch u.Fn {
	case OpIsNaN, OpIsInf:
		t.DType = tensor.Bool
	}
	return []Type{t}, nil
}

// Eval implements Op.
func (u *Unary) Eval(in []*Array) ([]*Array, error) {
	f, ok := unaryFuncs[u.Fn]
	if !ok {
		return nil, fmt.Errorf("unknown unary op %q", u.Fn)
	}
	x := in[0]
	out := &Array{DType: x.DType, Shape: x.Shape.Clone(), Data: make([]float64, len(x.Data))}
	switch u.Fn {
	case OpIsNaN, OpIsInf:
		out.DType = tensor.Bool
	}
	for i, v := range x.Data {
		out.Data[i] = f(v)
	}
	if isInt(out.DType) {
		out.RoundTo()
	}
	return []*Array{out}, nil
}

// BinaryKind names an elementwise function of two broadcast inputs.
type BinaryKind string

// The binary elementwise ops (ONNX names).
const (
	OpAdd            BinaryKind = "Add"
	OpSub            BinaryKind = "Sub"
	OpMul            BinaryKind = "Mul"
	OpDiv            BinaryKind = "Div"
	OpPow            BinaryKind = "Pow"
	OpEqual          BinaryKind = "Equal"
	OpLess           BinaryKind = "Less"
	OpLessOrEqual    BinaryKind = "LessOrEqual"
	OpGreater        BinaryKind = "Greater"
	OpGreaterOrEqual BinaryKind = "GreaterOrEqual"
	OpAnd            BinaryKind = "And"
	OpOr             BinaryKind = "Or"
	OpXor            BinaryKind = "Xor"
	OpMod            BinaryKind = "Mod"  // integer Mod: sign of the divisor, as Python
	OpFmod           BinaryKind = "Fmod" // Mod with fmod=1: sign of the dividend, as C
	OpPRelu          BinaryKind = "PRelu"
	OpBitShiftLeft   BinaryKind = "BitShiftLeft"
	OpBitShiftRight  BinaryKind = "BitShiftRight"
)

var binaryFuncs = map[BinaryKind]func(a, b float64) float64{
	OpAdd:            func(a, b float64) float64 { return a + b },
	OpSub:            func(a, b float64) float64 { return a - b },
	OpMul:            func(a, b float64) float64 { return a * b },
	OpDiv:            func(a, b float64) float64 { return a / b },
	OpPow:            math.Pow,
	OpEqual:          func(a, b float64) float64 { return b2f(a == b) },
	OpLess:           func(a, b float64) float64 { return b2f(a < b) },
	OpLessOrEqual:    func(a, b float64) float64 { return b2f(a <= b) },
	OpGreater:        func(a, b float64) float64 { return b2f(a > b) },
	OpGreaterOrEqual: func(a, b float64) float64 { return b2f(a >= b) },
	OpAnd:            func(a, b float64) float64 { return b2f(a != 0 && b != 0) },
	OpOr:             func(a, b float64) float64 { return b2f(a != 0 || b != 0) },
	OpXor:            func(a, b float64) float64 { return b2f((a != 0) != (b != 0)) },
	OpMod: func(a, b float64) float64 {
		m := math.Mod(a, b)
		if m != 0 && (m < 0) != (b < 0) {
			m += b
		}
		return m
	},
	OpFmod: math.Mod,
	OpPRelu: func(a, b float64) float64 {
		if a < 0 {
			return a * b
		}
		return a
	},
	OpBitShiftLeft:  func(a, b float64) float64 { return float64(uint64(a) << uint64(b)) },
	OpBitShiftRight: func(a, b float64) float64 { return float64(uint64(a) >> uint64(b)) },
}

// Binary applies an elementwise function of two inputs with NumPy
// broadcasting.
type Binary struct{ Fn BinaryKind }

// Kind implements Op.
func (b *Binary) Kind() string {
	if b.Fn == OpFmod {
		return string(OpMod)
	}
	return string(b.Fn)
}

func (b *Binary) outDType(a tensor.DType) tensor.DType {
	switch b.Fn {
	case OpEqual, OpLess, OpLessOrEqual, OpGreater, OpGreaterOrEqual, OpAnd, OpOr, OpXor:
		return tensor.Bool
	}
	return a
}

// Infer implements Op.
func (b *Binary) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 2); err != nil {
		return nil, err
	}
	if _, ok := binaryFuncs[b.Fn]; !ok {
		return nil, fmt.Errorf("unknown binary op %q", b.Fn)
	}
	if b.Fn != OpPow && b.Fn != OpBitShiftLeft && b.Fn != OpBitShiftRight && in[0].Type.DType != in[1].Type.DType {
		return nil, fmt.Errorf("input dtypes differ: %s and %s", in[0].Type.DType, in[1].Type.DType)
	}
	shape, err := BroadcastShape(in[0].Type.Shape, in[1].Type.Shape)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: b.outDType(in[0].Type.DType), Shape: shape}}, nil
}

// Eval implements Op.
func (b *Binary) Eval(in []*Array) ([]*Array, error) {
	f, ok := binaryFuncs[b.Fn]
	if !ok {
		return nil, fmt.Errorf("unknown binary op %q", b.Fn)
	}
	x, y := in[0], in[1]
	shape, err := BroadcastShape(x.Shape, y.Shape)
	if err != nil {
		return nil, err
	}
	out := NewArray(b.outDType(x.DType), shape)
	xi, yi := BroadcastIndex(x.Shape, shape), BroadcastIndex(y.Shape, shape)
	intDiv := b.Fn == OpDiv && isInt(x.DType)
	for k := range out.Data {
		a, c := x.Data[xi[k]], y.Data[yi[k]]
		if intDiv {
			out.Data[k] = math.Trunc(a / c)
			continue
		}
		out.Data[k] = f(a, c)
	}
	if isInt(out.DType) {
		out.RoundTo()
	}
	return []*Array{out}, nil
}

// isInt reports whether dt holds integers.
func isInt(dt tensor.DType) bool {
	switch dt {
	case tensor.Int64, tensor.Int32, tensor.Int8, tensor.Uint8:
		return true
	}
	return false
}

// wantInputs checks the count of present inputs: at least lo leading ones
// present, at most hi in all.
func wantInputs(in []*Value, lo, hi int) error {
	if len(in) < lo || len(in) > hi {
		if lo == hi {
			return fmt.Errorf("takes %d inputs, got %d", lo, len(in))
		}
		return fmt.Errorf("takes %d to %d inputs, got %d", lo, hi, len(in))
	}
	for i := 0; i < lo; i++ {
		if in[i] == nil {
			return fmt.Errorf("input %d is required", i)
		}
	}
	return nil
}
