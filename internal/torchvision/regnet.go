package torchvision

import (
	"fmt"
	"math"

	"goinfer/internal/ir"
)

// RegNetConfig is torchvision's RegNet, described as its
// BlockParams.from_init_params takes it: the linear width parameters
// (W0, WA, WM) quantised into stages.
type RegNetConfig struct {
	Arch       string
	Depth      int
	W0         int
	WA, WM     float64
	GroupWidth int
	SERatio    float64 // 0: no squeeze-excitation (RegNetX)
	StemWidth  int     // 32 in torchvision
	Classes    int
}

func init() {
	for _, r := range []RegNetConfig{
		{Arch: "regnet_y_400mf", Depth: 16, W0: 48, WA: 27.89, WM: 2.09, GroupWidth: 8, SERatio: 0.25},
		{Arch: "regnet_y_800mf", Depth: 14, W0: 56, WA: 38.84, WM: 2.4, GroupWidth: 16, SERatio: 0.25},
		{Arch: "regnet_y_1_6gf", Depth: 27, W0: 48, WA: 20.71, WM: 2.65, GroupWidth: 24, SERatio: 0.25},
		{Arch: "regnet_y_3_2gf", Depth: 21, W0: 80, WA: 42.63, WM: 2.66, GroupWidth: 24, SERatio: 0.25},
		{Arch: "regnet_y_8gf", Depth: 17, W0: 192, WA: 76.82, WM: 2.19, GroupWidth: 56, SERatio: 0.25},
		{Arch: "regnet_y_16gf", Depth: 18, W0: 200, WA: 106.23, WM: 2.48, GroupWidth: 112, SERatio: 0.25},
		{Arch: "regnet_y_32gf", Depth: 20, W0: 232, WA: 115.89, WM: 2.53, GroupWidth: 232, SERatio: 0.25},
		{Arch: "regnet_y_128gf", Depth: 27, W0: 456, WA: 160.83, WM: 2.52, GroupWidth: 264, SERatio: 0.25},
		{Arch: "regnet_x_400mf", Depth: 22, W0: 24, WA: 24.48, WM: 2.54, GroupWidth: 16},
		{Arch: "regnet_x_800mf", Depth: 16, W0: 56, WA: 35.73, WM: 2.28, GroupWidth: 16},
		{Arch: "regnet_x_1_6gf", Depth: 18, W0: 80, WA: 34.01, WM: 2.25, GroupWidth: 24},
		{Arch: "regnet_x_3_2gf", Depth: 25, W0: 88, WA: 26.31, WM: 2.25, GroupWidth: 48},
		{Arch: "regnet_x_8gf", Depth: 23, W0: 80, WA: 49.56, WM: 2.88, GroupWidth: 120},
		{Arch: "regnet_x_16gf", Depth: 22, W0: 216, WA: 55.59, WM: 2.1, GroupWidth: 128},
		{Arch: "regnet_x_32gf", Depth: 23, W0: 320, WA: 69.86, WM: 2.0, GroupWidth: 168},
	} {
		r := r
		register(r.Arch, "fc.weight", func(classes int) Config {
			c := r
			c.StemWidth, c.Classes = 32, classes
			return c
		})
	}
}

// Name implements Config.
func (c RegNetConfig) Name() string {
	if c.Arch != "" {
		return c.Arch
	}
	return fmt.Sprintf("regnet-d%d-w%d-a%g-m%g-g%d-se%g", c.Depth, c.W0, c.WA, c.WM, c.GroupWidth, c.SERatio)
}

// regStage is one stage: its output width, block count and group width.
type regStage struct{ width, depth, groupWidth int }

// stages quantises the linear width ramp into stages as torchvision's
// BlockParams.from_init_params does, in float32 like its tensors, so that
// the rounding lands where torchvision's does.
func (c RegNetConfig) stages() []regStage {
	if c.WA < 0 || c.W0 <= 0 || c.WM <= 1 || c.W0%8 != 0 || c.Depth < 1 {
		panic(fmt.Sprintf("invalid RegNet settings (w_0 %d, w_a %g, w_m %g, depth %d)", c.W0, c.WA, c.WM, c.Depth))
	}
	w0 := float32(c.W0)
	logWM := float32(math.Log(c.WM))
	widths := make([]int, c.Depth)
	for i := range widths {
		cont := float32(i)*float32(c.WA) + w0
		capacity := float32(math.RoundToEven(float64(float32(math.Log(float64(cont/w0))) / logWM)))
		w := float32(float64(w0) * math.Pow(float64(float32(c.WM)), float64(capacity)))
		widths[i] = int(math.RoundToEven(float64(w/8))) * 8
	}
	var st []regStage
	for i, w := range widths {
		if i == 0 || w != widths[i-1] {
			st = append(st, regStage{width: w})
		}
		st[len(st)-1].depth++
	}
	for i := range st {
		g := min(c.GroupWidth, st[i].width)
		st[i].width = makeDivisible(float64(st[i].width), g, 0)
		st[i].groupWidth = g
	}
	return st
}

func (c RegNetConfig) build(b *builder, x *ir.Value, _ int) *ir.Value {
	const eps = 1e-5
	stem := c.StemWidth
	if stem == 0 {
		stem = 32
	}
	y := b.convBNAct("stem", x, 3, stem, 3, 2, 1, actReLU, eps)
	in := stem
	for si, s := range c.stages() {
		for j := 0; j < s.depth; j++ {
			stride := 1
			if j == 0 {
				stride = 2
			}
			p := fmt.Sprintf("trunk_output.block%d.block%d-%d", si+1, si+1, j)
			out := s.width
			r := b.convBNAct(p+".f.a", y, in, out, 1, 1, 1, actReLU, eps)
			r = b.convBNAct(p+".f.b", r, out, out, 3, stride, out/s.groupWidth, actReLU, eps)
			if c.SERatio > 0 {
				r = b.squeezeExcite(p+".f.se", r, out, int(math.RoundToEven(c.SERatio*float64(in))), actReLU, actSigmoid)
			}
			r = b.convBNAct(p+".f.c", r, out, out, 1, 1, 1, actNone, eps)
			short := y
			if in != out || stride != 1 {
				short = b.convBNAct(p+".proj", y, in, out, 1, stride, 1, actNone, eps)
			}
			y = b.relu(p+".activation", b.add(p+".add", short, r))
			in = out
		}
	}
	y = b.poolFlatten("avgpool", y)
	return b.linear("fc", y, in, c.Classes)
}
