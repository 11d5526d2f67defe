package irexec

import (
	"goinfer/internal/ir"
)

// Split pays where a whole-batch plan would stream more activation bytes
// through memory than the chunks re-read weights: each step of a
// whole-batch plan writes and reads every image's activation (a batch of
// them is larger than the caches), while a Split keeps a chunk's
// activations in its core's caches and instead reads every weight once per
// chunk. splitMinActivationRatio is the least ratio of one image's
// activation bytes (the optimized graph's values) to its constants' bytes
// at which splitting gained on the 2-core VM, 2 threads
// (results/cpu/split-auto-2core-2026-11-27.md): EfficientNet-B0 (1.7) and
// MobileNetV3-Large (0.92) gained most, ViT-B/16 (0.73) gained ~10% CPU
// at batch 8 and broke even at 32, ResNet-18 (0.23) lost 5-10%.
const splitMinActivationRatio = 0.5

// splitMaxChunk bounds the chunk: four images gave the same speed as one
// for the small CNNs, with a quarter of the weight reads; larger chunks
// outgrow the caches the split is for.
const splitMaxChunk = 4

// SplitPays reports whether a batch of g runs faster as chunks (Split)
// than as one whole-batch plan, by splitMinActivationRatio, for a graph
// whose images are independent (ir.BatchIndependent). It binds g at
// batch 1.
func SplitPays(g *ir.Graph) (bool, error) {
	r, err := activationRatio(g)
	return r >= splitMinActivationRatio, err
}

// activationRatio is the bytes of the values one image computes over the
// bytes of g's constants, at batch 1.
func activationRatio(g *ir.Graph) (float64, error) {
	b, _, err := ir.Optimize(g, 1)
	if err != nil {
		return 0, err
	}
	var act, weights int64
	seen := map[*ir.Value]bool{}
	for _, n := range b.Nodes {
		for _, v := range n.Inputs {
			if v.IsConst() && !seen[v] {
				seen[v] = true
				weights += int64(len(v.Const.Data))
			}
		}
		for _, v := range n.Outputs {
			if v != nil {
				act += int64(v.Type.Shape.NumElements() * v.Type.DType.Size())
			}
		}
	}
	if weights == 0 {
		return 0, nil
	}
	return float64(act) / float64(weights), nil
}

// SplitPossible reports whether SplitChunk splits any batch of up to
// maxBatch images on threads workers: one needs at least two chunks of one
// image per worker. Where it does not, a caller can skip SplitPays (an
// Optimize of the graph at load).
func SplitPossible(maxBatch, threads int) bool {
	return threads >= 2 && maxBatch >= 2*threads
}

// SplitChunk returns the chunk size in which threads workers should run a
// batch of n images that SplitPays, or 0 to run the whole batch as one.
// Every worker gets the same number of chunks, at least two so that a
// worker that starts late does not hold the others up a whole chunk; the
// chunk is the largest up to splitMaxChunk that allows that.
func SplitChunk(n, threads int) int {
	if !SplitPossible(n, threads) {
		return 0
	}
	for c := min(splitMaxChunk, n); c >= 1; c-- {
		if chunks := n / c; n%c == 0 && chunks%threads == 0 && chunks >= 2*threads {
			return c
		}
	}
	return 0
}
