package torchvision

import (
	"fmt"
	"regexp"

	"goinfer/internal/ir"
)

// DenseNetConfig is torchvision's DenseNet.
type DenseNetConfig struct {
	Arch     string
	Growth   int
	Blocks   []int
	InitFeat int
	BNSize   int // 4 in torchvision
	Classes  int
}

func init() {
	for _, d := range []DenseNetConfig{
		{Arch: "densenet121", Growth: 32, Blocks: []int{6, 12, 24, 16}, InitFeat: 64},
		{Arch: "densenet161", Growth: 48, Blocks: []int{6, 12, 36, 24}, InitFeat: 96},
		{Arch: "densenet169", Growth: 32, Blocks: []int{6, 12, 32, 32}, InitFeat: 64},
		{Arch: "densenet201", Growth: 32, Blocks: []int{6, 12, 48, 32}, InitFeat: 64},
	} {
		d := d
		register(d.Arch, "classifier.weight", func(classes int) Config {
			c := d
			c.BNSize, c.Classes = 4, classes
			return c
		})
	}
}

// Name implements Config.
func (c DenseNetConfig) Name() string {
	if c.Arch != "" {
		return c.Arch
	}
	return fmt.Sprintf("densenet-g%d%v-i%d-bn%d", c.Growth, c.Blocks, c.InitFeat, c.BNSize)
}

// legacyDenseKey matches the key names of torchvision's published DenseNet
// files ("denselayer1.norm.1.weight"), which its loader renames to the
// module names ("denselayer1.norm1.weight"); Build does the same.
var legacyDenseKey = regexp.MustCompile(`^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var|num_batches_tracked))$`)

func denseKey(k string) string {
	if m := legacyDenseKey.FindStringSubmatch(k); m != nil {
		return m[1] + m[2]
	}
	return k
}

func (c DenseNetConfig) build(b *builder, x *ir.Value, _ int) *ir.Value {
	const eps = 1e-5
	bn := c.BNSize
	if bn == 0 {
		bn = 4
	}
	y := b.conv("features.conv0", x, convArgs{in: 3, out: c.InitFeat, k: 7, stride: 2, pad: 3})
	y = b.relu("features.relu0", b.bn("features.norm0", y, c.InitFeat, eps))
	y = b.maxPool("features.pool0", y, 3, 2, 1, false)
	ch := c.InitFeat
	for bi, n := range c.Blocks {
		feats := []*ir.Value{y}
		for j := 0; j < n; j++ {
			p := fmt.Sprintf("features.denseblock%d.denselayer%d", bi+1, j+1)
			in := feats[0]
			if len(feats) > 1 {
				in = b.node(p+".cat", &ir.Concat{Axis: 1}, feats...)
			}
			cin := ch + j*c.Growth
			r := b.relu(p+".relu1", b.bn(p+".norm1", in, cin, eps))
			r = b.conv(p+".conv1", r, convArgs{in: cin, out: bn * c.Growth, k: 1})
			r = b.relu(p+".relu2", b.bn(p+".norm2", r, bn*c.Growth, eps))
			r = b.conv(p+".conv2", r, convArgs{in: bn * c.Growth, out: c.Growth, k: 3, pad: 1})
			feats = append(feats, r)
		}
		y = b.node(fmt.Sprintf("features.denseblock%d", bi+1), &ir.Concat{Axis: 1}, feats...)
		ch += n * c.Growth
		if bi != len(c.Blocks)-1 {
			p := fmt.Sprintf("features.transition%d", bi+1)
			y = b.relu(p+".relu", b.bn(p+".norm", y, ch, eps))
			y = b.conv(p+".conv", y, convArgs{in: ch, out: ch / 2, k: 1})
			y = b.avgPool(p+".pool", y, 2, 2, 0, false)
			ch /= 2
		}
	}
	y = b.relu("features.relu5", b.bn("features.norm5", y, ch, eps))
	y = b.poolFlatten("avgpool", y)
	return b.linear("classifier", y, ch, c.Classes)
}
