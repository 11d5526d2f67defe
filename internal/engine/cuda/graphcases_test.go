package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
	"goinfer/internal/torchvision"
)

// gb builds small test graphs with a dynamic batch.
type gb struct {
	g *ir.Graph
	r *rand.Rand
	k int
}

func newGB(name string, shape ...int) (*gb, *ir.Value) {
	b := &gb{g: &ir.Graph{Name: name}, r: rand.New(rand.NewPCG(7, uint64(len(name))))}
	x := &ir.Value{Name: "input", Type: ir.Type{DType: tensor.Float32, Shape: append(tensor.Shape{ir.Dynamic}, shape...)}}
	b.g.Inputs = []*ir.Value{x}
	return b, x
}

func (b *gb) nodeN(op ir.Op, nout int, ins ...*ir.Value) []*ir.Value {
	b.k++
	n := &ir.Node{Name: fmt.Sprintf("%s_%d", op.Kind(), b.k), Op: op, Inputs: ins}
	for i := 0; i < nout; i++ {
		n.Outputs = append(n.Outputs, &ir.Value{Name: fmt.Sprintf("v%d_%d", b.k, i), Producer: n})
	}
	b.g.Nodes = append(b.g.Nodes, n)
	return n.Outputs
}

func (b *gb) node(op ir.Op, ins ...*ir.Value) *ir.Value { return b.nodeN(op, 1, ins...)[0] }

// w is a random float32 constant of the given shape, scaled by s.
func (b *gb) w(s float64, shape ...int) *ir.Value {
	t := tensor.New(tensor.Float32, shape...)
	f := t.Float32s()
	for i := range f {
		f[i] = float32(b.r.NormFloat64() * s)
	}
	b.k++
	return &ir.Value{Name: fmt.Sprintf("c%d", b.k), Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape(shape)}, Const: t}
}

// pos is a random positive constant (variances).
func (b *gb) pos(shape ...int) *ir.Value {
	v := b.w(1, shape...)
	f := v.Const.Float32s()
	for i := range f {
		f[i] = 0.5 + f[i]*f[i]
	}
	return v
}

func (b *gb) ints(v ...int64) *ir.Value {
	t := tensor.New(tensor.Int64, len(v))
	for i, x := range v {
		putInt64(t.Data[8*i:], x)
	}
	b.k++
	return &ir.Value{Name: fmt.Sprintf("i%d", b.k), Type: ir.Type{DType: tensor.Int64, Shape: tensor.Shape{len(v)}}, Const: t}
}

func (b *gb) scalarInt(v int64) *ir.Value {
	t := tensor.New(tensor.Int64)
	putInt64(t.Data, v)
	b.k++
	return &ir.Value{Name: fmt.Sprintf("i%d", b.k), Type: ir.Type{DType: tensor.Int64, Shape: tensor.Shape{}}, Const: t}
}

func putInt64(b []byte, v int64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(uint64(v) >> (8 * i))
	}
}

func (b *gb) out(v ...*ir.Value) *ir.Graph {
	b.g.Outputs = v
	return b.g
}

func (b *gb) conv(x *ir.Value, cin, cout, k, stride, pad, groups, dil int, bias bool) *ir.Value {
	ins := []*ir.Value{x, b.w(1/float64(k*k*cin/groups), cout, cin/groups, k, k)}
	if bias {
		ins = append(ins, b.w(0.1, cout))
	}
	return b.node(&ir.Conv{Kernel: []int{k, k}, Strides: []int{stride, stride}, Pads: []int{pad, pad, pad, pad},
		Dilations: []int{dil, dil}, Group: groups}, ins...)
}

func (b *gb) bn(x *ir.Value, c int) *ir.Value {
	return b.node(&ir.BatchNorm{Epsilon: 1e-5}, x, b.w(1, c), b.w(0.1, c), b.w(0.1, c), b.pos(c))
}

// opCase is a small graph exercising some ops, with its input shape.
type opCase struct {
	name string
	g    *ir.Graph
}

// opCases are the per-op graphs the planner and the GPU are checked on.
func opCases() []opCase {
	var cs []opCase
	add := func(g *ir.Graph) { cs = append(cs, opCase{g.Name, g}) }
	{
		b, x := newGB("conv_bias_relu", 3, 12, 12)
		y := b.node(&ir.Unary{Fn: ir.OpRelu}, b.conv(x, 3, 8, 3, 1, 1, 1, 1, true))
		add(b.out(y))
	}
	{
		// Patch embedding (kernel = stride): a copy into patches and a
		// product; 14 is no multiple of 4, the last rows are unused.
		b, x := newGB("patch_conv", 3, 14, 14)
		y := b.node(&ir.Gelu{}, b.conv(x, 3, 8, 4, 4, 0, 1, 1, true))
		add(b.out(y))
	}
	{
		b, x := newGB("depthwise_hardswish", 8, 11, 11)
		y := b.node(&ir.Unary{Fn: ir.OpHardSwish}, b.conv(x, 8, 8, 3, 2, 1, 8, 1, true))
		add(b.out(y))
	}
	{
		// The tiled depthwise kernels (16-bit): 5x5 stride 2 and 7x7
		// stride 1 at widths that leave a partial tile, SiLU, and a
		// residual; 3x3 stride 1 with ReLU6.
		b, x := newGB("depthwise_tiles", 16, 13, 11)
		d := b.conv(x, 16, 16, 5, 2, 2, 16, 1, true)
		d = b.node(&ir.Binary{Fn: ir.OpMul}, d, b.node(&ir.Unary{Fn: ir.OpSigmoid}, d))
		e := b.conv(d, 16, 16, 7, 1, 3, 16, 1, true)
		e = b.node(&ir.Binary{Fn: ir.OpAdd}, e, d)
		f := b.node(&ir.Clip{}, b.conv(e, 16, 16, 3, 1, 1, 16, 1, false), b.w(0, 1), b.w(0, 1))
		f.Producer.Inputs[2].Const.Float32s()[0] = 6
		add(b.out(f))
	}
	{
		// Expansions whose activation a depthwise prologue can take
		// (graphprologue.go): SiLU into the tiled 3x3, hard swish into the
		// tiled 5x5 stride 2, ReLU6 into the scalar kernel (12 channels).
		b, x := newGB("expand_prologue", 8, 13, 11)
		e := b.conv(x, 8, 16, 1, 1, 0, 1, 1, true)
		e = b.node(&ir.Binary{Fn: ir.OpMul}, e, b.node(&ir.Unary{Fn: ir.OpSigmoid}, e))
		d := b.conv(e, 16, 16, 3, 1, 1, 16, 1, true)
		e = b.node(&ir.Unary{Fn: ir.OpHardSwish}, b.conv(d, 16, 24, 1, 1, 0, 1, 1, true))
		d = b.conv(e, 24, 24, 5, 2, 2, 24, 1, true)
		e = b.node(&ir.Clip{}, b.conv(d, 24, 12, 1, 1, 0, 1, 1, true), b.w(0, 1), b.w(0, 1))
		e.Producer.Inputs[2].Const.Float32s()[0] = 6
		add(b.out(b.conv(e, 12, 12, 3, 2, 1, 12, 1, false)))
	}
	{
		b, x := newGB("grouped_dilated_silu", 8, 10, 10)
		c := b.conv(x, 8, 12, 3, 1, 2, 4, 2, false)
		y := b.node(&ir.Binary{Fn: ir.OpMul}, c, b.node(&ir.Unary{Fn: ir.OpSigmoid}, c))
		add(b.out(y))
	}
	{
		b, x := newGB("conv_bn_residual_relu", 8, 9, 9)
		c := b.bn(b.conv(x, 8, 8, 3, 1, 1, 1, 1, false), 8)
		y := b.node(&ir.Unary{Fn: ir.OpRelu}, b.node(&ir.Binary{Fn: ir.OpAdd}, c, x))
		add(b.out(y))
	}
	{
		b, x := newGB("bn_relu_conv_concat", 6, 8, 8)
		r := b.node(&ir.Unary{Fn: ir.OpRelu}, b.bn(x, 6))
		c := b.conv(r, 6, 4, 1, 1, 0, 1, 1, false)
		y := b.node(&ir.Concat{Axis: 1}, x, c)
		add(b.out(y))
	}
	{
		b, x := newGB("pools", 4, 13, 13)
		m := b.node(&ir.Pool{Max: true, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, Dilations: []int{1, 1}}, x)
		a := b.node(&ir.Pool{Kernel: []int{2, 2}, Strides: []int{2, 2}, Pads: []int{0, 0, 0, 0}, Dilations: []int{1, 1}}, m)
		c := b.node(&ir.Pool{Kernel: []int{3, 3}, Strides: []int{1, 1}, Pads: []int{1, 1, 1, 1}, Dilations: []int{1, 1}}, x)
		d := b.node(&ir.Pool{Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, Dilations: []int{1, 1}, CountIncludePad: true, CeilMode: true}, x)
		e := b.node(&ir.Pool{Max: true, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{0, 0, 0, 0}, Dilations: []int{1, 1}, CeilMode: true}, x)
		add(b.out(a, c, d, e))
	}
	{
		b, x := newGB("se_block", 16, 7, 7)
		p := b.node(&ir.GlobalPool{}, x)
		s := b.node(&ir.Unary{Fn: ir.OpRelu}, b.conv(p, 16, 4, 1, 1, 0, 1, 1, true))
		s = b.node(&ir.HardSigmoid{Alpha: 1.0 / 6, Beta: 0.5}, b.conv(s, 4, 16, 1, 1, 0, 1, 1, true))
		y := b.node(&ir.Binary{Fn: ir.OpMul}, x, s)
		add(b.out(y))
	}
	{
		// EfficientNet's squeeze-and-excitation: SiLU and sigmoid (no
		// fused cuDNN activation), 40 channels (not a multiple of the
		// fc kernel's 32 lanes) squeezed to 3 (below cuDNN's padding
		// threshold of 8).
		b, x := newGB("se_silu", 40, 5, 5)
		p := b.node(&ir.GlobalPool{}, x)
		f := b.conv(p, 40, 3, 1, 1, 0, 1, 1, true)
		f = b.node(&ir.Binary{Fn: ir.OpMul}, f, b.node(&ir.Unary{Fn: ir.OpSigmoid}, f))
		s := b.node(&ir.Unary{Fn: ir.OpSigmoid}, b.conv(f, 3, 40, 1, 1, 0, 1, 1, true))
		y := b.node(&ir.Binary{Fn: ir.OpMul}, x, s)
		add(b.out(y))
	}
	{
		b, x := newGB("gap_gemm", 16, 5, 5)
		f := b.node(&ir.Flatten{Axis: 1}, b.node(&ir.GlobalPool{}, x))
		y := b.node(&ir.Gemm{Alpha: 1, Beta: 1, TransB: true}, f, b.w(0.25, 10, 16), b.w(0.1, 10))
		z := b.node(&ir.Gemm{Alpha: 0.5, Beta: 2}, y, b.w(0.3, 10, 7), b.w(0.1, 7))
		add(b.out(z, y))
	}
	add(attentionGraph("attention", 9, 4, 4))
	{
		// Split pieces, a transpose, a slice, a reshape of a strided view
		// and a one-index gather, all read in place by products.
		b, x := newGB("strided_views", 6, 8)
		parts := b.nodeN(&ir.Split{Axis: 2, NumOutputs: 2}, 2, x)
		t := b.node(&ir.Transpose{Perm: []int{0, 2, 1}}, parts[1])
		y1 := b.node(&ir.MatMul{}, parts[0], t)
		sl := b.node(&ir.Slice{}, x, b.ints(1), b.ints(5), b.ints(1))
		r := b.node(&ir.Reshape{}, sl, b.ints(0, 32))
		y2 := b.node(&ir.MatMul{}, r, b.w(0.2, 32, 5))
		g := b.node(&ir.Gather{Axis: 1}, x, b.scalarInt(2))
		y3 := b.node(&ir.MatMul{}, g, b.w(0.3, 8, 3))
		// Rows of a transposed view: batched products against a shared B
		// at batch 1, a copy at batch 3.
		h := b.node(&ir.Reshape{}, b.node(&ir.Concat{Axis: 1}, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x), b.ints(0, 16, 9, 8))
		h = b.node(&ir.Transpose{Perm: []int{0, 2, 1, 3}}, h)
		y4 := b.node(&ir.MatMul{}, h, b.w(0.3, 8, 5))
		add(b.out(y1, y2, y3, y4))
	}
	{
		// The probabilities are an output too: no fused attention.
		b, x := newGB("attention_probs_out", 7, 8)
		k := b.node(&ir.Transpose{Perm: []int{0, 2, 1}}, x)
		s := b.node(&ir.Softmax{Axis: -1}, b.node(&ir.MatMul{}, x, k))
		o := b.node(&ir.MatMul{}, s, x)
		add(b.out(o, s))
	}
	{
		b, x := newGB("layernorm_mlp_gelu", 5, 24)
		n := b.node(&ir.LayerNorm{Axis: -1, Epsilon: 1e-6}, x, b.w(1, 24), b.w(0.1, 24))
		h := b.node(&ir.Binary{Fn: ir.OpAdd}, b.node(&ir.MatMul{}, n, b.w(0.2, 24, 48)), b.w(0.1, 48))
		h = b.node(&ir.Gelu{}, h)
		y := b.node(&ir.Binary{Fn: ir.OpAdd}, b.node(&ir.MatMul{}, h, b.w(0.15, 48, 24)), b.w(0.1, 24))
		add(b.out(y))
	}
	{
		// Rows of 776: 97 16-byte vectors of halves, so the vectorised
		// layer norm's lane 0 holds a fourth one; float32 rows are too
		// long for it and take the warp kernel.
		b, x := newGB("layernorm_wide", 2, 776)
		add(b.out(b.node(&ir.LayerNorm{Axis: -1, Epsilon: 1e-5}, x, b.w(1, 776), b.w(0.1, 776))))
	}
	{
		// Rows of 96 (12 vectors of halves: 4 lanes a row in
		// layernorm_group, 8 rows a warp; 111 rows at batch 3 leave the
		// last warp a group past the end).
		b, x := newGB("layernorm_groups", 37, 96)
		add(b.out(b.node(&ir.LayerNorm{Axis: -1, Epsilon: 1e-6}, x, b.w(1, 96), b.w(0.1, 96))))
	}
	{
		b, x := newGB("convnext_block", 8, 6, 6)
		d := b.conv(x, 8, 8, 7, 1, 3, 8, 1, true)
		t := b.node(&ir.Transpose{Perm: []int{0, 2, 3, 1}}, d)
		n := b.node(&ir.LayerNorm{Axis: -1, Epsilon: 1e-6}, t, b.w(1, 8), b.w(0.1, 8))
		h := b.node(&ir.Gelu{}, b.node(&ir.Binary{Fn: ir.OpAdd}, b.node(&ir.MatMul{}, n, b.w(0.3, 8, 32)), b.w(0.1, 32)))
		h = b.node(&ir.Binary{Fn: ir.OpAdd}, b.node(&ir.MatMul{}, h, b.w(0.2, 32, 8)), b.w(0.1, 8))
		h = b.node(&ir.Transpose{Perm: []int{0, 3, 1, 2}}, h)
		h = b.node(&ir.Binary{Fn: ir.OpMul}, b.w(1, 8, 1, 1), h)
		y := b.node(&ir.Binary{Fn: ir.OpAdd}, h, x)
		add(b.out(y))
	}
	{
		// A GEMM's bias epilogue, then a per-column scale (constant first),
		// a shift and a residual: one affine step when folded.
		b, x := newGB("matmul_scale_residual", 6, 16)
		h := b.node(&ir.Binary{Fn: ir.OpAdd}, b.node(&ir.MatMul{}, x, b.w(0.25, 16, 16)), b.w(0.1, 16))
		h = b.node(&ir.Binary{Fn: ir.OpMul}, b.w(1, 16), h)
		h = b.node(&ir.Binary{Fn: ir.OpAdd}, h, b.w(0.1, 1, 16))
		y := b.node(&ir.Binary{Fn: ir.OpAdd}, x, h)
		add(b.out(y))
	}
	{
		b, x := newGB("layout_ops", 6, 5, 7)
		s := b.node(&ir.Slice{}, x, b.ints(1, 4), b.ints(6, 0), b.ints(1, 3), b.ints(2, -2))
		g := b.node(&ir.Gather{Axis: 2}, x, b.scalarInt(-1))
		pd := b.node(&ir.Pad{}, x, b.ints(0, 1, 2, 0, 0, 0, 1, 1))
		t := b.node(&ir.Transpose{Perm: []int{0, 3, 1, 2}}, x)
		u := b.node(&ir.Unsqueeze{}, g, b.ints(1))
		add(b.out(s, g, pd, t, u))
	}
	{
		b, x := newGB("elementwise", 3, 4, 5)
		a := b.node(&ir.Binary{Fn: ir.OpAdd}, x, b.w(1, 3, 1, 1))
		c := b.node(&ir.Binary{Fn: ir.OpSub}, b.w(1, 5), a)
		d := b.node(&ir.Binary{Fn: ir.OpPow}, c, b.w(0, 1))
		d.Producer.Inputs[1].Const.Float32s()[0] = 2
		e := b.node(&ir.Unary{Fn: ir.OpErf}, b.node(&ir.Unary{Fn: ir.OpTanh}, x))
		f := b.node(&ir.Binary{Fn: ir.OpMul}, b.node(&ir.Unary{Fn: ir.OpSigmoid}, d), e)
		cl := b.node(&ir.Clip{}, f, b.w(0, 1), nil)
		cl.Producer.Inputs[1].Const.Float32s()[0] = -0.25
		cl.Producer.Inputs = cl.Producer.Inputs[:2]
		l := b.node(&ir.LeakyRelu{Alpha: 0.1}, b.node(&ir.Unary{Fn: ir.OpExp}, cl))
		r := b.node(&ir.Reduce{Fn: ir.ReduceMean, Axes: []int{-1}, KeepDims: true}, l)
		sm := b.node(&ir.Softmax{Axis: 1}, b.node(&ir.Transpose{Perm: []int{0, 2, 3, 1}}, x))
		add(b.out(l, r, sm))
	}
	return cs
}

// modelCase is a torchvision architecture with random weights at an image
// size.
type modelCase struct {
	arch string
	cfg  torchvision.Config // nil: the named architecture
	size int
}

// buildModel builds a model case's graph.
// modelGraph is c's graph: a torchvision architecture (cached) or a tiny
// built model.
func modelGraph(t *testing.T, c modelCase) *ir.Graph {
	t.Helper()
	var g *ir.Graph
	var err error
	if c.cfg == nil {
		g, err = cachedModel(c.arch, c.size)
	} else {
		g, err = buildModel(c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func buildModel(c modelCase) (*ir.Graph, error) {
	if c.cfg != nil {
		sd, err := torchvision.RandomStateDictFor(c.cfg, c.size, 1)
		if err != nil {
			return nil, err
		}
		return torchvision.BuildWith(c.cfg, sd, torchvision.Options{ImageSize: c.size})
	}
	sd, err := torchvision.RandomStateDict(c.arch, 1000, 1)
	if err != nil {
		return nil, err
	}
	return torchvision.Build(c.arch, sd, torchvision.Options{ImageSize: c.size})
}

// tinyModels are narrow versions of the architectures the engine is
// checked on, small enough for the CPU simulation in CI.
var tinyModels = []modelCase{
	{arch: "tiny_vit", cfg: torchvision.ViTConfig{Arch: "tiny_vit", PatchSize: 8, Layers: 2, Heads: 2, Hidden: 32, MLP: 64, Classes: 10}, size: 32},
	{arch: "tiny_convnext", cfg: torchvision.ConvNeXtConfig{Arch: "tiny_convnext", Stages: []torchvision.ConvNeXtStage{{In: 16, Out: 32, Layers: 1}, {In: 32, Out: 0, Layers: 1}}, Classes: 10}, size: 32},
	{arch: "mobilenet_v3_large", size: 16},
}

// attentionGraph is a transformer block's attention over tokens tokens of
// heads heads of hd: a QKV product, the heads split by reshape and
// transpose, softmax(q k^T / 2) v, the output projection and a residual.
// The weights scale as 1/sqrt(dim) (0.25 for 16), so that wider blocks'
// scores stay as spread as the small one's and bf16 keeps its bound.
func attentionGraph(name string, tokens, heads, hd int) *ir.Graph {
	dim := heads * hd
	ws := 1 / math.Sqrt(float64(dim))
	b, x := newGB(name, tokens, dim)
	qkv := b.node(&ir.MatMul{}, x, b.w(ws, dim, 3*dim))
	qkv = b.node(&ir.Binary{Fn: ir.OpAdd}, qkv, b.w(0.1, 3*dim))
	parts := b.nodeN(&ir.Split{Axis: 2, NumOutputs: 3}, 3, qkv)
	split := func(v *ir.Value, perm []int) *ir.Value {
		r := b.node(&ir.Reshape{}, v, b.ints(0, int64(tokens), int64(heads), int64(hd)))
		return b.node(&ir.Transpose{Perm: perm}, r)
	}
	q, k, v := split(parts[0], []int{0, 2, 1, 3}), split(parts[1], []int{0, 2, 3, 1}), split(parts[2], []int{0, 2, 1, 3})
	s := b.node(&ir.MatMul{}, q, k)
	s = b.node(&ir.Binary{Fn: ir.OpDiv}, s, b.w(0, 1))
	s.Producer.Inputs[1].Const.Float32s()[0] = 2
	s.Producer.Inputs[1].Type.Shape = tensor.Shape{}
	s.Producer.Inputs[1].Const.Shape = tensor.Shape{}
	a := b.node(&ir.Softmax{Axis: -1}, s)
	o := b.node(&ir.MatMul{}, a, v)
	o = b.node(&ir.Transpose{Perm: []int{0, 2, 1, 3}}, o)
	o = b.node(&ir.Reshape{}, o, b.ints(0, int64(tokens), int64(dim)))
	o = b.node(&ir.MatMul{}, o, b.w(ws, dim, dim))
	y := b.node(&ir.Binary{Fn: ir.OpAdd}, o, x)
	return b.out(y)
}
