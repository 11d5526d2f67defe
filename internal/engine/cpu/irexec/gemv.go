package irexec

import "goinfer/internal/engine/cpu/vec"

// gemvStep is a 1x1 convolution of one group on 1x1 maps (a
// squeeze-and-excitation block's fully connected layers): per image, each
// output channel is one dot product of a weight row with the input's
// channels, which are contiguous. The GEMM path would fill a 16-wide panel
// with one pixel.
type gemvStep struct {
	n, inC, outC  int
	src, res, dst int // res is -1 without a residual input
	w, bias       []float32
	act           act
}

// gemvMaxBatch is the largest batch run as dot products: from there on the
// GEMM's panels fill with images and it is as fast (MobileNetV3 at batch 32:
// 3.5-3.8 ms either way).
const gemvMaxBatch = 8

// newGemvStep returns the step for g, or nil when g is not a 1x1
// convolution of one group from and to 1x1 maps at a small batch.
func newGemvStep(nc *nodeCtx, g convGeom, w, bias []float32, res int, ac act) *gemvStep {
	if g.groups != 1 || g.kh != 1 || g.kw != 1 || g.ih*g.iw != 1 || g.oh*g.ow != 1 || g.n > gemvMaxBatch {
		return nil
	}
	return &gemvStep{n: g.n, inC: g.inC, outC: g.outC, src: nc.in[0], res: res, dst: nc.out[0], w: w, bias: bias, act: ac}
}

func (s *gemvStep) run(x *Exec) error {
	// Rows of a few hundred channels are a few microseconds of work; a
	// task gets at least 16K multiply-adds, so that an SE block's small
	// layers (72 -> 24 -> 72 channels) run inline instead of paying a
	// hand-off for a fraction of a microsecond of work.
	x.parRange(s, s.outC, max(64, (16<<10)/max(1, s.inC*s.n)))
	return nil
}

// rng computes output channels [lo, hi) of every image.
func (s *gemvStep) rng(x *Exec, _, lo, hi int) {
	in, out := x.f32(s.src), x.f32(s.dst)
	var res []float32
	if s.res >= 0 {
		res = x.f32(s.res)
	}
	// A weight row stays in cache while every image uses it.
	for m := lo; m < hi; m++ {
		w := s.w[m*s.inC : (m+1)*s.inC]
		var b float32
		if s.bias != nil {
			b = s.bias[m]
		}
		for img := range s.n {
			out[img*s.outC+m] = vec.Dot(w, in[img*s.inC:(img+1)*s.inC]) + b
		}
	}
	for img := range s.n {
		o := out[img*s.outC+lo : img*s.outC+hi]
		if res != nil {
			vec.Add(o, o, res[img*s.outC+lo:img*s.outC+hi])
		}
		s.act.apply(o)
	}
}
