package torchvision

import (
	"fmt"

	"goinfer/internal/ir"
)

// ConvNeXtStage is torchvision's CNBlockConfig: a stage's width, the width
// of the downsampling that follows it (0 for the last stage) and its
// block count.
type ConvNeXtStage struct {
	In, Out, Layers int
}

// ConvNeXtConfig is torchvision's ConvNeXt.
type ConvNeXtConfig struct {
	Arch    string
	Stages  []ConvNeXtStage
	Classes int
}

func init() {
	for name, s := range map[string][]ConvNeXtStage{
		"convnext_tiny":  {{96, 192, 3}, {192, 384, 3}, {384, 768, 9}, {768, 0, 3}},
		"convnext_small": {{96, 192, 3}, {192, 384, 3}, {384, 768, 27}, {768, 0, 3}},
		"convnext_base":  {{128, 256, 3}, {256, 512, 3}, {512, 1024, 27}, {1024, 0, 3}},
		"convnext_large": {{192, 384, 3}, {384, 768, 3}, {768, 1536, 27}, {1536, 0, 3}},
	} {
		name, s := name, s
		register(name, "classifier.2.weight", func(classes int) Config {
			return ConvNeXtConfig{Arch: name, Stages: s, Classes: classes}
		})
	}
}

// Name implements Config.
func (c ConvNeXtConfig) Name() string {
	if c.Arch != "" {
		return c.Arch
	}
	return fmt.Sprintf("convnext%v", c.Stages)
}

// layerNorm2d is torchvision's LayerNorm2d: LayerNorm over the channels
// of an NCHW tensor, done channels-last.
func (b *builder) layerNorm2d(prefix string, x *ir.Value, c int, eps float64) *ir.Value {
	y := b.transpose(prefix+".nhwc", x, 0, 2, 3, 1)
	y = b.layerNorm(prefix, y, c, 3, eps)
	return b.transpose(prefix+".nchw", y, 0, 3, 1, 2)
}

func (c ConvNeXtConfig) build(b *builder, x *ir.Value, _ int) *ir.Value {
	const eps = 1e-6
	first := c.Stages[0].In
	y := b.conv("features.0.0", x, convArgs{in: 3, out: first, k: 4, stride: 4, bias: true})
	y = b.layerNorm2d("features.0.1", y, first, eps)
	f := 1
	last := first
	for _, s := range c.Stages {
		d := s.In
		for j := 0; j < s.Layers; j++ {
			p := fmt.Sprintf("features.%d.%d", f, j)
			r := b.conv(p+".block.0", y, convArgs{in: d, out: d, k: 7, pad: 3, groups: d, bias: true})
			r = b.transpose(p+".block.1", r, 0, 2, 3, 1)
			r = b.layerNorm(p+".block.2", r, d, 3, eps)
			r = b.linearND(p+".block.3", r, d, 4*d)
			r = b.activate(p+".block.4", r, actGELU)
			r = b.linearND(p+".block.5", r, 4*d, d)
			r = b.transpose(p+".block.6", r, 0, 3, 1, 2)
			r = b.node(p+".layer_scale", &ir.Binary{Fn: ir.OpMul}, b.param(p+".layer_scale", d, 1, 1), r)
			y = b.add(p+".add", r, y)
		}
		f++
		last = d
		if s.Out > 0 {
			y = b.layerNorm2d(fmt.Sprintf("features.%d.0", f), y, d, eps)
			y = b.conv(fmt.Sprintf("features.%d.1", f), y, convArgs{in: d, out: s.Out, k: 2, stride: 2, bias: true})
			f++
		}
	}
	y = b.node("avgpool", &ir.GlobalPool{}, y)
	y = b.layerNorm2d("classifier.0", y, last, eps)
	y = b.node("classifier.1", &ir.Flatten{Axis: 1}, y)
	return b.linear("classifier.2", y, last, c.Classes)
}
