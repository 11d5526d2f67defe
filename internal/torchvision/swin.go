package torchvision

import (
	"fmt"
	"math"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// SwinConfig is torchvision's SwinTransformer (version 1).
type SwinConfig struct {
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
	} {
		s := s
		register(s.Arch, "head.weight", func(classes int) Config {
			c := s
			c.Patch, c.Window, c.MLPRatio, c.Classes = 4, 7, 4, classes
			return c
		})
	}
}

// Name implements Config.
func (c SwinConfig) Name() string {
	if c.Arch != "" {
		return c.Arch
	}
	return fmt.Sprintf("swin-e%d%v%v-w%d", c.EmbedDim, c.Depths, c.Heads, c.Window)
}

// intBuffer checks an integer buffer whose content the architecture
// fixes (a Swin window's relative position index): when the state dict
// holds it, its shape and values must be want.
func (b *builder) intBuffer(key string, want []int64) {
	s := tensor.Shape{len(want)}
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
			a := b.layerNorm(p+".norm1", y, d, 3, eps)
			a = b.windowAttention(p+".attn", a, h, w, d, c.Heads[si], c.Window, shift)
			y = b.add(p+".add1", y, a)
			m := b.layerNorm(p+".norm2", y, d, 3, eps)
			hidden := int(float64(d) * c.MLPRatio)
			m = b.linearND(p+".mlp.0", m, d, hidden)
			m = b.activate(p+".mlp.1", m, actGELU)
			m = b.linearND(p+".mlp.3", m, hidden, d)
			y = b.add(p+".add2", y, m)
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
			y = b.layerNorm(p+".norm", y, 4*d, 3, eps)
			y = b.linearNoBias(p+".reduction", y, 4*d, 2*d)
			h, w, d = h/2, w/2, 2*d
			f++
		}
	}
	y = b.layerNorm("norm", y, d, 3, eps)
	y = b.transpose("permute", y, 0, 3, 1, 2)
	y = b.poolFlatten("avgpool", y)
	return b.linear("head", y, d, c.Classes)
}

// windowAttention is torchvision's ShiftedWindowAttention on [N, H, W, C]:
// pad to whole windows, roll by -shift, attend within ws x ws windows with
// the relative position bias (and the shift mask), undo the roll and the
// padding.
func (b *builder) windowAttention(p string, x *ir.Value, h, w, c, heads, ws, shift int) *ir.Value {
	if c%heads != 0 {
		panic(fmt.Sprintf("%d channels do not split into %d heads", c, heads))
	}
	n, dh := ws*ws, c/heads
	table := b.param(p+".relative_position_bias_table", (2*ws-1)*(2*ws-1), heads)
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
	qkv := b.linearND(p+".qkv", x, c, 3*c)
	qkv = b.reshape(p+".qkv.heads", qkv, -1, n, 3, heads, dh)
	qkv = b.transpose(p+".qkv.t", qkv, 2, 0, 3, 1, 4)
	parts := b.nodeN(p+".split", &ir.Split{Axis: 0, NumOutputs: 3}, 3, qkv)
	q := b.reshape(p+".q", parts[0], -1, heads, n, dh)
	k := b.reshape(p+".k", parts[1], -1, heads, n, dh)
	v := b.reshape(p+".v", parts[2], -1, heads, n, dh)
	q = b.node(p+".q.scale", &ir.Binary{Fn: ir.OpMul}, q, b.scalar(p+".scale", float32(math.Pow(float64(dh), -0.5))))
	attn := b.node(p+".scores", &ir.MatMul{}, q, b.transpose(p+".k.t", k, 0, 1, 3, 2))
	// The bias gathers the table at a constant index: folded at bind time.
	bias := b.node(p+".bias.gather", &ir.Gather{Axis: 0}, table, b.constI64(p+".bias.index", index))
	bias = b.reshape(p+".bias.nnh", bias, n, n, heads)
	bias = b.transpose(p+".bias.t", bias, 2, 0, 1)
	bias = b.reshape(p+".bias", bias, 1, heads, n, n)
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
