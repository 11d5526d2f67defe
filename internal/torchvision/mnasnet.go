package torchvision

import (
	"fmt"

	"goinfer/internal/checkpoint"
	"goinfer/internal/ir"
)

// MNASNetConfig is torchvision's MNASNet with depth multiplier Alpha.
type MNASNetConfig struct {
	Alpha float64
	// V1Stem is the fixed 32/16-channel stem of torchvision's first MNASNet
	// version, which the published mnasnet0_5 weights were saved with.
	V1Stem  bool
	Classes int
}

func init() {
	for name, a := range map[string]float64{"mnasnet0_5": 0.5, "mnasnet0_75": 0.75, "mnasnet1_0": 1.0, "mnasnet1_3": 1.3} {
		a := a
		register(name, "classifier.1.weight", func(classes int) Config { return MNASNetConfig{Alpha: a, Classes: classes} })
	}
}

// adapt recognises a first-version checkpoint by its stem's width, as
// torchvision's loader does by the version it records.
func (c MNASNetConfig) adapt(sd *checkpoint.StateDict) Config {
	if t, ok := sd.Get("layers.0.weight"); ok && len(t.Shape) == 4 && t.Shape[0] == 32 && c.Alpha != 1 {
		c.V1Stem = true
	}
	return c
}

// Name implements Config.
func (c MNASNetConfig) Name() string {
	n := fmt.Sprintf("mnasnet%g", c.Alpha)
	switch c.Alpha {
	case 0.5:
		n = "mnasnet0_5"
	case 0.75:
		n = "mnasnet0_75"
	case 1:
		n = "mnasnet1_0"
	case 1.3:
		n = "mnasnet1_3"
	}
	return n
}

func (c MNASNetConfig) build(b *builder, x *ir.Value, _ int) *ir.Value {
	const eps = 1e-5
	d := make([]int, 8)
	for i, v := range []int{32, 16, 24, 40, 80, 96, 192, 320} {
		d[i] = makeDivisible(float64(v)*c.Alpha, 8, 0)
	}
	if c.V1Stem {
		d[0], d[1] = 32, 16
	}
	y := b.relu("layers.2", b.convBN("layers", 0, x, convArgs{in: 3, out: d[0], k: 3, stride: 2, pad: 1}))
	y = b.relu("layers.5", b.convBN("layers", 3, y, convArgs{in: d[0], out: d[0], k: 3, pad: 1, groups: d[0]}))
	y = b.convBN("layers", 6, y, convArgs{in: d[0], out: d[1], k: 1})
	// Stacks of inverted residuals: kernel, stride, expansion, repeats.
	for si, s := range [][4]int{{3, 2, 3, 3}, {5, 2, 3, 3}, {5, 2, 6, 3}, {3, 1, 6, 2}, {5, 2, 6, 4}, {3, 1, 6, 1}} {
		in, out := d[si+1], d[si+2]
		k, stride, exp := s[0], s[1], s[2]
		for j := 0; j < s[3]; j++ {
			p := fmt.Sprintf("layers.%d.%d.layers", 8+si, j)
			st := stride
			if j > 0 {
				st, in = 1, out
			}
			mid := in * exp
			r := b.relu(p+".2", b.convBN(p, 0, y, convArgs{in: in, out: mid, k: 1}))
			r = b.relu(p+".5", b.convBN(p, 3, r, convArgs{in: mid, out: mid, k: k, stride: st, pad: k / 2, groups: mid}))
			r = b.convBN(p, 6, r, convArgs{in: mid, out: out, k: 1})
			if in == out && st == 1 {
				r = b.add(p+".add", r, y)
			}
			y = r
		}
	}
	y = b.relu("layers.16", b.convBN("layers", 14, y, convArgs{in: d[7], out: 1280, k: 1}))
	y = b.poolFlatten("mean", y)
	return b.linear("classifier.1", y, 1280, c.Classes)
}
