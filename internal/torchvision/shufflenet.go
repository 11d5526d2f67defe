package torchvision

import (
	"fmt"

	"goinfer/internal/ir"
)

// ShuffleNetV2Config is torchvision's ShuffleNetV2.
type ShuffleNetV2Config struct {
	Arch    string
	Repeats []int // blocks of stages 2, 3, 4
	// Channels are the widths of conv1, the three stages and conv5.
	Channels []int
	Classes  int
}

func init() {
	for name, ch := range map[string][]int{
		"shufflenet_v2_x0_5": {24, 48, 96, 192, 1024},
		"shufflenet_v2_x1_0": {24, 116, 232, 464, 1024},
		"shufflenet_v2_x1_5": {24, 176, 352, 704, 1024},
		"shufflenet_v2_x2_0": {24, 244, 488, 976, 2048},
	} {
		name, ch := name, ch
		register(name, "fc.weight", func(classes int) Config {
			return ShuffleNetV2Config{Arch: name, Repeats: []int{4, 8, 4}, Channels: ch, Classes: classes}
		})
	}
}

// Name implements Config.
func (c ShuffleNetV2Config) Name() string {
	if c.Arch != "" {
		return c.Arch
	}
	return fmt.Sprintf("shufflenet_v2%v%v", c.Repeats, c.Channels)
}

// convBN is a convolution and its BatchNorm as modules i and i+1 of a
// torchvision Sequential.
func (b *builder) convBN(prefix string, i int, x *ir.Value, c convArgs) *ir.Value {
	y := b.conv(fmt.Sprintf("%s.%d", prefix, i), x, c)
	return b.bn(fmt.Sprintf("%s.%d", prefix, i+1), y, c.out, 1e-5)
}

func (c ShuffleNetV2Config) build(b *builder, x *ir.Value, _ int) *ir.Value {
	ch := c.Channels
	y := b.relu("conv1.2", b.convBN("conv1", 0, x, convArgs{in: 3, out: ch[0], k: 3, stride: 2, pad: 1}))
	y = b.maxPool("maxpool", y, 3, 2, 1, false)
	in := ch[0]
	for si, n := range c.Repeats {
		out := ch[si+1]
		bf := out / 2
		for j := 0; j < n; j++ {
			p := fmt.Sprintf("stage%d.%d", si+2, j)
			var left, right *ir.Value
			if j == 0 {
				l := b.convBN(p+".branch1", 0, y, convArgs{in: in, out: in, k: 3, stride: 2, pad: 1, groups: in})
				l = b.convBN(p+".branch1", 2, l, convArgs{in: in, out: bf, k: 1})
				left = b.relu(p+".branch1.4", l)
				right = y
			} else {
				halves := b.nodeN(p+".chunk", &ir.Split{Axis: 1, NumOutputs: 2}, 2, y)
				left, right = halves[0], halves[1]
			}
			stride, rin := 1, bf
			if j == 0 {
				stride, rin = 2, in
			}
			r := b.relu(p+".branch2.2", b.convBN(p+".branch2", 0, right, convArgs{in: rin, out: bf, k: 1}))
			r = b.convBN(p+".branch2", 3, r, convArgs{in: bf, out: bf, k: 3, stride: stride, pad: 1, groups: bf})
			r = b.relu(p+".branch2.7", b.convBN(p+".branch2", 5, r, convArgs{in: bf, out: bf, k: 1}))
			cat := b.node(p+".cat", &ir.Concat{Axis: 1}, left, r)
			y = b.channelShuffle(p+".shuffle", cat, 2*bf, 2)
			in = 2 * bf
		}
	}
	y = b.relu("conv5.2", b.convBN("conv5", 0, y, convArgs{in: in, out: ch[len(ch)-1], k: 1}))
	y = b.poolFlatten("mean", y)
	return b.linear("fc", y, ch[len(ch)-1], c.Classes)
}

// channelShuffle interleaves the channel groups of x: [N, g, C/g, HW]
// transposed to [N, C/g, g, HW], reshaped back to x's shape.
func (b *builder) channelShuffle(name string, x *ir.Value, c, groups int) *ir.Value {
	y := b.reshape(name+".split", x, 0, groups, c/groups, -1)
	y = b.transpose(name+".t", y, 0, 2, 1, 3)
	shape := b.node(name+".shape", &ir.Shape{}, x)
	return b.node(name, &ir.Reshape{}, y, shape)
}
