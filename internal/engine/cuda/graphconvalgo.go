package cuda

import (
	"fmt"
	"strings"

	cu "goinfer/internal/cuda"
)

// convSmallBatch is the largest batch whose convolutions prefer cuDNN's
// implicit precomputed GEMM to the plain implicit GEMM that cudnnFind may
// rank first.
//
// At batch 1 cudnnFind's times are a few microseconds apart and it often
// ranks the plain implicit GEMM first, a generic kernel that in the CUDA
// graph ran 3 to 20 times slower than the precomputed variant on the same
// shapes (H200, fp16, batch-1 profiles in results/models/gpu-bs1-h200-2026-11-27:
// efficientnet_b0's unfused 1x1 expansions 192->1152 at 7x7 took 31 us
// against 5 us for the fused 1152->192 projections, which always run
// precomputed; densenet121's four transition and block-3 convolutions
// 0.41 ms of its 1.30). The fused call already insists on the precomputed
// GEMM for the same reason (buildConv). Larger batches keep Find's ranking.
const convSmallBatch = 8

// pickConvAlgo is the algorithm to run among Find's or the heuristic's
// results for a convolution of batch n: the first that succeeded and fits
// the workspace, except that at small batches the implicit precomputed
// GEMM replaces a first-ranked plain implicit GEMM when it fits too; -1
// if none fits.
func pickConvAlgo(perf []cu.ConvFwdPerf, n int, fits func(algo int) bool) int {
	algo := -1
	for _, pf := range perf {
		if pf.Status == 0 && fits(int(pf.Algo)) {
			algo = int(pf.Algo)
			break
		}
	}
	if algo != cu.ConvFwdAlgoImplicitGemm || n > convSmallBatch {
		return algo
	}
	for _, pf := range perf {
		if pf.Status == 0 && int(pf.Algo) == cu.ConvFwdAlgoImplicitPrecompGemm && fits(int(pf.Algo)) {
			return int(pf.Algo)
		}
	}
	return algo
}

// findLog is a line reporting cudnnFind's ranking of a convolution and the
// algorithm picked (engine.Options.GraphExperiments "findlog"): the
// evidence for why an unfused convolution runs the plain implicit GEMM.
func findLog(node string, g *convGeom, perf []cu.ConvFwdPerf, picked int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cuda: find %s n%d c%d %dx%d k%d %dx%d s%d g%d: picked %s;", node, g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.strH,
		g.groups, cu.ConvFwdAlgoName(picked))
	for _, pf := range perf {
		fmt.Fprintf(&b, " %s/math%d/st%d %.4f ms %d KiB;", cu.ConvFwdAlgoName(int(pf.Algo)), pf.MathType, pf.Status, pf.Time, pf.Memory>>10)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// convPick is a convolution's algorithm and the math type cudnnFind (or
// the heuristic) ranked it under (-1: none given).
type convPick struct{ algo, math int }

// pickedMath is the math type of perf's first successful entry for algo,
// the one pickConvAlgo took; -1 if there is none.
func pickedMath(perf []cu.ConvFwdPerf, algo int) int {
	for _, pf := range perf {
		if pf.Status == 0 && int(pf.Algo) == algo {
			return int(pf.MathType)
		}
	}
	return -1
}
