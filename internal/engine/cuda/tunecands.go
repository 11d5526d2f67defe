package cuda

import (
	"fmt"

	cu "goinfer/internal/cuda"
)

// tuneModeEnv chooses how the compiled ResNet path picks each
// convolution's algorithms (tuneMode); unset is tuneFind.
const tuneModeEnv = "GOINFER_CUDA_TUNE"

// tuneMode is how candidates are found and shortlisted for timing.
type tuneMode uint8

const (
	// tuneFind: cudnnFind measures every algorithm of the plain
	// convolution; tuneFused times those within reach of its best.
	tuneFind tuneMode = iota
	// tuneAll: cudnnFind, then every fused algorithm and every math type
	// of Find's choice timed, as before the shortlist ("all"): to check
	// that the shortlist loses nothing.
	tuneAll
	// tuneHeuristic: no cudnnFind; cuDNN's heuristics rank the
	// algorithms and tuneFused times the first heuristicCands of them
	// ("heuristic").
	tuneHeuristic
)

// heuristicCands is how many of the heuristics' algorithms (fused call)
// and variants (plain call) tuneHeuristic times.
const heuristicCands = 3

// tuneModeOf parses tuneModeEnv's value.
func tuneModeOf(s string) (tuneMode, error) {
	switch s {
	case "", "find":
		return tuneFind, nil
	case "all":
		return tuneAll, nil
	case "heuristic":
		return tuneHeuristic, nil
	}
	return tuneFind, fmt.Errorf("cuda engine: %s=%q: want find, all or heuristic", tuneModeEnv, s)
}

// variant is one way to run a plain convolution: an algorithm under a
// math type (-1: the descriptor's default, for float32).
type variant struct{ algo, math int }

// tuneCands are the calls tuneFused times for one convolution.
type tuneCands struct {
	fused []int     // algorithms of the fused call, in Find's order
	plain []variant // plain convolution + epilogue, in Find's order
}

// tuneCandidates shortlists, from cuDNN's ranking of the plain
// convolution (perf, best first), what tuneFused times: the fused call with
// each algorithm and the plain call with each (algorithm, math type).
//
// With Find's measurements (tuneFind), a candidate beyond 3x Find's best
// (and 0.05 ms, below which Find's ranking of tiny problems is
// unreliable) is not timed. Each timing costs about ten calls of the
// candidate, so candidates Find measured 30-50x slower than its best
// (IMPLICIT_GEMM fused at batch 256, 5-7 ms against 0.1; the default math
// type of a half-precision layer, 2 ms) cost more compile time than all
// the others together and never won. tuneAll keeps the exhaustive rule:
// every fused algorithm, and every math type of chosen's algorithm. With
// the heuristics' ranking (tuneHeuristic, no times), the first
// heuristicCands of each are timed. chosen, the variant the plan runs when
// nothing is timed, always is. halfMath says whether math types matter
// (anything but float32).
func tuneCandidates(perf []cu.ConvFwdPerf, chosen variant, halfMath bool, mode tuneMode) tuneCands {
	var c tuneCands
	limit := max(3*findTime(perf, chosen.algo), 0.05)
	tried := map[int]bool{}
	for _, pf := range perf {
		a := int(pf.Algo)
		if pf.Status != 0 || tried[a] {
			continue
		}
		tried[a] = true
		switch {
		case a == chosen.algo || mode == tuneAll:
		case mode == tuneHeuristic && len(c.fused) >= heuristicCands:
			continue
		case mode == tuneFind && pf.Time > limit:
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
		switch {
		case v == chosen:
		case mode == tuneAll && v.algo != chosen.algo && pf.Time > limit:
			continue
		case mode == tuneHeuristic && len(c.plain) >= heuristicCands:
			continue
		case mode == tuneFind && pf.Time > limit:
			continue
		}
		seen[v] = true
		c.plain = append(c.plain, v)
	}
	return c
}
