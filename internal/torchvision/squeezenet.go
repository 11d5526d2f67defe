package torchvision

import (
	"fmt"

	"goinfer/internal/ir"
)

// SqueezeNetConfig is torchvision's SqueezeNet, version "1_0" or "1_1".
type SqueezeNetConfig struct {
	Version string
	Classes int
}

func init() {
	for _, v := range []string{"1_0", "1_1"} {
		v := v
		register("squeezenet"+v, "classifier.1.weight", func(classes int) Config {
			return SqueezeNetConfig{Version: v, Classes: classes}
		})
	}
}

// Name implements Config.
func (c SqueezeNetConfig) Name() string { return "squeezenet" + c.Version }

// fire is SqueezeNet's Fire module: a 1x1 squeeze, then 1x1 and 3x3
// expands concatenated, each convolution with bias and ReLU.
func (b *builder) fire(prefix string, x *ir.Value, in, sq, e1, e3 int) *ir.Value {
	s := b.relu(prefix+".squeeze_activation", b.conv(prefix+".squeeze", x, convArgs{in: in, out: sq, k: 1, bias: true}))
	l := b.relu(prefix+".expand1x1_activation", b.conv(prefix+".expand1x1", s, convArgs{in: sq, out: e1, k: 1, bias: true}))
	r := b.relu(prefix+".expand3x3_activation", b.conv(prefix+".expand3x3", s, convArgs{in: sq, out: e3, k: 3, pad: 1, bias: true}))
	return b.node(prefix+".cat", &ir.Concat{Axis: 1}, l, r)
}

func (c SqueezeNetConfig) build(b *builder, x *ir.Value, _ int) *ir.Value {
	// Each layer of features: a Fire (in, squeeze, expand1x1, expand3x3)
	// or, with in 0, a ceil-mode 3x3/2 max pool.
	type layer struct{ in, sq, e1, e3 int }
	var y *ir.Value
	var layers []layer
	switch c.Version {
	case "1_0":
		y = b.conv("features.0", x, convArgs{in: 3, out: 96, k: 7, stride: 2, bias: true})
		layers = []layer{{}, {96, 16, 64, 64}, {128, 16, 64, 64}, {128, 32, 128, 128}, {}, {256, 32, 128, 128}, {256, 48, 192, 192}, {384, 48, 192, 192}, {384, 64, 256, 256}, {}, {512, 64, 256, 256}}
	case "1_1":
		y = b.conv("features.0", x, convArgs{in: 3, out: 64, k: 3, stride: 2, bias: true})
		layers = []layer{{}, {64, 16, 64, 64}, {128, 16, 64, 64}, {}, {128, 32, 128, 128}, {256, 32, 128, 128}, {}, {256, 48, 192, 192}, {384, 48, 192, 192}, {384, 64, 256, 256}, {512, 64, 256, 256}}
	default:
		panic(fmt.Sprintf("unknown SqueezeNet version %q (want 1_0 or 1_1)", c.Version))
	}
	y = b.relu("features.1", y)
	for i, l := range layers {
		name := fmt.Sprintf("features.%d", i+2)
		if l.in == 0 {
			y = b.maxPool(name, y, 3, 2, 0, true)
		} else {
			y = b.fire(name, y, l.in, l.sq, l.e1, l.e3)
		}
	}
	y = b.conv("classifier.1", y, convArgs{in: 512, out: c.Classes, k: 1, bias: true})
	y = b.relu("classifier.2", y)
	return b.poolFlatten("classifier.3", y)
}
