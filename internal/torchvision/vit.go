package torchvision

import (
	"fmt"
	"math"

	"goinfer/internal/ir"
)

// ViTConfig is torchvision's VisionTransformer.
type ViTConfig struct {
	Arch      string
	PatchSize int
	Layers    int
	Heads     int
	Hidden    int
	MLP       int
	Classes   int
}

func init() {
	for _, v := range []ViTConfig{
		{Arch: "vit_b_16", PatchSize: 16, Layers: 12, Heads: 12, Hidden: 768, MLP: 3072},
		{Arch: "vit_b_32", PatchSize: 32, Layers: 12, Heads: 12, Hidden: 768, MLP: 3072},
		{Arch: "vit_l_16", PatchSize: 16, Layers: 24, Heads: 16, Hidden: 1024, MLP: 4096},
		{Arch: "vit_l_32", PatchSize: 32, Layers: 24, Heads: 16, Hidden: 1024, MLP: 4096},
		{Arch: "vit_h_14", PatchSize: 14, Layers: 32, Heads: 16, Hidden: 1280, MLP: 5120},
	} {
		v := v
		register(v.Arch, "heads.head.weight", func(classes int) Config {
			c := v
			c.Classes = classes
			return c
		})
	}
}

// Name implements Config.
func (c ViTConfig) Name() string {
	if c.Arch != "" {
		return c.Arch
	}
	return fmt.Sprintf("vit-p%d-l%d-h%d-d%d-mlp%d", c.PatchSize, c.Layers, c.Heads, c.Hidden, c.MLP)
}

// nodeN appends a node with n outputs.
func (b *builder) nodeN(name string, op ir.Op, n int, in ...*ir.Value) []*ir.Value {
	name = b.name(name)
	nd := &ir.Node{Name: name, Op: op, Inputs: in}
	for i := 0; i < n; i++ {
		nd.Outputs = append(nd.Outputs, &ir.Value{Name: fmt.Sprintf("%s:%d", name, i), Producer: nd})
	}
	b.g.Nodes = append(b.g.Nodes, nd)
	return nd.Outputs
}

func (b *builder) layerNorm(prefix string, x *ir.Value, dim, axis int, eps float64) *ir.Value {
	w := b.param(prefix+".weight", dim)
	bias := b.param(prefix+".bias", dim)
	return b.nodeN(prefix, &ir.LayerNorm{Axis: axis, Epsilon: eps}, 1, x, w, bias)[0]
}

func (b *builder) reshape(name string, x *ir.Value, shape ...int) *ir.Value {
	return b.node(name, &ir.Reshape{}, x, b.ints(name+".shape", shape...))
}

func (b *builder) transpose(name string, x *ir.Value, perm ...int) *ir.Value {
	return b.node(name, &ir.Transpose{Perm: perm}, x)
}

func (c ViTConfig) build(b *builder, x *ir.Value, size int) *ir.Value {
	const eps = 1e-6
	d, p := c.Hidden, c.PatchSize
	if size%p != 0 {
		panic(fmt.Sprintf("image size %d is not a multiple of the patch size %d", size, p))
	}
	if d%c.Heads != 0 {
		panic(fmt.Sprintf("hidden size %d does not split into %d heads", d, c.Heads))
	}
	seq := (size/p)*(size/p) + 1
	y := b.conv("conv_proj", x, convArgs{in: 3, out: d, k: p, stride: p, bias: true})
	y = b.reshape("patches", y, 0, d, -1)
	y = b.transpose("patches.t", y, 0, 2, 1)
	// The class token, repeated over the batch: Expand to [N, 1, D] with
	// N read from the input's shape (folded once the batch is bound).
	cls := b.param("class_token", 1, 1, d)
	n := b.node("batch", &ir.Shape{Start: 0, End: intPtr(1)}, x)
	shape := b.node("class_token.shape", &ir.Concat{Axis: 0}, n, b.ints("class_token.dims", 1, d))
	cls = b.node("class_token.expand", &ir.Expand{}, cls, shape)
	y = b.node("tokens", &ir.Concat{Axis: 1}, cls, y)
	y = b.add("encoder.pos", y, b.param("encoder.pos_embedding", 1, seq, d))
	for i := 0; i < c.Layers; i++ {
		pre := fmt.Sprintf("encoder.layers.encoder_layer_%d", i)
		h := b.layerNorm(pre+".ln_1", y, d, 2, eps)
		h = b.attention(pre+".self_attention", h, d, c.Heads)
		y = b.add(pre+".add1", y, h)
		h = b.layerNorm(pre+".ln_2", y, d, 2, eps)
		h = b.linearND(pre+".mlp.0", h, d, c.MLP)
		h = b.activate(pre+".mlp.1", h, actGELU)
		h = b.linearND(pre+".mlp.3", h, c.MLP, d)
		y = b.add(pre+".add2", y, h)
	}
	y = b.layerNorm("encoder.ln", y, d, 2, eps)
	y = b.node("class_out", &ir.Gather{Axis: 1}, y, b.scalarInt("class_index", 0))
	return b.linear("heads.head", y, d, c.Classes)
}

func intPtr(v int) *int { return &v }

// attention is nn.MultiheadAttention(d, heads) on [N, S, D] with the
// input as query, key and value: the packed input projection, scaled dot
// products per head, softmax, and the output projection.
func (b *builder) attention(prefix string, x *ir.Value, d, heads int) *ir.Value {
	dh := d / heads
	w := b.param(prefix+".in_proj_weight", 3*d, d)
	bias := b.param(prefix+".in_proj_bias", 3*d)
	wt := b.transpose(prefix+".in_proj_weight_t", w, 1, 0)
	qkv := b.add(prefix+".in_proj", b.node(prefix+".in_proj.matmul", &ir.MatMul{}, x, wt), bias)
	parts := b.nodeN(prefix+".split", &ir.Split{Axis: 2, NumOutputs: 3}, 3, qkv)
	heads4 := func(name string, v *ir.Value, perm ...int) *ir.Value {
		return b.transpose(name+".t", b.reshape(name, v, 0, 0, heads, dh), perm...)
	}
	q := heads4(prefix+".q", parts[0], 0, 2, 1, 3)
	k := heads4(prefix+".k", parts[1], 0, 2, 3, 1)
	v := heads4(prefix+".v", parts[2], 0, 2, 1, 3)
	// PyTorch divides q by sqrt(head dim), which is exact for the usual
	// square head sizes; multiplying by a rounded reciprocal would not be.
	q = b.node(prefix+".q.scale", &ir.Binary{Fn: ir.OpDiv}, q, b.scalar(prefix+".sqrt_dh", float32(math.Sqrt(float64(dh)))))
	s := b.node(prefix+".scores", &ir.MatMul{}, q, k)
	s = b.node(prefix+".softmax", &ir.Softmax{Axis: 3}, s)
	o := b.node(prefix+".context", &ir.MatMul{}, s, v)
	o = b.reshape(prefix+".merge", b.transpose(prefix+".merge.t", o, 0, 2, 1, 3), 0, 0, d)
	return b.linearND(prefix+".out_proj", o, d, d)
}
