package torchvision

import (
	"fmt"
	"math"

	"goinfer/internal/ir"
)

// MaxViTConfig is torchvision's MaxVit.
type MaxViTConfig struct {
	Arch          string
	Stem          int
	Channels      []int
	Layers        []int
	HeadDim       int
	PartitionSize int
	Expansion     float64 // 4
	Squeeze       float64 // 0.25
	MLPRatio      int     // 4
	Classes       int
}

func init() {
	register("maxvit_t", "classifier.5.weight", func(classes int) Config {
		return MaxViTConfig{Arch: "maxvit_t", Stem: 64, Channels: []int{64, 128, 256, 512}, Layers: []int{2, 2, 5, 2},
			HeadDim: 32, PartitionSize: 7, Expansion: 4, Squeeze: 0.25, MLPRatio: 4, Classes: classes}
	})
}

// Name implements Config.
func (c MaxViTConfig) Name() string {
	if c.Arch != "" {
		return c.Arch
	}
	return fmt.Sprintf("maxvit-s%d%v%v-h%d-p%d", c.Stem, c.Channels, c.Layers, c.HeadDim, c.PartitionSize)
}

func (c MaxViTConfig) build(b *builder, x *ir.Value, size int) *ir.Value {
	const bnEps, lnEps = 1e-3, 1e-5
	y := b.convBNAct("stem.0", x, 3, c.Stem, 3, 2, 1, actGELU, bnEps)
	y = b.conv("stem.1.0", y, convArgs{in: c.Stem, out: c.Stem, k: 3, pad: 1, bias: true})
	grid := convOut(size, 3, 2, 1, 1, false)
	in := c.Stem
	for bi, out := range c.Channels {
		grid = convOut(grid, 3, 2, 1, 1, false)
		if grid%c.PartitionSize != 0 {
			panic(fmt.Sprintf("block %d's %dx%d grid does not split into %d-wide partitions", bi, grid, grid, c.PartitionSize))
		}
		for j := 0; j < c.Layers[bi]; j++ {
			p := fmt.Sprintf("blocks.%d.layers.%d.layers", bi, j)
			stride := 1
			if j == 0 {
				stride = 2
			}
			y = c.mbconv(b, p+".MBconv", y, in, out, stride, bnEps)
			in = out
			y = c.partitionAttention(b, p+".window_attention", y, out, grid, false, lnEps)
			y = c.partitionAttention(b, p+".grid_attention", y, out, grid, true, lnEps)
		}
	}
	y = b.poolFlatten("classifier.0", y)
	y = b.layerNorm("classifier.2", y, in, 1, lnEps)
	y = b.linear("classifier.3", y, in, in)
	y = b.node("classifier.4", &ir.Unary{Fn: ir.OpTanh}, y)
	w := b.param("classifier.5.weight", c.Classes, in)
	return b.node("classifier.5", &ir.Gemm{Alpha: 1, Beta: 1, TransB: true}, y, w)
}

// mbconv is MaxViT's MBConv: a pre-norm inverted bottleneck with
// squeeze-excitation, and a projection shortcut (average pool when
// strided) where the shape changes.
func (c MaxViTConfig) mbconv(b *builder, p string, x *ir.Value, in, out, stride int, eps float64) *ir.Value {
	mid, sqz := int(float64(out)*c.Expansion), int(float64(out)*c.Squeeze)
	short := x
	if stride != 1 || in != out {
		i := 0
		if stride == 2 {
			short = b.avgPool(p+".proj.0", short, 3, 2, 1, false)
			i = 1
		}
		short = b.conv(fmt.Sprintf("%s.proj.%d", p, i), short, convArgs{in: in, out: out, k: 1, bias: true})
	}
	y := b.bn(p+".layers.pre_norm", x, in, eps)
	y = b.convBNAct(p+".layers.conv_a", y, in, mid, 1, 1, 1, actGELU, eps)
	y = b.convBNAct(p+".layers.conv_b", y, mid, mid, 3, stride, mid, actGELU, eps)
	y = b.squeezeExcite(p+".layers.squeeze_excitation", y, mid, sqz, actSiLU, actSigmoid)
	y = b.conv(p+".layers.conv_c", y, convArgs{in: mid, out: out, k: 1, bias: true})
	return b.add(p+".add", short, y)
}

// partitionAttention is MaxViT's PartitionAttentionLayer on [N, C, G, G]:
// window partitioning (P x P blocks) or grid partitioning (a G/P x G/P
// grid, tokens strided across the image), pre-norm attention with a
// relative position bias and a pre-norm MLP, each residual, then back to
// [N, C, G, G].
func (c MaxViTConfig) partitionAttention(b *builder, p string, x *ir.Value, ch, grid int, gridMode bool, eps float64) *ir.Value {
	ps := c.PartitionSize
	pp := ps
	if gridMode {
		pp = grid / ps
	}
	g := grid / pp
	// [N, C, G, G] -> [N, g*g, pp*pp, C]
	y := b.reshape(p+".partition", x, 0, ch, g, pp, g, pp)
	y = b.transpose(p+".partition.t", y, 0, 2, 4, 3, 5, 1)
	y = b.reshape(p+".partition.flat", y, 0, g*g, pp*pp, ch)
	if gridMode {
		y = b.transpose(p+".partition.swap", y, 0, 2, 1, 3)
	}
	a := b.layerNorm(p+".attn_layer.0", y, ch, 3, eps)
	a = c.relAttention(b, p+".attn_layer.1", a, ch, ps*ps)
	y = b.add(p+".attn.add", y, a)
	m := b.layerNorm(p+".mlp_layer.0", y, ch, 3, eps)
	m = b.linearND(p+".mlp_layer.1", m, ch, ch*c.MLPRatio)
	m = b.activate(p+".mlp_layer.2", m, actGELU)
	m = b.linearND(p+".mlp_layer.3", m, ch*c.MLPRatio, ch)
	y = b.add(p+".mlp.add", y, m)
	if gridMode {
		y = b.transpose(p+".departition.swap", y, 0, 2, 1, 3)
	}
	y = b.reshape(p+".departition", y, 0, g, g, pp, pp, ch)
	y = b.transpose(p+".departition.t", y, 0, 5, 1, 3, 2, 4)
	return b.reshape(p+".departition.image", y, 0, ch, grid, grid)
}

// relAttention is MaxViT's RelativePositionalMultiHeadAttention on
// [N, G, L, C] with L = seq tokens per partition.
func (c MaxViTConfig) relAttention(b *builder, p string, x *ir.Value, ch, seq int) *ir.Value {
	if ch%c.HeadDim != 0 {
		panic(fmt.Sprintf("%d channels do not split into heads of %d", ch, c.HeadDim))
	}
	heads, dh := ch/c.HeadDim, c.HeadDim
	side := int(math.Round(math.Sqrt(float64(seq))))
	qkv := b.linearND(p+".to_qkv", x, ch, 3*ch)
	parts := b.nodeN(p+".chunk", &ir.Split{Axis: 3, NumOutputs: 3}, 3, qkv)
	split := func(name string, v *ir.Value, perm ...int) *ir.Value {
		return b.transpose(name+".t", b.reshape(name, v, 0, 0, seq, heads, dh), perm...)
	}
	q := split(p+".q", parts[0], 0, 1, 3, 2, 4)
	k := split(p+".k", parts[1], 0, 1, 3, 4, 2)
	v := split(p+".v", parts[2], 0, 1, 3, 2, 4)
	// torchvision scales the keys by the feature size, not the head size.
	k = b.node(p+".k.scale", &ir.Binary{Fn: ir.OpMul}, k, b.scalar(p+".scale", float32(math.Pow(float64(ch), -0.5))))
	s := b.node(p+".scores", &ir.MatMul{}, q, k)
	table := b.param(p+".relative_position_bias_table", (2*side-1)*(2*side-1), heads)
	index := relativePositionIndex(side)
	b.intBuffer(p+".relative_position_index", index, seq, seq)
	bias := b.node(p+".bias.gather", &ir.Gather{Axis: 0}, table, b.constI64(p+".bias.index", index))
	bias = b.reshape(p+".bias.nnh", bias, seq, seq, heads)
	bias = b.transpose(p+".bias", bias, 2, 0, 1)
	s = b.add(p+".scores.bias", s, bias)
	s = b.node(p+".softmax", &ir.Softmax{Axis: 4}, s)
	o := b.node(p+".context", &ir.MatMul{}, s, v)
	o = b.transpose(p+".merge.t", o, 0, 1, 3, 2, 4)
	o = b.reshape(p+".merge.flat", o, 0, 0, seq, ch)
	return b.linearND(p+".merge", o, ch, ch)
}
