package torchvision

import (
	"fmt"

	"goinfer/internal/ir"
)

// ResNetConfig is torchvision's ResNet (also ResNeXt and Wide ResNet):
// blocks per stage, bottleneck or basic blocks, and the bottleneck's
// groups and width per group.
type ResNetConfig struct {
	Arch       string // torchvision's name; empty for custom layouts
	Bottleneck bool
	Layers     []int
	Groups     int // 1 for a plain ResNet
	// WidthPerGroup is torchvision's width_per_group (64 for a plain
	// ResNet, 128 for Wide ResNets).
	WidthPerGroup int
	// Base is the stem's width, 64 in torchvision; smaller for narrow test
	// models.
	Base    int
	Classes int
}

func init() {
	for _, r := range []struct {
		name   string
		bottle bool
		layers []int
		g, w   int
	}{
		{"resnet18", false, []int{2, 2, 2, 2}, 1, 64},
		{"resnet34", false, []int{3, 4, 6, 3}, 1, 64},
		{"resnet50", true, []int{3, 4, 6, 3}, 1, 64},
		{"resnet101", true, []int{3, 4, 23, 3}, 1, 64},
		{"resnet152", true, []int{3, 8, 36, 3}, 1, 64},
		{"resnext50_32x4d", true, []int{3, 4, 6, 3}, 32, 4},
		{"resnext101_32x8d", true, []int{3, 4, 23, 3}, 32, 8},
		{"resnext101_64x4d", true, []int{3, 4, 23, 3}, 64, 4},
		{"wide_resnet50_2", true, []int{3, 4, 6, 3}, 1, 128},
		{"wide_resnet101_2", true, []int{3, 4, 23, 3}, 1, 128},
	} {
		r := r
		register(r.name, "fc.weight", func(classes int) Config {
			return ResNetConfig{Arch: r.name, Bottleneck: r.bottle, Layers: r.layers, Groups: r.g, WidthPerGroup: r.w, Base: 64, Classes: classes}
		})
	}
}

// Name implements Config.
func (c ResNetConfig) Name() string {
	if c.Arch != "" {
		return c.Arch
	}
	kind := "basic"
	if c.Bottleneck {
		kind = "bottleneck"
	}
	return fmt.Sprintf("resnet-%s%v-g%d-w%d-base%d", kind, c.Layers, c.Groups, c.WidthPerGroup, c.Base)
}

func (c ResNetConfig) build(b *builder, x *ir.Value, _ int) *ir.Value {
	base, groups, wpg := c.Base, c.Groups, c.WidthPerGroup
	if base == 0 {
		base = 64
	}
	if groups == 0 {
		groups = 1
	}
	if wpg == 0 {
		wpg = 64
	}
	const eps = 1e-5
	y := b.conv("conv1", x, convArgs{in: 3, out: base, k: 7, stride: 2, pad: 3})
	y = b.bn("bn1", y, base, eps)
	y = b.relu("relu", y)
	y = b.maxPool("maxpool", y, 3, 2, 1, false)
	in := base
	for si, n := range c.Layers {
		planes := base << si
		for j := 0; j < n; j++ {
			stride := 1
			if j == 0 && si > 0 {
				stride = 2
			}
			p := fmt.Sprintf("layer%d.%d", si+1, j)
			var out int
			var r *ir.Value
			if c.Bottleneck {
				width := planes * wpg / 64 * groups
				out = planes * 4
				r = b.conv(p+".conv1", y, convArgs{in: in, out: width, k: 1})
				r = b.relu(p+".relu1", b.bn(p+".bn1", r, width, eps))
				r = b.conv(p+".conv2", r, convArgs{in: width, out: width, k: 3, stride: stride, pad: 1, groups: groups})
				r = b.relu(p+".relu2", b.bn(p+".bn2", r, width, eps))
				r = b.conv(p+".conv3", r, convArgs{in: width, out: out, k: 1})
				r = b.bn(p+".bn3", r, out, eps)
			} else {
				out = planes
				r = b.conv(p+".conv1", y, convArgs{in: in, out: out, k: 3, stride: stride, pad: 1})
				r = b.relu(p+".relu1", b.bn(p+".bn1", r, out, eps))
				r = b.conv(p+".conv2", r, convArgs{in: out, out: out, k: 3, pad: 1})
				r = b.bn(p+".bn2", r, out, eps)
			}
			short := y
			if stride != 1 || in != out {
				short = b.conv(p+".downsample.0", y, convArgs{in: in, out: out, k: 1, stride: stride})
				short = b.bn(p+".downsample.1", short, out, eps)
			}
			y = b.relu(p+".relu", b.add(p+".add", r, short))
			in = out
		}
	}
	y = b.poolFlatten("avgpool", y)
	return b.linear("fc", y, in, c.Classes)
}
