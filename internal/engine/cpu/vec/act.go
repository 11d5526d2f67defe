package vec

import "math"

// The activations below work in place on v in float32. Those with an
// exponential use Exp's polynomial (arguments clamped to [-87, 88], past
// which the results are saturated to float32 precision) and keep NaNs.

// Sigmoid sets v[i] = 1/(1+e^-v[i]).
func Sigmoid(v []float32) { activate(v, actSigmoid) }

// SiLU sets v[i] = v[i]/(1+e^-v[i]).
func SiLU(v []float32) { activate(v, actSiLU) }

// HardSwish sets v[i] = v[i]*min(max(v[i]/6+1/2, 0), 1).
func HardSwish(v []float32) { activate(v, actHardSwish) }

// Tanh sets v[i] = tanh(v[i]) as 1 - 2/(1+e^2v[i]), to within 2e-7
// absolute.
func Tanh(v []float32) { activate(v, actTanh) }

// GELU sets v[i] = v[i]/2*(1+erf(v[i]/sqrt 2)), erf by Abramowitz and
// Stegun 7.1.26 (within 5e-7 absolute).
func GELU(v []float32) { activate(v, actGELU) }

const (
	actSigmoid = iota
	actSiLU
	actHardSwish
	actTanh
	actGELU
)

// actVec are the assembly's constants, eight lanes each, read as memory
// operands.
var actVec = func() (c [16][8]float32) {
	for i, x := range []float32{
		math.Float32frombits(0x80000000), // 0: sign bit
		math.Float32frombits(0x7fffffff), // 1: all but the sign
		-87, 88, 1.0 / 6, 0.5, 0, 1,      // 2..7
		6, 1 / math.Sqrt2, 0.3275911, // 8..10: erf's clamp, 1/sqrt 2, p
		1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592, // 11..15: a5..a1
	} {
		for j := range c[i] {
			c[i][j] = x
		}
	}
	return c
}()

func activateGo(v []float32, kind int) {
	for i, x := range v {
		v[i] = activate1(x, kind)
	}
}

func activate1(x float32, kind int) float32 {
	switch kind {
	case actSigmoid:
		return 1 / (1 + expGo1(clampExp(-x)))
	case actSiLU:
		return x / (1 + expGo1(clampExp(-x)))
	case actHardSwish:
		return x * min(max(x*(1.0/6)+0.5, 0), 1)
	case actTanh:
		return 1 - 2/(1+expGo1(clampExp(2*x)))
	}
	ax := float32(math.Abs(float64(x)))
	c := min(ax*(1/math.Sqrt2), 6) // erf's argument, where erf is 1 past 6
	t := 1 / (1 + 0.3275911*c)
	p := ((((1.061405429*t-1.453152027)*t+1.421413741)*t-0.284496736)*t + 0.254829592) * t
	return 0.5 * (x + ax*(1-p*expGo1(-c*c)))
}

// clampExp keeps an exponential's argument where it stays finite and
// normal; NaN passes.
func clampExp(x float32) float32 {
	if x < -87 {
		return -87
	}
	if x > 88 {
		return 88
	}
	return x
}

// ExpShift sets dst[i] = e^(src[i]-m), the exponentials of a softmax
// shifted by its maximum m; arguments below -87 count as -87 (results
// under 2e-38 are raised to it, negligible next to the maximum's 1).
// dst and src must not overlap unless they are the same slice.
func ExpShift(dst, src []float32, m float32) {
	src = src[:len(dst)]
	expShift(dst, src, m)
}

func expShiftGo(dst, src []float32, m float32) {
	for i, x := range src {
		dst[i] = expGo1(max(x-m, -87))
	}
}

// Clamp sets v[i] = min(max(a*v[i]+b, lo), hi) (Clip and Relu6 with a = 1,
// b = 0; HardSigmoid with lo = 0, hi = 1); NaNs stay NaN, as with Go's
// min and max.
func Clamp(v []float32, a, b, lo, hi float32) { clamp(v, a, b, lo, hi) }

func clampGo(v []float32, a, b, lo, hi float32) {
	for i, x := range v {
		v[i] = min(max(a*x+b, lo), hi)
	}
}
