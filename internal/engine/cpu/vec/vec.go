// Package vec holds the cpu engine's element-wise loops over float32
// slices (the eager graph's batch norm, relu and add, and pooling's
// reductions), in AVX2 assembly on amd64 when the CPU has it and pure Go
// elsewhere. All functions work on the first len(dst) elements and panic if
// an operand is shorter: callers size them.
package vec

import "math"

// ScaleShift sets dst[i] = src[i]*scale + shift.
func ScaleShift(dst, src []float32, scale, shift float32) {
	src = src[:len(dst)]
	scaleShift(dst, src, scale, shift)
}

// ReLU sets dst[i] = max(src[i], 0); NaN stays NaN, as in PyTorch.
func ReLU(dst, src []float32) {
	src = src[:len(dst)]
	relu(dst, src)
}

// Add sets dst[i] = a[i] + b[i].
func Add(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	add(dst, a, b)
}

// Mul sets dst[i] = a[i] * b[i].
func Mul(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	mul(dst, a, b)
}

// Max sets dst[i] = max(dst[i], src[i]).
func Max(dst, src []float32) {
	src = src[:len(dst)]
	maxInto(dst, src)
}

// Axpy sets dst[i] += a*src[i] (fused multiply-add where the CPU has it).
func Axpy(dst, src []float32, a float32) {
	src = src[:len(dst)]
	axpy(dst, src, a)
}

// Exp sets dst[i] = e^src[i] to about one ulp. dst and src must not
// overlap.
func Exp(dst, src []float32) {
	src = src[:len(dst)]
	exp(dst, src)
}

// Dot returns the sum of a[i]*b[i] for i < len(a) (in an order of its
// choosing); b must be at least as long.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	return dot(a, b)
}

// Sum returns the sum of v (in an order of its choosing).
func Sum(v []float32) float32 { return sum(v) }

func scaleShiftGo(dst, src []float32, scale, shift float32) {
	for i, v := range src {
		dst[i] = v*scale + shift
	}
}

func axpyGo(dst, src []float32, a float32) {
	for i, v := range src {
		dst[i] += a * v
	}
}

func reluGo(dst, src []float32) {
	for i, v := range src {
		dst[i] = max(v, 0)
	}
}

func addGo(dst, a, b []float32) {
	for i, v := range a {
		dst[i] = v + b[i]
	}
}

func mulGo(dst, a, b []float32) {
	for i, v := range a {
		dst[i] = v * b[i]
	}
}

func maxGo(dst, src []float32) {
	for i, v := range src {
		dst[i] = max(dst[i], v)
	}
}

func dotGo(a, b []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func sumGo(v []float32) float32 {
	// Four partial sums: shorter dependency chains, and the same
	// association as nothing in particular, like any vectorized sum.
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(v); i += 4 {
		s0 += v[i]
		s1 += v[i+1]
		s2 += v[i+2]
		s3 += v[i+3]
	}
	for ; i < len(v); i++ {
		s0 += v[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func expGo(dst, src []float32) {
	for i, x := range src {
		dst[i] = expGo1(x)
	}
}

// expGo1 is e^x: x = n*ln2 + r with |r| <= ln2/2, e^r = 1 + r + r^2 q(r)
// with q a cubic fitted for relative error (about 1e-7), 2^n put in the
// exponent bits; results outside float32's
// normal range come from math.Exp.
func expGo1(x float32) float32 {
	if !(x > -87 && x < 88) { // NaN included
		return float32(math.Exp(float64(x)))
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	fn := float32(math.RoundToEven(float64(x * log2e)))
	r := x - fn*ln2hi - fn*ln2lo
	q := ((8.3125038e-3*r+4.1890334e-2)*r+1.6667116e-1)*r + 4.9999231e-1
	e := q*r*r + r + 1
	return e * math.Float32frombits(uint32(int32(fn)+127)<<23)
}
