package irexec

import (
	"math"

	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
)

// act is a fused op's activation, applied to finished output values. The
// common kinds have float32 loops of their own (a function call per value
// would cost more than the convolution computing it); the rest use ir's
// own function of the epilogue, in float64.
type act struct {
	kind         ir.Activation
	lo, hi, a, b float32
	f            func(float32) float32 // kinds without a loop of their own
}

// newAct returns e's activation; ok is false for a kind ir does not know.
func newAct(e ir.Epilogue) (act, bool) {
	a := act{kind: e.Act}
	switch e.Act {
	case ir.ActNone, ir.ActRelu, ir.ActSigmoid, ir.ActSiLU, ir.ActHardSwish, ir.ActTanh, ir.ActGELU, ir.ActGELUTanh:
	case ir.ActRelu6:
		a.lo, a.hi = 0, 6
	case ir.ActClip:
		a.lo, a.hi = float32(e.Lo), float32(e.Hi)
	case ir.ActHardSigmoid, ir.ActLeakyRelu:
		a.a, a.b = float32(e.Alpha), float32(e.Beta)
	default:
		f, err := e.Func()
		if err != nil {
			return act{}, false
		}
		a.f = f64fn(f)
	}
	return a, true
}

// relu reports whether the GEMM micro-kernel applies the activation.
func (a act) relu() bool { return a.kind == ir.ActRelu }

// post reports whether the activation runs after the micro-kernel.
func (a act) post() bool { return a.kind != ir.ActNone && a.kind != ir.ActRelu }

// apply runs the activation over v.
func (a act) apply(v []float32) {
	switch a.kind {
	case ir.ActNone:
	case ir.ActRelu:
		vec.ReLU(v, v)
	case ir.ActRelu6, ir.ActClip:
		vec.Clamp(v, 1, 0, a.lo, a.hi)
	case ir.ActHardSwish:
		vec.HardSwish(v)
	case ir.ActHardSigmoid:
		vec.Clamp(v, a.a, a.b, 0, 1)
	case ir.ActLeakyRelu:
		for i, x := range v {
			if x < 0 {
				v[i] = a.a * x
			}
		}
	case ir.ActSigmoid:
		vec.Sigmoid(v)
	case ir.ActSiLU:
		vec.SiLU(v)
	case ir.ActTanh:
		vec.Tanh(v)
	case ir.ActGELU:
		vec.GELU(v)
	case ir.ActGELUTanh:
		const c = 0.7978845608028654 // sqrt(2/pi)
		for i, x := range v {
			v[i] = 0.5 * x * (1 + tanh32(c*(x+0.044715*x*x*x)))
		}
	default:
		for i, x := range v {
			v[i] = a.f(x)
		}
	}
}

// expf is e^x in float32 to about one ulp: x = n*ln2 + r with |r| <= ln2/2,
// e^r from a degree-6 polynomial, 2^n put in the exponent bits. Inputs
// whose result leaves float32's normal range go through math.Exp.
func expf(x float32) float32 {
	if !(x > -87 && x < 88) { // NaN included
		return float32(math.Exp(float64(x)))
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	z := x * log2e
	var n int32
	if z >= 0 {
		n = int32(z + 0.5)
	} else {
		n = int32(z - 0.5)
	}
	fn := float32(n)
	r := x - fn*ln2hi - fn*ln2lo
	p := ((((1.9875691500e-4*r+1.3981999507e-3)*r+8.3334519073e-3)*r+4.1665795894e-2)*r+1.6666665459e-1)*r + 5.0000001201e-1
	e := p*r*r + r + 1
	return e * math.Float32frombits(uint32(n+127)<<23)
}

// tanh32 is tanh through e^-2|x|; small arguments take the odd series'
// first terms, where 1 - e^-2|x| would cancel.
func tanh32(x float32) float32 {
	ax := x
	if ax < 0 {
		ax = -ax
	}
	if ax < 0.004 {
		return x - x*x*x/3
	}
	e := expf(-2 * ax)
	t := (1 - e) / (1 + e)
	if x < 0 {
		return -t
	}
	return t
}

// erf32 is the error function to within 5e-7 absolute (Abramowitz and
// Stegun 7.1.26, with expf).
func erf32(x float32) float32 {
	if x != x {
		return x
	}
	ax := x
	if ax < 0 {
		ax = -ax
	}
	if ax > 6 {
		ax = 6 // erf is 1 to float32 precision well before
	}
	t := 1 / (1 + 0.3275911*ax)
	p := ((((1.061405429*t-1.453152027)*t+1.421413741)*t-0.284496736)*t + 0.254829592) * t
	y := 1 - p*expf(-ax*ax)
	if x < 0 {
		return -y
	}
	return y
}
