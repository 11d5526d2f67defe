package ir

import (
	"fmt"
	"math"
)

// String names the activation as passes and reports do.
func (a Activation) String() string {
	switch a {
	case ActNone:
		return "none"
	case ActRelu:
		return "relu"
	case ActRelu6:
		return "relu6"
	case ActClip:
		return "clip"
	case ActSigmoid:
		return "sigmoid"
	case ActSiLU:
		return "silu"
	case ActHardSwish:
		return "hardswish"
	case ActHardSigmoid:
		return "hardsigmoid"
	case ActGELU:
		return "gelu"
	case ActGELUTanh:
		return "gelu_tanh"
	case ActLeakyRelu:
		return "leakyrelu"
	case ActTanh:
		return "tanh"
	}
	return fmt.Sprintf("activation(%d)", uint8(a))
}

// Func returns the epilogue's activation as a function of one value.
func (e Epilogue) Func() (func(float64) float64, error) {
	switch e.Act {
	case ActNone:
		return func(x float64) float64 { return x }, nil
	case ActRelu:
		return func(x float64) float64 { return math.Max(x, 0) }, nil
	case ActRelu6:
		return func(x float64) float64 { return math.Min(math.Max(x, 0), 6) }, nil
	case ActClip:
		lo, hi := e.Lo, e.Hi
		return func(x float64) float64 { return math.Min(math.Max(x, lo), hi) }, nil
	case ActSigmoid:
		return sigmoid, nil
	case ActSiLU:
		return unaryFuncs[OpSiLU], nil
	case ActHardSwish:
		return unaryFuncs[OpHardSwish], nil
	case ActHardSigmoid:
		a, b := e.Alpha, e.Beta
		return func(x float64) float64 { return math.Max(0, math.Min(1, a*x+b)) }, nil
	case ActGELU:
		return geluErf, nil
	case ActGELUTanh:
		return geluTanh, nil
	case ActLeakyRelu:
		a := e.Alpha
		return func(x float64) float64 { return leaky(x, a) }, nil
	case ActTanh:
		return math.Tanh, nil
	}
	return nil, fmt.Errorf("unknown epilogue activation %d", e.Act)
}

// IsZero reports whether the epilogue does nothing beyond the bias.
func (e Epilogue) IsZero() bool { return e.Act == ActNone && !e.Residual }

func (e Epilogue) String() string {
	s := e.Act.String()
	if e.Residual {
		s = "residual+" + s
	}
	return s
}

// checkEpilogue validates a fused op's residual input (index i) against
// its output type.
func (e Epilogue) check(in []*Value, i int, out Type) error {
	if _, err := e.Func(); err != nil {
		return err
	}
	if !e.Residual {
		if len(in) > i {
			return fmt.Errorf("has %d inputs but no residual epilogue", len(in))
		}
		return nil
	}
	if len(in) <= i || in[i] == nil {
		return fmt.Errorf("its residual epilogue needs input %d", i)
	}
	r := in[i].Type
	if r.DType != out.DType {
		return fmt.Errorf("residual input is %s, the output %s", r, out)
	}
	if s, err := BroadcastShape(out.Shape, r.Shape); err != nil || !s.Equal(out.Shape) {
		return fmt.Errorf("residual input %s does not broadcast to the output %s", r, out)
	}
	return nil
}

// apply adds the residual (input i when the epilogue has one) and applies
// the activation to out in place.
func (e Epilogue) apply(out *Array, in []*Array, i int) error {
	if e.Residual {
		if len(in) <= i || in[i] == nil {
			return fmt.Errorf("its residual epilogue needs input %d", i)
		}
		if err := addBroadcast(out, in[i]); err != nil {
			return fmt.Errorf("residual: %w", err)
		}
	}
	if e.Act == ActNone {
		return nil
	}
	f, err := e.Func()
	if err != nil {
		return err
	}
	for k, v := range out.Data {
		out.Data[k] = f(v)
	}
	return nil
}

// addBroadcast adds b, broadcast to out's shape, to out.
func addBroadcast(out, b *Array) error {
	s, err := BroadcastShape(out.Shape, b.Shape)
	if err != nil {
		return err
	}
	if !s.Equal(out.Shape) {
		return fmt.Errorf("%v does not broadcast to %v", b.Shape, out.Shape)
	}
	idx := BroadcastIndex(b.Shape, out.Shape)
	for k := range out.Data {
		out.Data[k] += b.Data[idx[k]]
	}
	return nil
}

func leaky(x, a float64) float64 {
	if x < 0 {
		return a * x
	}
	return x
}

func geluErf(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func geluTanh(x float64) float64 {
	const c = 0.7978845608028654 // sqrt(2/pi)
	return 0.5 * x * (1 + math.Tanh(c*(x+0.044715*x*x*x)))
}
