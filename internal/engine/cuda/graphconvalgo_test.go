package cuda

import (
	"testing"

	cu "goinfer/internal/cuda"
)

// TestPickConvAlgo checks the convolution algorithm taken from Find's
// ranking: the first that ran and fits, except a first-ranked plain
// implicit GEMM at small batches, which the precomputed variant replaces
// when it ran and fits.
func TestPickConvAlgo(t *testing.T) {
	const (
		gemm    = cu.ConvFwdAlgoImplicitGemm
		precomp = cu.ConvFwdAlgoImplicitPrecompGemm
		wino    = 6
	)
	rank := func(algos ...int) []cu.ConvFwdPerf {
		var p []cu.ConvFwdPerf
		for _, a := range algos {
			p = append(p, cu.ConvFwdPerf{Algo: int32(a)})
		}
		return p
	}
	all := func(int) bool { return true }
	for _, tc := range []struct {
		name string
		perf []cu.ConvFwdPerf
		n    int
		fits func(int) bool
		want int
	}{
		{"batch 1: precomputed replaces plain", rank(gemm, wino, precomp), 1, all, precomp},
		{"small batch limit", rank(gemm, precomp), convSmallBatch, all, precomp},
		{"large batch keeps Find's first", rank(gemm, precomp), convSmallBatch + 1, all, gemm},
		{"batch 1, another first", rank(wino, gemm, precomp), 1, all, wino},
		{"precomputed did not run", append(rank(gemm), cu.ConvFwdPerf{Algo: precomp, Status: 3}), 1, all, gemm},
		{"precomputed does not fit", rank(gemm, precomp), 1, func(a int) bool { return a != precomp }, gemm},
		{"first does not fit", rank(wino, gemm, precomp), 1, func(a int) bool { return a != wino }, precomp},
		{"none fits", rank(gemm, precomp), 1, func(int) bool { return false }, -1},
		{"none", nil, 1, all, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pickConvAlgo(tc.perf, tc.n, tc.fits); got != tc.want {
				t.Errorf("pickConvAlgo = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestPickedMath checks the math type kept with the picked algorithm:
// that of its first successful entry in Find's ranking (an algorithm may
// appear once per math type).
func TestPickedMath(t *testing.T) {
	const gemm, precomp = cu.ConvFwdAlgoImplicitGemm, cu.ConvFwdAlgoImplicitPrecompGemm
	perf := []cu.ConvFwdPerf{
		{Algo: gemm, MathType: cu.DefaultMath},
		{Algo: precomp, MathType: cu.TensorOpMath, Status: 3},
		{Algo: precomp, MathType: cu.DefaultMath},
		{Algo: gemm, MathType: cu.TensorOpMath},
	}
	for _, tc := range []struct {
		name string
		algo int
		want int
	}{
		{"first entry", gemm, cu.DefaultMath},
		{"failed entry skipped", precomp, cu.DefaultMath},
		{"absent", 6, -1},
	} {
		if got := pickedMath(perf, tc.algo); got != tc.want {
			t.Errorf("%s: math %d, want %d", tc.name, got, tc.want)
		}
	}
	if s := findLog("conv", &convGeom{n: 2, c: 40, h: 28, w: 28, k: 240, kh: 1, kw: 1, strH: 1, groups: 1}, perf[:1], gemm); s == "" {
		t.Error("empty find log line")
	}
}
