package torchvision

import (
	"fmt"
	"math"

	"goinfer/internal/ir"
)

// MobileNetV2Config is torchvision's MobileNetV2.
type MobileNetV2Config struct {
	WidthMult float64 // 1.0 for torchvision's mobilenet_v2
	// Setting rows are (expansion t, channels c, repeats n, stride s);
	// nil takes torchvision's.
	Setting [][4]int
	Classes int
}

var mobilenetV2Setting = [][4]int{
	{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1},
}

func init() {
	register("mobilenet_v2", "classifier.1.weight", func(classes int) Config {
		return MobileNetV2Config{WidthMult: 1, Classes: classes}
	})
	register("mobilenet_v3_large", "classifier.3.weight", func(classes int) Config {
		return MobileNetV3Config{Large: true, WidthMult: 1, Classes: classes}
	})
	register("mobilenet_v3_small", "classifier.3.weight", func(classes int) Config {
		return MobileNetV3Config{WidthMult: 1, Classes: classes}
	})
}

// Name implements Config.
func (c MobileNetV2Config) Name() string {
	if c.WidthMult == 1 && c.Setting == nil {
		return "mobilenet_v2"
	}
	return fmt.Sprintf("mobilenet_v2-w%g", c.WidthMult)
}

func (c MobileNetV2Config) build(b *builder, x *ir.Value, _ int) *ir.Value {
	const eps = 1e-5
	wm := c.WidthMult
	setting := c.Setting
	if setting == nil {
		setting = mobilenetV2Setting
	}
	in := makeDivisible(32*wm, 8, 0)
	last := makeDivisible(1280*math.Max(1, wm), 8, 0)
	y := b.convBNAct("features.0", x, 3, in, 3, 2, 1, actReLU6, eps)
	f := 1
	for _, s := range setting {
		t, ch, n, stride := s[0], s[1], s[2], s[3]
		out := makeDivisible(float64(ch)*wm, 8, 0)
		for i := 0; i < n; i++ {
			st := 1
			if i == 0 {
				st = stride
			}
			p := fmt.Sprintf("features.%d.conv", f)
			hidden := int(math.Round(float64(in * t)))
			r := y
			k := 0
			if t != 1 {
				r = b.convBNAct(fmt.Sprintf("%s.%d", p, k), r, in, hidden, 1, 1, 1, actReLU6, eps)
				k++
			}
			r = b.convBNAct(fmt.Sprintf("%s.%d", p, k), r, hidden, hidden, 3, st, hidden, actReLU6, eps)
			r = b.conv(fmt.Sprintf("%s.%d", p, k+1), r, convArgs{in: hidden, out: out, k: 1})
			r = b.bn(fmt.Sprintf("%s.%d", p, k+2), r, out, eps)
			if st == 1 && in == out {
				r = b.add(fmt.Sprintf("features.%d.add", f), y, r)
			}
			y, in = r, out
			f++
		}
	}
	y = b.convBNAct(fmt.Sprintf("features.%d", f), y, in, last, 1, 1, 1, actReLU6, eps)
	y = b.poolFlatten("avgpool", y)
	return b.linear("classifier.1", y, last, c.Classes)
}

// MobileNetV3Config is torchvision's MobileNetV3, large or small.
type MobileNetV3Config struct {
	Large     bool
	WidthMult float64
	// ReducedTail halves the last stage's channels (torchvision's
	// reduced_tail, for detection backbones).
	ReducedTail bool
	// Setting and LastChannel replace torchvision's block table and
	// classifier width when set (before the width multiplier).
	Setting     []V3Block
	LastChannel int
	Classes     int
}

// Name implements Config.
func (c MobileNetV3Config) Name() string {
	n := "mobilenet_v3_small"
	if c.Large {
		n = "mobilenet_v3_large"
	}
	if c.WidthMult != 1 || c.ReducedTail || c.Setting != nil {
		n += fmt.Sprintf("-w%g", c.WidthMult)
		if c.ReducedTail {
			n += "-reduced"
		}
	}
	return n
}

// V3Block is a row of torchvision's InvertedResidualConfig: input
// channels, kernel, expanded channels, output channels, squeeze-excite,
// hardswish (else ReLU), stride.
type V3Block struct {
	In, K, Exp, Out int
	SE, HS          bool
	Stride          int
}

func (c MobileNetV3Config) setting() ([]V3Block, int) {
	if c.Setting != nil {
		return c.Setting, c.LastChannel
	}
	r := 1
	if c.ReducedTail {
		r = 2
	}
	if c.Large {
		return []V3Block{
			{16, 3, 16, 16, false, false, 1},
			{16, 3, 64, 24, false, false, 2},
			{24, 3, 72, 24, false, false, 1},
			{24, 5, 72, 40, true, false, 2},
			{40, 5, 120, 40, true, false, 1},
			{40, 5, 120, 40, true, false, 1},
			{40, 3, 240, 80, false, true, 2},
			{80, 3, 200, 80, false, true, 1},
			{80, 3, 184, 80, false, true, 1},
			{80, 3, 184, 80, false, true, 1},
			{80, 3, 480, 112, true, true, 1},
			{112, 3, 672, 112, true, true, 1},
			{112, 5, 672, 160 / r, true, true, 2},
			{160 / r, 5, 960 / r, 160 / r, true, true, 1},
			{160 / r, 5, 960 / r, 160 / r, true, true, 1},
		}, 1280 / r
	}
	return []V3Block{
		{16, 3, 16, 16, true, false, 2},
		{16, 3, 72, 24, false, false, 2},
		{24, 3, 88, 24, false, false, 1},
		{24, 5, 96, 40, true, true, 2},
		{40, 5, 240, 40, true, true, 1},
		{40, 5, 240, 40, true, true, 1},
		{40, 5, 120, 48, true, true, 1},
		{48, 5, 144, 48, true, true, 1},
		{48, 5, 288, 96 / r, true, true, 2},
		{96 / r, 5, 576 / r, 96 / r, true, true, 1},
		{96 / r, 5, 576 / r, 96 / r, true, true, 1},
	}, 1024 / r
}

func (c MobileNetV3Config) build(b *builder, x *ir.Value, _ int) *ir.Value {
	const eps = 1e-3
	adj := func(ch int) int { return makeDivisible(float64(ch)*c.WidthMult, 8, 0) }
	setting, lastCh := c.setting()
	first := adj(setting[0].In)
	y := b.convBNAct("features.0", x, 3, first, 3, 2, 1, actHardSwish, eps)
	in := first
	for i, s := range setting {
		p := fmt.Sprintf("features.%d.block", i+1)
		exp, out := adj(s.Exp), adj(s.Out)
		a := actReLU
		if s.HS {
			a = actHardSwish
		}
		r := y
		k := 0
		if exp != in {
			r = b.convBNAct(fmt.Sprintf("%s.%d", p, k), r, in, exp, 1, 1, 1, a, eps)
			k++
		}
		r = b.convBNAct(fmt.Sprintf("%s.%d", p, k), r, exp, exp, s.K, s.Stride, exp, a, eps)
		k++
		if s.SE {
			r = b.squeezeExcite(fmt.Sprintf("%s.%d", p, k), r, exp, makeDivisible(float64(exp/4), 8, 0), actReLU, actHardSigmoid)
			k++
		}
		r = b.convBNAct(fmt.Sprintf("%s.%d", p, k), r, exp, out, 1, 1, 1, actNone, eps)
		if s.Stride == 1 && in == out {
			r = b.add(fmt.Sprintf("features.%d.add", i+1), y, r)
		}
		y, in = r, out
	}
	lastConv := 6 * in
	y = b.convBNAct(fmt.Sprintf("features.%d", len(setting)+1), y, in, lastConv, 1, 1, 1, actHardSwish, eps)
	y = b.poolFlatten("avgpool", y)
	last := adj(lastCh)
	y = b.linear("classifier.0", y, lastConv, last)
	y = b.activate("classifier.1", y, actHardSwish)
	return b.linear("classifier.3", y, last, c.Classes)
}
