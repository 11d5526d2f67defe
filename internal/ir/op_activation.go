package ir

import (
	"fmt"
	"math"

	"goinfer/internal/tensor"
)

// The parameterised activations: each maps every element through one
// function of its attributes, keeping the input's type.

// ThresholdedRelu is x where x > Alpha, else 0.
type ThresholdedRelu struct{ Alpha float64 }

// Shrink is ONNX's Shrink: x+Bias below -Lambd, x-Bias above Lambd, else 0.
type Shrink struct{ Bias, Lambd float64 }

// activationInfer checks a one-input float activation and returns its
// type.
func activationInfer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in, 0); err != nil {
		return nil, err
	}
	return []Type{sameType(in[0].Type)}, nil
}

// mapArray applies f to every element of x.
func mapArray(x *Array, f func(float64) float64) []*Array {
	out := &Array{DType: x.DType, Shape: x.Shape.Clone(), Data: make([]float64, len(x.Data))}
	for i, v := range x.Data {
		out.Data[i] = f(v)
	}
	return []*Array{out}
}

// Kind implements Op.
func (*LeakyRelu) Kind() string { return "LeakyRelu" }

// Infer implements Op.
func (*LeakyRelu) Infer(in []*Value) ([]Type, error) { return activationInfer(in) }

// Eval implements Op.
func (l *LeakyRelu) Eval(in []*Array) ([]*Array, error) {
	return mapArray(in[0], func(x float64) float64 { return leaky(x, l.Alpha) }), nil
}

// Kind implements Op.
func (*Elu) Kind() string { return "Elu" }

// Infer implements Op.
func (*Elu) Infer(in []*Value) ([]Type, error) { return activationInfer(in) }

// Eval implements Op.
func (e *Elu) Eval(in []*Array) ([]*Array, error) {
	return mapArray(in[0], func(x float64) float64 {
		if x < 0 {
			return e.Alpha * math.Expm1(x)
		}
		return x
	}), nil
}

// Kind implements Op.
func (*Selu) Kind() string { return "Selu" }

// Infer implements Op.
func (*Selu) Infer(in []*Value) ([]Type, error) { return activationInfer(in) }

// Eval implements Op.
func (s *Selu) Eval(in []*Array) ([]*Array, error) {
	return mapArray(in[0], func(x float64) float64 {
		if x <= 0 {
			return s.Gamma * s.Alpha * math.Expm1(x)
		}
		return s.Gamma * x
	}), nil
}

// Kind implements Op.
func (*Celu) Kind() string { return "Celu" }

// Infer implements Op.
func (c *Celu) Infer(in []*Value) ([]Type, error) {
	if c.Alpha == 0 {
		return nil, fmt.Errorf("alpha must not be 0")
	}
	return activationInfer(in)
}

// Eval implements Op.
func (c *Celu) Eval(in []*Array) ([]*Array, error) {
	return mapArray(in[0], func(x float64) float64 {
		return math.Max(0, x) + math.Min(0, c.Alpha*math.Expm1(x/c.Alpha))
	}), nil
}

// Kind implements Op.
func (*HardSigmoid) Kind() string { return "HardSigmoid" }

// Infer implements Op.
func (*HardSigmoid) Infer(in []*Value) ([]Type, error) { return activationInfer(in) }

// Eval implements Op.
func (h *HardSigmoid) Eval(in []*Array) ([]*Array, error) {
	return mapArray(in[0], func(x float64) float64 { return math.Max(0, math.Min(1, h.Alpha*x+h.Beta)) }), nil
}

// Kind implements Op.
func (*Gelu) Kind() string { return "Gelu" }

// Infer implements Op.
func (*Gelu) Infer(in []*Value) ([]Type, error) { return activationInfer(in) }

// Eval implements Op.
func (g *Gelu) Eval(in []*Array) ([]*Array, error) {
	if g.Tanh {
		return mapArray(in[0], geluTanh), nil
	}
	return mapArray(in[0], geluErf), nil
}

// Kind implements Op.
func (*ThresholdedRelu) Kind() string { return "ThresholdedRelu" }

// Infer implements Op.
func (*ThresholdedRelu) Infer(in []*Value) ([]Type, error) { return activationInfer(in) }

// Eval implements Op.
func (t *ThresholdedRelu) Eval(in []*Array) ([]*Array, error) {
	return mapArray(in[0], func(x float64) float64 {
		if x > t.Alpha {
			return x
		}
		return 0
	}), nil
}

// Kind implements Op.
func (*Shrink) Kind() string { return "Shrink" }

// Infer implements Op: Shrink takes any numeric input.
func (*Shrink) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if in[0].Type.DType == tensor.Bool {
		return nil, fmt.Errorf("input is %s, want a numeric tensor", in[0].Type)
	}
	return []Type{sameType(in[0].Type)}, nil
}

// Eval implements Op.
func (s *Shrink) Eval(in []*Array) ([]*Array, error) {
	out := mapArray(in[0], func(x float64) float64 {
		switch {
		case x < -s.Lambd:
			return x + s.Bias
		case x > s.Lambd:
			return x - s.Bias
		}
		return 0
	})
	if isInt(out[0].DType) {
		out[0].RoundTo()
	}
	return out, nil
}

// Kind implements Op.
func (*Clip) Kind() string { return "Clip" }

// Infer implements Op: min and max are optional scalars of X's dtype.
func (*Clip) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 3); err != nil {
		return nil, err
	}
	if in[0].Type.DType == tensor.Bool {
		return nil, fmt.Errorf("input is %s, want a numeric tensor", in[0].Type)
	}
	for i, name := range []string{"min", "max"} {
		v := in2(in, i+1)
		if v == nil {
			continue
		}
		// Clip before opset 11 held its bounds as float attributes, which
		// importers turn into float32 inputs whatever X's float type.
		if v.Type.DType != in[0].Type.DType && !(isFloatType(v.Type.DType) && isFloatType(in[0].Type.DType)) {
			return nil, fmt.Errorf("%s is %s, X is %s", name, v.Type, in[0].Type)
		}
		if v.Type.Shape.NumElements() != 1 || len(v.Type.Shape) > 1 {
			return nil, fmt.Errorf("%s %s must be a scalar", name, v.Type)
		}
	}
	return []Type{sameType(in[0].Type)}, nil
}

// Eval implements Op.
func (*Clip) Eval(in []*Array) ([]*Array, error) {
	if err := inferArrays(&Clip{}, in); err != nil {
		return nil, err
	}
	lo, hi := math.Inf(-1), math.Inf(1)
	if a := arg(in, 1); a != nil {
		lo = a.Data[0]
	}
	if a := arg(in, 2); a != nil {
		hi = a.Data[0]
	}
	// ONNX's Clip with min > max sets every value to max.
	return mapArray(in[0], func(x float64) float64 {
		if math.IsNaN(x) {
			return x
		}
		return math.Min(math.Max(x, lo), hi)
	}), nil
}

// ClipBounds returns a Clip node's constant bounds (infinite where
// absent); ok is false when a present bound is not a constant.
func ClipBounds(n *Node) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(-1), math.Inf(1)
	for i, p := range []*float64{&lo, &hi} {
		v := n.Input(i + 1)
		if v == nil {
			continue
		}
		if v.Const == nil {
			return 0, 0, false
		}
		a, err := ArrayFromTensor(v.Const)
		if err != nil || len(a.Data) != 1 {
			return 0, 0, false
		}
		*p = a.Data[0]
	}
	return lo, hi, true
}
