//go:build amd64 && !purego

package vec

import "golang.org/x/sys/cpu"

// useAsm is fixed at start-up from the CPU's features.
var useAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// The assembly loops handle n/8*8 elements; Go finishes the rest.

//go:noescape
func scaleShiftAVX2(dst, src *float32, n int, scale, shift float32)

//go:noescape
func reluAVX2(dst, src *float32, n int)

//go:noescape
func addAVX2(dst, a, b *float32, n int)

//go:noescape
func maxAVX2(dst, src *float32, n int)

//go:noescape
func sumAVX2(v *float32, n int) float32

func scaleShift(dst, src []float32, scale, shift float32) {
	n := len(dst) &^ 7
	if useAsm && n > 0 {
		scaleShiftAVX2(&dst[0], &src[0], n, scale, shift)
	} else {
		n = 0
	}
	scaleShiftGo(dst[n:], src[n:], scale, shift)
}

func relu(dst, src []float32) {
	n := len(dst) &^ 7
	if useAsm && n > 0 {
		reluAVX2(&dst[0], &src[0], n)
	} else {
		n = 0
	}
	reluGo(dst[n:], src[n:])
}

func add(dst, a, b []float32) {
	n := len(dst) &^ 7
	if useAsm && n > 0 {
		addAVX2(&dst[0], &a[0], &b[0], n)
	} else {
		n = 0
	}
	addGo(dst[n:], a[n:], b[n:])
}

func maxInto(dst, src []float32) {
	n := len(dst) &^ 7
	if useAsm && n > 0 {
		maxAVX2(&dst[0], &src[0], n)
	} else {
		n = 0
	}
	maxGo(dst[n:], src[n:])
}

func sum(v []float32) float32 {
	n := len(v) &^ 7
	if !useAsm || n == 0 {
		return sumGo(v)
	}
	return sumAVX2(&v[0], n) + sumGo(v[n:])
}

//go:noescape
func axpyAVX2(dst, src *float32, n int, a float32)

func axpy(dst, src []float32, a float32) {
	n := len(dst) &^ 7
	if useAsm && n > 0 {
		axpyAVX2(&dst[0], &src[0], n, a)
	} else {
		n = 0
	}
	axpyGo(dst[n:], src[n:], a)
}

// expConst are the exponential's constants (EXP in vec_amd64.s): log2e,
// ln2 in two parts, the polynomial's coefficients from the highest,
// expMagic, an unused slot, and 1. Slot order matches the registers the
// assembly loads them into.
var expConst = [11]uint32{
	0x3fb8aa3b, // log2e
	0x3f318000, // 0.693359375
	0xb95e8083, // -2.12194440e-4
	0x3c08312b, // 8.3125038e-3
	0x3d2b9533, // 4.1890334e-2
	0x3e2aabd8, // 1.6667116e-1
	0x3efffefe, // 4.9999231e-1
	0x4b40007f, // expMagic: 1.5*2^23 + 127
	0,
	0x3f800000, // 1
	0,
}

//go:noescape
func expAVX2(dst, src *float32, n int)

func exp(dst, src []float32) {
	n := len(dst) &^ 7
	if useAsm && n > 0 {
		expAVX2(&dst[0], &src[0], n)
		for i, x := range src[:n] {
			if !(x > -87 && x < 88) {
				dst[i] = expGo1(x)
			}
		}
	} else {
		n = 0
	}
	expGo(dst[n:], src[n:])
}

//go:noescape
func tapsAVX2(dst, src *float32, n int, offs *int, w *float32, taps int, bias float32)

//go:noescape
func tapsAVX512(dst, src *float32, n int, offs *int, w *float32, taps int, bias float32)

func taps(dst, src []float32, offs []int, w []float32, bias float32) {
	n := 0
	if useAVX512 && len(dst) >= 16 && len(offs) > 0 {
		n = len(dst) &^ 15
		tapsAVX512(&dst[0], &src[0], n, &offs[0], &w[0], len(offs), bias)
	}
	if m := len(dst) &^ 7; useAsm && m > n && len(offs) > 0 {
		// src[n] exists: every output reads src at offs[t] + its index.
		tapsAVX2(&dst[n], &src[n], m-n, &offs[0], &w[0], len(offs), bias)
		n = m
	}
	if n == len(dst) {
		return
	}
	rest := dst[n:]
	for i := range rest {
		rest[i] = bias
	}
	for t, o := range offs {
		axpyGo(rest, src[o+n:o+len(dst)], w[t])
	}
}

//go:noescape
func actAVX2(v *float32, n, kind int)

//go:noescape
func actAVX512(v *float32, n, kind int)

// useAVX512 runs the activations and Taps 16 lanes at a time (the same
// operations per lane as the AVX2 loops, so the same results).
var useAVX512 = useAsm && cpu.X86.HasAVX512F

func activate(v []float32, kind int) {
	n := 0
	if useAVX512 && len(v) >= 16 {
		n = len(v) &^ 15
		actAVX512(&v[0], n, kind)
	}
	if m := len(v) &^ 7; useAsm && m > n {
		actAVX2(&v[n], m-n, kind)
		n = m
	}
	activateGo(v[n:], kind)
}

//go:noescape
func deinterleave2AVX2(even, odd, src *float32, n int)

func deinterleave2(even, odd, src []float32) {
	n := len(even) &^ 7
	if useAsm && n > 0 {
		deinterleave2AVX2(&even[0], &odd[0], &src[0], n)
	} else {
		n = 0
	}
	deinterleave2Go(even[n:], odd[n:], src[2*n:])
}

//go:noescape
func mulAVX2(dst, a, b *float32, n int)

func mul(dst, a, b []float32) {
	n := len(dst) &^ 7
	if useAsm && n > 0 {
		mulAVX2(&dst[0], &a[0], &b[0], n)
	} else {
		n = 0
	}
	mulGo(dst[n:], a[n:], b[n:])
}

//go:noescape
func expShiftAVX2(dst, src *float32, n int, m float32)

func expShift(dst, src []float32, m float32) {
	n := len(dst) &^ 7
	if useAsm && n > 0 {
		expShiftAVX2(&dst[0], &src[0], n, m)
	} else {
		n = 0
	}
	expShiftGo(dst[n:], src[n:], m)
}

//go:noescape
func dotAVX2(a, b *float32, n int) float32

func dot(a, b []float32) float32 {
	n := len(a) &^ 7
	if !useAsm || n == 0 {
		return dotGo(a, b)
	}
	return dotAVX2(&a[0], &b[0], n) + dotGo(a[n:], b[n:])
}

//go:noescape
func clampAVX2(v *float32, n int, a, b, lo, hi float32)

func clamp(v []float32, a, b, lo, hi float32) {
	n := len(v) &^ 7
	if useAsm && n > 0 {
		clampAVX2(&v[0], n, a, b, lo, hi)
	} else {
		n = 0
	}
	clampGo(v[n:], a, b, lo, hi)
}
