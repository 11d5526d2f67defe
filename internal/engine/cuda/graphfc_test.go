package cuda

import (
	"testing"

	"goinfer/internal/ir"
)

// TestGraphPlanFC checks which convolutions become dense-layer steps: the
// squeeze-and-excitation layers of small batches (up to fcMaxBatch), not
// those of larger ones, which keep cuDNN's convolution and its epilogue
// kernels, nor convolutions of images larger than 1x1. The step counts
// are the launches a batch-1 CUDA graph saves.
func TestGraphPlanFC(t *testing.T) {
	for _, tc := range []struct {
		arch      string
		size      int
		batch     int
		fc, steps int
	}{
		// 16 blocks: cuDNN took conv + SiLU epilogue, then fill + copy
		// (4 to 8 squeezed channels) + conv + sigmoid epilogue.
		{"efficientnet_b0", 64, 1, 32, 133},
		{"efficientnet_b0", 64, fcMaxBatch + 1, 0, 171},
		// At 16 pixels the last stages' maps are 1x1 too: 12 more dense
		// layers than the 16 of the SE blocks (ReLU fc1 was one fused
		// cuDNN call, hard sigmoid fc2 two).
		{"mobilenet_v3_large", 16, fcMaxBatch, 28, 85},
		// No 1x1 images: nothing changes.
		{"resnet18", 64, 1, 0, -1},
	} {
		g, err := cachedModel(tc.arch, tc.size)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := ir.Optimize(g, tc.batch)
		if err != nil {
			t.Fatal(err)
		}
		p, err := planGraph(b, tc.batch, 2, true)
		if err != nil {
			t.Fatal(err)
		}
		k := p.kindCounts()
		if k[stFC] != tc.fc || (tc.steps >= 0 && len(p.steps) != tc.steps) {
			t.Errorf("%s batch %d: %d dense-layer steps of %d, want %d of %d", tc.arch, tc.batch, k[stFC], len(p.steps), tc.fc, tc.steps)
		}
		for _, s := range p.steps {
			if s.kind == stFC && (!s.conv.isFC() || s.conv.n > fcMaxBatch || len(s.scale) != s.conv.k*s.conv.c) {
				t.Errorf("%s: step %s is no small-batch dense layer: %+v", tc.arch, s.node, *s.conv)
			}
		}
	}
}

// TestFCGeom checks which convolution shapes are dense layers.
func TestFCGeom(t *testing.T) {
	fc := convGeom{n: 1, c: 16, h: 1, w: 1, k: 4, oh: 1, ow: 1, kh: 1, kw: 1, strH: 1, strW: 1, dilH: 1, dilW: 1, groups: 1}
	for _, tc := range []struct {
		name string
		edit func(g *convGeom)
		want bool
	}{
		{"1x1 image, 1x1 filter", func(*convGeom) {}, true},
		{"2x2 image", func(g *convGeom) { g.h, g.w, g.oh, g.ow = 2, 2, 2, 2 }, false},
		{"grouped", func(g *convGeom) { g.groups = 2 }, false},
		{"padded", func(g *convGeom) { g.padH, g.padW, g.oh, g.ow = 1, 1, 3, 3 }, false},
		{"3x3 filter on a padded 1x1 image", func(g *convGeom) { g.kh, g.kw, g.padH, g.padW = 3, 3, 1, 1 }, false},
	} {
		g := fc
		tc.edit(&g)
		if got := g.isFC(); got != tc.want {
			t.Errorf("%s: isFC %v, want %v", tc.name, got, tc.want)
		}
	}
}
