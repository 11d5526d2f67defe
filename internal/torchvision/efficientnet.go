package torchvision

import (
	"fmt"
	"math"

	"goinfer/internal/ir"
)

// MBConv is a stage of torchvision's EfficientNet: MBConvConfig or, with
// Fused, FusedMBConvConfig (EfficientNetV2's early stages). Channels and
// layers are before the width and depth multipliers.
type MBConv struct {
	Fused          bool
	Expand         float64
	Kernel, Stride int
	In, Out        int
	Layers         int
}

// EfficientNetConfig is torchvision's EfficientNet (B0-B7 and V2).
type EfficientNetConfig struct {
	Arch                 string
	Stages               []MBConv
	WidthMult, DepthMult float64
	// LastChannel is the final 1x1 convolution's width; 0 means four
	// times the last stage's output (B0-B7).
	LastChannel int
	// Eps is the BatchNorm epsilon (1e-5 for B0-B4, 1e-3 for B5-B7 and V2).
	Eps     float64
	Classes int
}

var effB = []MBConv{
	{false, 1, 3, 1, 32, 16, 1},
	{false, 6, 3, 2, 16, 24, 2},
	{false, 6, 5, 2, 24, 40, 2},
	{false, 6, 3, 2, 40, 80, 3},
	{false, 6, 5, 1, 80, 112, 3},
	{false, 6, 5, 2, 112, 192, 4},
	{false, 6, 3, 1, 192, 320, 1},
}

var effV2 = map[string][]MBConv{
	"efficientnet_v2_s": {
		{true, 1, 3, 1, 24, 24, 2}, {true, 4, 3, 2, 24, 48, 4}, {true, 4, 3, 2, 48, 64, 4},
		{false, 4, 3, 2, 64, 128, 6}, {false, 6, 3, 1, 128, 160, 9}, {false, 6, 3, 2, 160, 256, 15},
	},
	"efficientnet_v2_m": {
		{true, 1, 3, 1, 24, 24, 3}, {true, 4, 3, 2, 24, 48, 5}, {true, 4, 3, 2, 48, 80, 5},
		{false, 4, 3, 2, 80, 160, 7}, {false, 6, 3, 1, 160, 176, 14}, {false, 6, 3, 2, 176, 304, 18},
		{false, 6, 3, 1, 304, 512, 5},
	},
	"efficientnet_v2_l": {
		{true, 1, 3, 1, 32, 32, 4}, {true, 4, 3, 2, 32, 64, 7}, {true, 4, 3, 2, 64, 96, 7},
		{false, 4, 3, 2, 96, 192, 10}, {false, 6, 3, 1, 192, 224, 19}, {false, 6, 3, 2, 224, 384, 25},
		{false, 6, 3, 1, 384, 640, 7},
	},
}

func init() {
	for i, m := range [][2]float64{{1, 1}, {1, 1.1}, {1.1, 1.2}, {1.2, 1.4}, {1.4, 1.8}, {1.6, 2.2}, {1.8, 2.6}, {2, 3.1}} {
		name := fmt.Sprintf("efficientnet_b%d", i)
		eps := 1e-5
		if i >= 5 {
			eps = 1e-3
		}
		m := m
		register(name, "classifier.1.weight", func(classes int) Config {
			return EfficientNetConfig{Arch: name, Stages: effB, WidthMult: m[0], DepthMult: m[1], Eps: eps, Classes: classes}
		})
	}
	for name, st := range effV2 {
		name, st := name, st
		register(name, "classifier.1.weight", func(classes int) Config {
			return EfficientNetConfig{Arch: name, Stages: st, WidthMult: 1, DepthMult: 1, LastChannel: 1280, Eps: 1e-3, Classes: classes}
		})
	}
}

// Name implements Config.
func (c EfficientNetConfig) Name() string {
	if c.Arch != "" {
		return c.Arch
	}
	return fmt.Sprintf("efficientnet-w%g-d%g", c.WidthMult, c.DepthMult)
}

func (c EfficientNetConfig) build(b *builder, x *ir.Value, _ int) *ir.Value {
	wm, dm, eps := c.WidthMult, c.DepthMult, c.Eps
	if wm == 0 {
		wm = 1
	}
	if dm == 0 {
		dm = 1
	}
	if eps == 0 {
		eps = 1e-5
	}
	adj := func(ch int, m float64) int { return makeDivisible(float64(ch)*m, 8, 0) }
	// FusedMBConvConfig takes its channels as they are; MBConvConfig
	// applies the multipliers.
	chans := func(s MBConv, ch int) int {
		if s.Fused {
			return ch
		}
		return adj(ch, wm)
	}
	layers := func(s MBConv) int {
		if s.Fused {
			return s.Layers
		}
		return int(math.Ceil(float64(s.Layers) * dm))
	}
	first := chans(c.Stages[0], c.Stages[0].In)
	y := b.convBNAct("features.0", x, 3, first, 3, 2, 1, actSiLU, eps)
	in := first
	for si, s := range c.Stages {
		out := chans(s, s.Out)
		for j := 0; j < layers(s); j++ {
			stride := s.Stride
			if j > 0 {
				stride = 1
			}
			p := fmt.Sprintf("features.%d.%d.block", si+1, j)
			exp := makeDivisible(float64(in)*s.Expand, 8, 0)
			r := y
			if s.Fused {
				if exp != in {
					r = b.convBNAct(p+".0", r, in, exp, s.Kernel, stride, 1, actSiLU, eps)
					r = b.convBNAct(p+".1", r, exp, out, 1, 1, 1, actNone, eps)
				} else {
					r = b.convBNAct(p+".0", r, in, out, s.Kernel, stride, 1, actSiLU, eps)
				}
			} else {
				k := 0
				if exp != in {
					r = b.convBNAct(fmt.Sprintf("%s.%d", p, k), r, in, exp, 1, 1, 1, actSiLU, eps)
					k++
				}
				r = b.convBNAct(fmt.Sprintf("%s.%d", p, k), r, exp, exp, s.Kernel, stride, exp, actSiLU, eps)
				r = b.squeezeExcite(fmt.Sprintf("%s.%d", p, k+1), r, exp, max(1, in/4), actSiLU, actSigmoid)
				r = b.convBNAct(fmt.Sprintf("%s.%d", p, k+2), r, exp, out, 1, 1, 1, actNone, eps)
			}
			if stride == 1 && in == out {
				r = b.add(fmt.Sprintf("features.%d.%d.add", si+1, j), r, y)
			}
			y, in = r, out
		}
	}
	last := c.LastChannel
	if last == 0 {
		last = 4 * in
	}
	y = b.convBNAct(fmt.Sprintf("features.%d", len(c.Stages)+1), y, in, last, 1, 1, 1, actSiLU, eps)
	y = b.poolFlatten("avgpool", y)
	return b.linear("classifier.1", y, last, c.Classes)
}
