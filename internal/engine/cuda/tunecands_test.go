package cuda

import (
	"reflect"
	"testing"

	cu "goinfer/internal/cuda"
)

func TestTuneCandidates(t *testing.T) {
	const (
		implicit = 0 // IMPLICIT_GEMM
		precomp  = cu.ConvFwdAlgoImplicitPrecompGemm
		gemm     = 2
		fft      = 4
		failed   = 9 // status not 0
	)
	pf := func(algo, math int, ms float32) cu.ConvFwdPerf {
		return cu.ConvFwdPerf{Algo: int32(algo), MathType: int32(math), Time: ms}
	}
	bad := cu.ConvFwdPerf{Algo: failed, Status: 3, Time: 0.01}
	// A half-precision 3x3 layer at batch 256 as Find ranks it on an H200:
	// precomputed GEMM with tensor cores, then the same without them and
	// the plain implicit GEMM, 25-30x slower.
	batch256 := []cu.ConvFwdPerf{pf(precomp, 1, 0.085), pf(precomp, 0, 2.0), pf(implicit, 1, 2.5), pf(implicit, 0, 2.6), bad}
	// A 1x1 downsample where implicit GEMM wins and precomputed GEMM is
	// within reach.
	downsample := []cu.ConvFwdPerf{pf(implicit, 0, 0.20), pf(precomp, 1, 0.30), pf(precomp, 0, 0.31), pf(fft, 0, 1.5)}
	// Batch 1: everything under the 0.05 ms floor is timed.
	batch1 := []cu.ConvFwdPerf{pf(precomp, 1, 0.010), pf(gemm, 1, 0.030), pf(implicit, 0, 0.045), pf(fft, 0, 0.2)}
	// float32: math types do not matter, so variants carry -1.
	fp32 := []cu.ConvFwdPerf{pf(precomp, 0, 0.5), pf(precomp, 1, 0.5), pf(gemm, 0, 1.2), pf(fft, 0, 1.6)}

	tests := []struct {
		name     string
		perf     []cu.ConvFwdPerf
		chosen   variant
		halfMath bool
		all      bool
		want     tuneCands
	}{
		{"batch 256 shortlist", batch256, variant{precomp, 1}, true, false,
			tuneCands{fused: []int{precomp}, plain: []variant{{precomp, 1}}}},
		{"batch 256 exhaustive", batch256, variant{precomp, 1}, true, true,
			tuneCands{fused: []int{precomp, implicit}, plain: []variant{{precomp, 1}, {precomp, 0}}}},
		{"downsample", downsample, variant{implicit, 0}, true, false,
			tuneCands{fused: []int{implicit, precomp}, plain: []variant{{implicit, 0}, {precomp, 1}, {precomp, 0}}}},
		{"batch 1 floor", batch1, variant{precomp, 1}, true, false,
			tuneCands{fused: []int{precomp, gemm, implicit}, plain: []variant{{precomp, 1}, {gemm, 1}, {implicit, 0}}}},
		{"float32", fp32, variant{precomp, -1}, false, false,
			tuneCands{fused: []int{precomp, gemm}, plain: []variant{{precomp, -1}, {gemm, -1}}}},
		// The workspace limit can make the plan choose a variant Find
		// ranked slow: the reach is measured from it, so the faster ones
		// are timed too.
		{"chosen slow", batch256, variant{implicit, 0}, true, false,
			tuneCands{fused: []int{precomp, implicit}, plain: []variant{{precomp, 1}, {precomp, 0}, {implicit, 1}, {implicit, 0}}}},
		// Only the chosen variant is exempt from the reach, not its
		// algorithm's other math types.
		{"chosen math only", []cu.ConvFwdPerf{pf(precomp, 1, 0.1), pf(gemm, 1, 0.2), pf(precomp, 0, 2.0)}, variant{precomp, 1}, true, false,
			tuneCands{fused: []int{precomp, gemm}, plain: []variant{{precomp, 1}, {gemm, 1}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tuneCandidates(tc.perf, tc.chosen, tc.halfMath, tc.all)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("tuneCandidates = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestExhaustiveTuning(t *testing.T) {
	for _, tc := range []struct {
		n    int
		all  bool
		want bool
	}{
		{1, false, true},
		{exhaustiveBatch, false, true},
		{exhaustiveBatch + 1, false, false},
		{256, false, false},
		{256, true, true},
	} {
		if got := exhaustiveTuning(tc.n, tc.all); got != tc.want {
			t.Errorf("exhaustiveTuning(%d, %v) = %v, want %v", tc.n, tc.all, got, tc.want)
		}
	}
}
