package cuda

import cu "goinfer/internal/cuda"

// variant is one way to run a plain convolution: an algorithm under a
// math type (-1: the descriptor's default, for float32).
type variant struct{ algo, math int }

// exhaustiveBatch is the largest batch whose convolutions time every
// candidate: at small batches Find's own ranking is noise (resnet50 at
// batch 1: Find put the plain implicit GEMM first on its 1x1 layers and
// the precomputed GEMM with tensor cores, 2-3x faster when timed, past the
// shortlist's reach; the forward went from 0.89 to 1.34 ms), and timing
// every candidate of a small problem costs little compile time.
const exhaustiveBatch = 8

// exhaustiveTuning says whether a convolution of batch n times every
// candidate: at small batches, or when asked (Options.TuneAll).
func exhaustiveTuning(n int, all bool) bool { return all || n <= exhaustiveBatch }

// tuneCands are the calls tuneFused times for one convolution.
type tuneCands struct {
	fused []int     // algorithms of the fused call, in Find's order
	plain []variant // plain convolution + epilogue, in Find's order
}

// tuneCandidates shortlists, from Find's measurements of the plain
// convolution (perf, best first), what tuneFused times: the fused call with
// each algorithm and the plain call with each (algorithm, math type). A
// candidate beyond 3x Find's best (and 0.05 ms, below which Find's ranking
// of tiny problems is unreliable) is not timed: each timing costs about ten
// calls of the candidate, so candidates Find measured 30-50x slower than
// its best (IMPLICIT_GEMM fused at batch 256, 5-9 ms against 0.1-0.2; the
// default math type of a half-precision layer, 1.4-2.7 ms) cost more
// compile time than all the others together and never won. chosen, the
// variant the plan runs when nothing is timed, always is. halfMath says
// whether math types matter (anything but float32). all keeps the
// exhaustive rule: every fused algorithm, and every math type of chosen's
// algorithm.
func tuneCandidates(perf []cu.ConvFwdPerf, chosen variant, halfMath, all bool) tuneCands {
	var c tuneCands
	limit := max(3*findTime(perf, chosen.algo), 0.05)
	tried := map[int]bool{}
	for _, pf := range perf {
		a := int(pf.Algo)
		if pf.Status != 0 || tried[a] {
			continue
		}
		tried[a] = true
		if !all && a != chosen.algo && pf.Time > limit {
			continue
		}
		c.fused = append(c.fused, a)
	}
	seen := map[variant]bool{}
	for _, pf := range perf {
		v := variant{int(pf.Algo), -1}
		if halfMath {
			v.math = int(pf.MathType)
		}
		if pf.Status != 0 || seen[v] {
			continue
		}
		exempt := v == chosen
		if all {
			exempt = v.algo == chosen.algo
		}
		if !exempt && pf.Time > limit {
			continue
		}
		seen[v] = true
		c.plain = append(c.plain, v)
	}
	return c
}
