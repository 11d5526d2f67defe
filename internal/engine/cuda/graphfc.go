package cuda

import "goinfer/internal/ir"

// Dense layers at small batches. Squeeze-and-excitation blocks
// (MobileNetV3, EfficientNet, RegNetY) apply two 1x1 convolutions to the
// pooled [N, C, 1, 1] vector. As cuDNN convolutions each is a library call
// plus, for activations the fused call lacks (SiLU, sigmoid, hard sigmoid),
// an epilogue kernel, plus a zero fill and a copy when the input has fewer
// than 8 channels: at batch 1 up to four launches for a few kilobytes of
// work, where launch latency, not arithmetic, is the cost. graph.cu's fc
// kernel (a warp per output, bias and activation fused) is one launch.

// fcMaxBatch is the largest batch whose dense layers take the fc kernel.
// Each warp reads its output's weight row, so the weights are read once per
// image: at larger batches cuDNN's GEMM, which shares them, is kept.
const fcMaxBatch = 8

// fcWarps is the fc kernel's warps per block.
const fcWarps = 8

// isFC reports whether g is a dense layer: a 1x1 convolution, ungrouped,
// of a 1x1 image.
func (g *convGeom) isFC() bool {
	return g.groups == 1 && g.h == 1 && g.w == 1 && g.oh == 1 && g.ow == 1 && g.kh == 1 && g.kw == 1 &&
		g.padH == 0 && g.padW == 0
}

// fcStep lowers dense layer g (y = act(W x + bias), no residual) to the fc
// kernel when the batch is small; it reports whether it did. The filter
// goes to the step as float32 [K][C] (the IR's [K][C][1][1]), as the
// depthwise kernels take theirs.
func (nc *nodeCtx) fcStep(g *convGeom, x int, bias []float32, e ir.Epilogue) (bool, error) {
	if !g.isFC() || g.n > fcMaxBatch || e.Residual {
		return false, nil
	}
	act, p0, p1, err := actCode(e)
	if err != nil {
		return false, err
	}
	y := nc.out[0]
	nc.outCL(y)
	if !nc.isContig(y) || nc.pl.p.isView(y) {
		return false, nil
	}
	w, err := nc.constFloats(1)
	if err != nil {
		return false, err
	}
	if x, err = nc.contig(x); err != nil {
		return false, err
	}
	nc.add(&gstep{kind: stFC, out: y, a: x, b: -1, res: -1, conv: g, scale: w, shift: bias,
		n: int64(g.n * g.k), op: act, p0: p0, p1: p1})
	return true, nil
}

// fcGrid is the fc kernel's block count for s: a warp per output.
func fcGrid(s *gstep) int {
	return rowGrid(int((s.n + fcWarps - 1) / fcWarps))
}
