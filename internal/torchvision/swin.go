package torchvision

import (
	"fmt"
	"math"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// SwinConfig is torchvision's SwinTransformer, version 1 or (V2) 2.
type SwinConfig struct {
	// V2 is Swin Transformer V2: cosine attention with a learnt logit
	// scale, a continuous relative position bias from a small MLP,
	// normalisation after the attention and the MLP, and patch merging
	// that normalises after its reduction.
	V2       bool
	Arch     string
	Patch    int // 4
	EmbedDim int
	Depths   []int
	Heads    []int
	Window   int // 7
	MLPRatio float64
	Classes  int
}

func init() {
	for _, s := range []SwinConfig{
		{Arch: "swin_t", EmbedDim: 96, Depths: []int{2, 2, 6, 2}, Heads: []int{3, 6, 12, 24}},
		{Arch: "swin_s", EmbedDim: 96, Depths: []int{2, 2, 18, 2}, Heads: []int{3, 6, 12, 24}},
		{Arch: "swin_b", EmbedDim: 128, Depths: []int{2, 2, 18, 2}, Heads: []int{4, 8, 16, 32}},
		{Arch: "swin_v2_t", V2: true, EmbedDim: 96, Depths: []int{2, 2, 6, 2}, Heads: []int{3, 6, 12, 24}},
		{Arch: "swin_v2_s", V2: true, EmbedDim: 96, Depths: []int{2, 2, 18, 2}, Heads: []int{3, 6, 12, 24}},
		{Arch: "swin_v2_b", V2: true, EmbedDim: 128, Depths: []int{2, 2, 18, 2}, Heads: []int{4, 8, 16, 32}},
	} {
		s := s
		register(s.Arch, "head.weight", func(classes int) Config {
			c := s
			c.Patch, c.Window, c.MLPRatio, c.Classes = 4, 7, 4, classes
			if c.V2 {
				c.Window = 8
			}
			return c
		})
	}
}

// Name implements Config.
func (c SwinConfig) Name() string {
	if c.Arch != "" {
		return c.Arch
	}
	v := "swin"
	if c.V2 {
		v = "swin_v2"
	}
	return fmt.Sprintf("%s-e%d%v%v-w%d", v, c.EmbedDim, c.Depths, c.Heads, c.Window)
}

// intBuffer checks an integer buffer whose content the architecture
// fixes (a Swin window's relative position index): when the state dict
// holds it, its shape (1-D unless given) and values must be want.
func (b *builder) intBuffer(key string, want []int64, shape ...int) {
	s := tensor.Shape{len(want)}
	if shape != nil {
		s = tensor.Shape(shape).Clone()
	}
	b.specs = append(b.specs, ParamSpec{Key: key, Shape: s, Int: true, IntValues: want})
	if b.sd == nil {
		return
	}
	b.used[key] = true
	t, ok := b.sd.Get(key)
	if !ok {
		b.problem("missing key %q (want shape %v)", key, s)
		return
	}
	if !t.Shape.Equal(s) || t.DType != tensor.Int64 {
		b.problem("key %q is %s%v, the architecture needs int64%v", key, t.DType, t.Shape, s)
		return
	}
	a, err := ir.ArrayFromTensor(t)
	if err != nil {
		b.problem("key %q: %v", key, err)
		return
	}
	for i, v := range want {
		if a.Data[i] != float64(v) {
			b.problem("key %q differs from the window's relative position index at %d (%v, want %d)", key, i, a.Data[i], v)
			return
		}
	}
}

func (b *builder) constF32(name string, shape tensor.Shape, v []float32) *ir.Value {
	t, _ := tensor.FromFloat32(shape, v)
	return &ir.Value{Name: b.name(name), Type: ir.Type{DType: tensor.Float32, Shape: t.Shape}, Const: t}
}

func (b *builder) constI64(name string, v []int64) *ir.Value {
	t := tensor.New(tensor.Int64, len(v))
	for i, x := range v {
		putInt64(t.Data[8*i:], x)
	}
	return &ir.Value{Name: b.name(name), Type: ir.Type{DType: tensor.Int64, Shape: t.Shape}, Const: t}
}

// slice is ONNX Slice with constant starts, ends, axes and steps.
func (b *builder) slice(name string, x *ir.Value, starts, ends, axes, steps []int) *ir.Value {
	return b.node(name, &ir.Slice{}, x, b.ints(name+".starts", starts...), b.ints(name+".ends", ends...), b.ints(name+".axes", axes...), b.ints(name+".steps", steps...))
}

// roll is torch.roll of x by shift along axis of size n.
func (b *builder) roll(name string, x *ir.Value, axis, n, shift int) *ir.Value {
	shift = ((shift % n) + n) % n
	if shift == 0 {
		return x
	}
	tail := b.slice(name+".tail", x, []int{n - shift}, []int{n}, []int{axis}, []int{1})
	head := b.slice(name+".head", x, []int{0}, []int{n - shift}, []int{axis}, []int{1})
	return b.node(name, &ir.Concat{Axis: axis}, tail, head)
}

// linearNoBias is nn.Linear(bias=False) on the last dimension.
func (b *builder) linearNoBias(prefix string, x *ir.Value, in, out int) *ir.Value {
	w := b.param(prefix+".weight", out, in)
	wt := b.transpose(prefix+".weight_t", w, 1, 0)
	return b.node(prefix, &ir.MatMul{}, x, wt)
}

// relativePositionIndex is a ws x ws window's index into the relative
// position bias table, as torchvision computes it.
func relativePositionIndex(ws int) []int64 {
	n := ws * ws
	idx := make([]int64, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			dh := i/ws - j/ws + ws - 1
			dw := i%ws - j%ws + ws - 1
			idx[i*n+j] = int64(dh*(2*ws-1) + dw)
		}
	}
	return idx
}

// shiftMask is the additive attention mask of shifted windows: -100
// between tokens that came from different regions before the roll, as
// torchvision builds it; shape [1, windows, 1, N, N].
func shiftMask(ph, pw, ws, sh, sw int) (tensor.Shape, []float32) {
	region := func(i, n, s int) int {
		switch {
		case i < n-ws:
			return 0
		case i < n-s:
			return 1
		}
		return 2
	}
	nh, nw, n := ph/ws, pw/ws, ws*ws
	m := make([]float32, nh*nw*n*n)
	for wh := 0; wh < nh; wh++ {
		for ww := 0; ww < nw; ww++ {
			base := (wh*nw + ww) * n * n
			for i := 0; i < n; i++ {
				ri := region(wh*ws+i/ws, ph, sh)*3 + region(ww*ws+i%ws, pw, sw)
				for j := 0; j < n; j++ {
					rj := region(wh*ws+j/ws, ph, sh)*3 + region(ww*ws+j%ws, pw, sw)
					if ri != rj {
						m[base+i*n+j] = -100
					}
				}
			}
		}
	}
	return tensor.Shape{1, nh * nw, 1, n, n}, m
}

func (c SwinConfig) build(b *builder, x *ir.Value, size int) *ir.Value {
	const eps = 1e-5
	d := c.EmbedDim
	y := b.conv("features.0.0", x, convArgs{in: 3, out: d, k: c.Patch, stride: c.Patch, bias: true})
	y = b.transpose("features.0.1", y, 0, 2, 3, 1)
	y = b.layerNorm("features.0.2", y, d, 3, eps)
	h, w := size/c.Patch, size/c.Patch
	f := 1
	for si, depth := range c.Depths {
		for j := 0; j < depth; j++ {
			p := fmt.Sprintf("features.%d.%d", f, j)
			shift := 0
			if j%2 == 1 {
				shift = c.Window / 2
			}
			hidden := int(float64(d) * c.MLPRatio)
			mlp := func(m *ir.Value) *ir.Value {
				m = b.linearND(p+".mlp.0", m, d, hidden)
				m = b.activate(p+".mlp.1", m, actGELU)
				return b.linearND(p+".mlp.3", m, hidden, d)
			}
			if c.V2 {
				a := b.windowAttention(p+".attn", y, h, w, d, c.Heads[si], c.Window, shift, true)
				y = b.add(p+".add1", y, b.layerNorm(p+".norm1", a, d, 3, eps))
				y = b.add(p+".add2", y, b.layerNorm(p+".norm2", mlp(y), d, 3, eps))
				continue
			}
			a := b.layerNorm(p+".norm1", y, d, 3, eps)
			a = b.windowAttention(p+".attn", a, h, w, d, c.Heads[si], c.Window, shift, false)
			y = b.add(p+".add1", y, a)
			y = b.add(p+".add2", y, mlp(b.layerNorm(p+".norm2", y, d, 3, eps)))
		}
		f++
		if si < len(c.Depths)-1 {
			p := fmt.Sprintf("features.%d", f)
			if h%2 != 0 || w%2 != 0 {
				y = b.node(p+".pad", &ir.Pad{}, y, b.ints(p+".pads", 0, 0, 0, 0, 0, h%2, w%2, 0))
				h, w = h+h%2, w+w%2
			}
			var parts []*ir.Value
			for _, o := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}} {
				parts = append(parts, b.slice(fmt.Sprintf("%s.x%d%d", p, o[0], o[1]), y, []int{o[0], o[1]}, []int{h, w}, []int{1, 2}, []int{2, 2}))
			}
			y = b.node(p+".cat", &ir.Concat{Axis: 3}, parts...)
			if c.V2 {
				y = b.linearNoBias(p+".reduction", y, 4*d, 2*d)
				y = b.layerNorm(p+".norm", y, 2*d, 3, eps)
			} else {
				y = b.layerNorm(p+".norm", y, 4*d, 3, eps)
				y = b.linearNoBias(p+".reduction", y, 4*d, 2*d)
			}
			h, w, d = h/2, w/2, 2*d
			f++
		}
	}
	y = b.layerNorm("norm", y, d, 3, eps)
	y = b.transpose("permute", y, 0, 3, 1, 2)
	y = b.poolFlatten("avgpool", y)
	return b.linear("head", y, d, c.Classes)
}

// windowAttention is torchvision's ShiftedWindowAttention (V2:
// ShiftedWindowAttentionV2) on [N, H, W, C]: pad to whole windows, roll by
// -shift, attend within ws x ws windows with the relative position bias
// (and the shift mask), undo the roll and the padding.
func (b *builder) windowAttention(p string, x *ir.Value, h, w, c, heads, ws, shift int, v2 bool) *ir.Value {
	if c%heads != 0 {
		panic(fmt.Sprintf("%d channels do not split into %d heads", c, heads))
	}
	n, dh := ws*ws, c/heads
	var table *ir.Value
	if v2 {
		// The continuous position bias: an MLP over the log-spaced
		// relative coordinates, all constant, so folded at bind time.
		side := 2*ws - 1
		table = b.fixedBuffer(p+".relative_coords_table", tensor.Shape{1, side, side, 2}, relativeCoordsTable(ws))
		table = b.linearND(p+".cpb_mlp.0", table, 2, 512)
		table = b.relu(p+".cpb_mlp.1", table)
		table = b.linearNoBias(p+".cpb_mlp.2", table, 512, heads)
		table = b.reshape(p+".cpb", table, -1, heads)
	} else {
		table = b.param(p+".relative_position_bias_table", (2*ws-1)*(2*ws-1), heads)
	}
	index := relativePositionIndex(ws)
	b.intBuffer(p+".relative_position_index", index)
	padB, padR := (ws-h%ws)%ws, (ws-w%ws)%ws
	ph, pw := h+padB, w+padR
	if padB > 0 || padR > 0 {
		x = b.node(p+".pad", &ir.Pad{}, x, b.ints(p+".pads", 0, 0, 0, 0, 0, padB, padR, 0))
	}
	sh, sw := shift, shift
	if ws >= ph {
		sh = 0
	}
	if ws >= pw {
		sw = 0
	}
	x = b.roll(p+".roll_h", x, 1, ph, -sh)
	x = b.roll(p+".roll_w", x, 2, pw, -sw)
	nh, nw := ph/ws, pw/ws
	x = b.reshape(p+".windows", x, -1, nh, ws, nw, ws, c)
	x = b.transpose(p+".windows.t", x, 0, 1, 3, 2, 4, 5)
	x = b.reshape(p+".tokens", x, -1, n, c)
	var qkv *ir.Value
	if v2 {
		// V2 ignores the key part of the qkv bias.
		wq := b.param(p+".qkv.weight", 3*c, c)
		bias := b.param(p+".qkv.bias", 3*c)
		keep := make([]float32, 3*c)
		for i := range keep {
			if i < c || i >= 2*c {
				keep[i] = 1
			}
		}
		bias = b.node(p+".qkv.bias_qv", &ir.Binary{Fn: ir.OpMul}, bias, b.constF32(p+".qkv.keep", tensor.Shape{3 * c}, keep))
		qkv = b.node(p+".qkv.matmul", &ir.MatMul{}, x, b.transpose(p+".qkv.weight_t", wq, 1, 0))
		qkv = b.add(p+".qkv", qkv, bias)
	} else {
		qkv = b.linearND(p+".qkv", x, c, 3*c)
	}
	qkv = b.reshape(p+".qkv.heads", qkv, -1, n, 3, heads, dh)
	qkv = b.transpose(p+".qkv.t", qkv, 2, 0, 3, 1, 4)
	parts := b.nodeN(p+".split", &ir.Split{Axis: 0, NumOutputs: 3}, 3, qkv)
	q := b.reshape(p+".q", parts[0], -1, heads, n, dh)
	k := b.reshape(p+".k", parts[1], -1, heads, n, dh)
	v := b.reshape(p+".v", parts[2], -1, heads, n, dh)
	var attn *ir.Value
	if v2 {
		// Cosine attention: unit-length queries and keys, scaled by
		// exp(min(logit_scale, log 100)) per head.
		q, k = b.l2Normalize(p+".q.norm", q), b.l2Normalize(p+".k.norm", k)
		attn = b.node(p+".scores.cos", &ir.MatMul{}, q, b.transpose(p+".k.t", k, 0, 1, 3, 2))
		ls := b.param(p+".logit_scale", heads, 1, 1)
		ls = b.node(p+".logit_scale.clamp", &ir.Clip{}, ls, nil, b.scalar(p+".logit_scale.max", float32(math.Log(100))))
		ls = b.node(p+".logit_scale.exp", &ir.Unary{Fn: ir.OpExp}, ls)
		attn = b.node(p+".scores", &ir.Binary{Fn: ir.OpMul}, attn, ls)
	} else {
		q = b.node(p+".q.scale", &ir.Binary{Fn: ir.OpMul}, q, b.scalar(p+".scale", float32(math.Pow(float64(dh), -0.5))))
		attn = b.node(p+".scores", &ir.MatMul{}, q, b.transpose(p+".k.t", k, 0, 1, 3, 2))
	}
	// The bias gathers the table at a constant index: folded at bind time.
	bias := b.node(p+".bias.gather", &ir.Gather{Axis: 0}, table, b.constI64(p+".bias.index", index))
	bias = b.reshape(p+".bias.nnh", bias, n, n, heads)
	bias = b.transpose(p+".bias.t", bias, 2, 0, 1)
	bias = b.reshape(p+".bias", bias, 1, heads, n, n)
	if v2 {
		bias = b.node(p+".bias.sigmoid", &ir.Unary{Fn: ir.OpSigmoid}, bias)
		bias = b.node(p+".bias.x16", &ir.Binary{Fn: ir.OpMul}, bias, b.scalar(p+".bias.16", 16))
	}
	attn = b.add(p+".scores.bias", attn, bias)
	if sh > 0 || sw > 0 {
		shape, mask := shiftMask(ph, pw, ws, sh, sw)
		attn = b.reshape(p+".scores.windows", attn, -1, nh*nw, heads, n, n)
		attn = b.add(p+".scores.mask", attn, b.constF32(p+".mask", shape, mask))
		attn = b.reshape(p+".scores.flat", attn, -1, heads, n, n)
	}
	attn = b.node(p+".softmax", &ir.Softmax{Axis: 3}, attn)
	o := b.node(p+".context", &ir.MatMul{}, attn, v)
	o = b.reshape(p+".merge", b.transpose(p+".merge.t", o, 0, 2, 1, 3), -1, n, c)
	o = b.linearND(p+".proj", o, c, c)
	o = b.reshape(p+".unwindow", o, -1, nh, nw, ws, ws, c)
	o = b.transpose(p+".unwindow.t", o, 0, 1, 3, 2, 4, 5)
	o = b.reshape(p+".image", o, -1, ph, pw, c)
	o = b.roll(p+".unroll_h", o, 1, ph, sh)
	o = b.roll(p+".unroll_w", o, 2, pw, sw)
	if padB > 0 || padR > 0 {
		o = b.slice(p+".unpad", o, []int{0, 0}, []int{h, w}, []int{1, 2}, []int{1, 1})
	}
	return o
}

// l2Normalize is F.normalize(x, dim=-1) on a rank-4 tensor: x divided by
// max(||x||, 1e-12) along the last dimension.
func (b *builder) l2Normalize(name string, x *ir.Value) *ir.Value {
	norm := b.node(name+".l2", &ir.Reduce{Fn: ir.ReduceL2, Axes: []int{3}, KeepDims: true}, x)
	norm = b.node(name+".clamp", &ir.Variadic{Fn: ir.OpMax}, norm, b.scalar(name+".eps", 1e-12))
	return b.node(name, &ir.Binary{Fn: ir.OpDiv}, x, norm)
}

// relativeCoordsTable is Swin V2's log-spaced relative coordinates of a
// ws x ws window, [1, 2ws-1, 2ws-1, 2], computed in float32 as
// torchvision computes the buffer.
func relativeCoordsTable(ws int) []float32 {
	side := 2*ws - 1
	out := make([]float32, side*side*2)
	f := func(d int) float32 {
		v := float32(d) / float32(ws-1) * 8
		s := float32(1)
		if v < 0 {
			s, v = -1, -v
		} else if v == 0 {
			return 0
		}
		return s * float32(math.Log2(float64(v+1))) / 3
	}
	for i := 0; i < side; i++ {
		for j := 0; j < side; j++ {
			out[(i*side+j)*2] = f(i - (ws - 1))
			out[(i*side+j)*2+1] = f(j - (ws - 1))
		}
	}
	return out
}

// fixedBuffer is a float buffer the architecture fixes but the state dict
// holds (Swin V2's relative coordinates): the state dict's values are
// used, as PyTorch does, after checking the shape.
func (b *builder) fixedBuffer(key string, shape tensor.Shape, want []float32) *ir.Value {
	b.specs = append(b.specs, ParamSpec{Key: key, Shape: shape, Buffer: true, FloatValues: want})
	v := &ir.Value{Name: key, Type: ir.Type{DType: tensor.Float32, Shape: shape}}
	if b.sd == nil {
		return v
	}
	b.used[key] = true
	t, ok := b.sd.Get(key)
	if !ok {
		b.problem("missing key %q (want shape %v)", key, shape)
		return v
	}
	if !t.Shape.Equal(shape) {
		b.problem("key %q has shape %v, the architecture needs %v", key, t.Shape, shape)
		return v
	}
	f, err := t.ToFloat32()
	if err != nil {
		b.problem("key %q: %v", key, err)
		return v
	}
	v.Const, _ = tensor.FromFloat32(shape, append([]float32(nil), f...))
	return v
}
