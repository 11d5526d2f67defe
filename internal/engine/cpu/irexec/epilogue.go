package irexec

import (
	"math"

	"goinfer/internal/ir"
)

// act is a fused op's activation, applied to finished output values.
type act struct {
	relu bool // the micro-kernel applies it in registers
	f    func(float32) float32
}

// newAct returns e's activation; ok is false for a kind the executor does
// not know.
func newAct(e ir.Epilogue) (act, bool) {
	var f func(float64) float64
	switch e.Act {
	case ir.ActNone:
		return act{}, true
	case ir.ActRelu:
		return act{relu: true}, true
	case ir.ActRelu6:
		f = func(x float64) float64 { return math.Min(math.Max(x, 0), 6) }
	case ir.ActClip:
		lo, hi := e.Lo, e.Hi
		f = func(x float64) float64 { return math.Min(math.Max(x, lo), hi) }
	case ir.ActSigmoid:
		f = sigmoid64
	case ir.ActSiLU:
		f = func(x float64) float64 { return x * sigmoid64(x) }
	case ir.ActHardSwish:
		f = func(x float64) float64 { return x * math.Max(0, math.Min(1, x/6+0.5)) }
	case ir.ActHardSigmoid:
		a, b := e.Alpha, e.Beta
		f = func(x float64) float64 { return math.Max(0, math.Min(1, a*x+b)) }
	case ir.ActGELU:
		f = func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }
	case ir.ActGELUTanh:
		f = func(x float64) float64 {
			return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
		}
	case ir.ActLeakyRelu:
		a := e.Alpha
		f = func(x float64) float64 {
			if x < 0 {
				return a * x
			}
			return x
		}
	case ir.ActTanh:
		f = math.Tanh
	default:
		return act{}, false
	}
	return act{f: f64fn(f)}, true
}

// apply runs the activation over v.
func (a act) apply(v []float32) {
	switch {
	case a.relu:
		for i, x := range v {
			v[i] = max(x, 0)
		}
	case a.f != nil:
		for i, x := range v {
			v[i] = a.f(x)
		}
	}
}

// none reports whether the activation is the identity.
func (a act) none() bool { return !a.relu && a.f == nil }
