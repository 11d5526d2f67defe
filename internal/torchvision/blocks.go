package torchvision

import (
	"goinfer/internal/ir"
)

// act is an activation as torchvision's modules name it.
type act uint8

const (
	actNone act = iota
	actReLU
	actReLU6
	actHardSwish
	actHardSigmoid
	actSiLU
	actSigmoid
	actGELU
)

// activate applies a. Ops are the ONNX primitives an exporter would
// emit (SiLU is Sigmoid then Mul), so that every engine that runs ONNX
// exports runs these graphs; fusion passes recognise the patterns.
func (b *builder) activate(name string, x *ir.Value, a act) *ir.Value {
	switch a {
	case actReLU:
		return b.node(name+".relu", &ir.Unary{Fn: ir.OpRelu}, x)
	case actReLU6:
		return b.node(name+".relu6", &ir.Clip{}, x, b.scalar(name+".min", 0), b.scalar(name+".max", 6))
	case actHardSwish:
		return b.node(name+".hardswish", &ir.Unary{Fn: ir.OpHardSwish}, x)
	case actHardSigmoid:
		return b.node(name+".hardsigmoid", &ir.HardSigmoid{Alpha: 1.0 / 6, Beta: 0.5}, x)
	case actSiLU:
		s := b.node(name+".sigmoid", &ir.Unary{Fn: ir.OpSigmoid}, x)
		return b.node(name+".silu", &ir.Binary{Fn: ir.OpMul}, x, s)
	case actSigmoid:
		return b.node(name+".sigmoid", &ir.Unary{Fn: ir.OpSigmoid}, x)
	case actGELU:
		return b.node(name+".gelu", &ir.Gelu{}, x)
	}
	return x
}

// conv is nn.Conv2d at prefix with a square kernel and symmetric padding.
type convArgs struct {
	in, out, k, stride, pad, groups, dil int
	bias                                 bool
}

func (b *builder) conv(prefix string, x *ir.Value, c convArgs) *ir.Value {
	if c.stride == 0 {
		c.stride = 1
	}
	if c.groups == 0 {
		c.groups = 1
	}
	if c.dil == 0 {
		c.dil = 1
	}
	w := b.param(prefix+".weight", c.out, c.in/c.groups, c.k, c.k)
	in := []*ir.Value{x, w}
	if c.bias {
		in = append(in, b.param(prefix+".bias", c.out))
	}
	return b.node(prefix, &ir.Conv{
		Kernel:    []int{c.k, c.k},
		Strides:   []int{c.stride, c.stride},
		Pads:      []int{c.pad, c.pad, c.pad, c.pad},
		Dilations: []int{c.dil, c.dil},
		Group:     c.groups,
	}, in...)
}

// bn is an inference-mode nn.BatchNorm2d over c channels.
func (b *builder) bn(prefix string, x *ir.Value, c int, eps float64) *ir.Value {
	scale := b.param(prefix+".weight", c)
	bias := b.param(prefix+".bias", c)
	mean := b.param(prefix+".running_mean", c)
	variance := b.param(prefix+".running_var", c)
	b.buffer(prefix + ".num_batches_tracked")
	return b.node(prefix, &ir.BatchNorm{Epsilon: eps}, x, scale, bias, mean, variance)
}

// convBNAct is torchvision's Conv2dNormActivation: conv at prefix.0
// (padding (k-1)/2*dilation, no bias), BatchNorm at prefix.1, then the
// activation.
func (b *builder) convBNAct(prefix string, x *ir.Value, in, out, k, stride, groups int, a act, eps float64) *ir.Value {
	return b.convBNActDil(prefix, x, in, out, k, stride, groups, 1, a, eps)
}

func (b *builder) convBNActDil(prefix string, x *ir.Value, in, out, k, stride, groups, dil int, a act, eps float64) *ir.Value {
	y := b.conv(prefix+".0", x, convArgs{in: in, out: out, k: k, stride: stride, pad: (k - 1) / 2 * dil, groups: groups, dil: dil})
	y = b.bn(prefix+".1", y, out, eps)
	return b.activate(prefix, y, a)
}

// linear is nn.Linear on a [N, in] input.
func (b *builder) linear(prefix string, x *ir.Value, in, out int) *ir.Value {
	w := b.param(prefix+".weight", out, in)
	bias := b.param(prefix+".bias", out)
	return b.node(prefix, &ir.Gemm{Alpha: 1, Beta: 1, TransB: true}, x, w, bias)
}

// linearND is nn.Linear on the last dimension of an input of any rank:
// MatMul with the transposed weight (folded at bind time), then the bias.
func (b *builder) linearND(prefix string, x *ir.Value, in, out int) *ir.Value {
	w := b.param(prefix+".weight", out, in)
	bias := b.param(prefix+".bias", out)
	wt := b.node(prefix+".weight_t", &ir.Transpose{Perm: []int{1, 0}}, w)
	y := b.node(prefix+".matmul", &ir.MatMul{}, x, wt)
	return b.node(prefix, &ir.Binary{Fn: ir.OpAdd}, y, bias)
}

// squeezeExcite is torchvision's SqueezeExcitation: global average pool,
// fc1 and fc2 as 1x1 convolutions with bias, the activation between them,
// the gate after, and the input scaled by the gate.
func (b *builder) squeezeExcite(prefix string, x *ir.Value, c, squeeze int, a, gate act) *ir.Value {
	s := b.node(prefix+".avgpool", &ir.GlobalPool{}, x)
	s = b.conv(prefix+".fc1", s, convArgs{in: c, out: squeeze, k: 1, bias: true})
	s = b.activate(prefix+".fc1", s, a)
	s = b.conv(prefix+".fc2", s, convArgs{in: squeeze, out: c, k: 1, bias: true})
	s = b.activate(prefix+".fc2", s, gate)
	return b.node(prefix+".scale", &ir.Binary{Fn: ir.OpMul}, x, s)
}

func (b *builder) add(name string, x, y *ir.Value) *ir.Value {
	return b.node(name, &ir.Binary{Fn: ir.OpAdd}, x, y)
}

func (b *builder) relu(name string, x *ir.Value) *ir.Value {
	return b.node(name, &ir.Unary{Fn: ir.OpRelu}, x)
}

// poolFlatten is AdaptiveAvgPool2d(1) and flatten(1): [N, C, H, W] to
// [N, C].
func (b *builder) poolFlatten(name string, x *ir.Value) *ir.Value {
	p := b.node(name, &ir.GlobalPool{}, x)
	return b.node(name+".flatten", &ir.Flatten{Axis: 1}, p)
}

// maxPool is nn.MaxPool2d with a square window.
func (b *builder) maxPool(name string, x *ir.Value, k, stride, pad int, ceil bool) *ir.Value {
	return b.node(name, &ir.Pool{Max: true, Kernel: []int{k, k}, Strides: []int{stride, stride}, Pads: []int{pad, pad, pad, pad}, Dilations: []int{1, 1}, CeilMode: ceil}, x)
}

// avgPool is nn.AvgPool2d with a square window (count_include_pad as
// PyTorch's default).
func (b *builder) avgPool(name string, x *ir.Value, k, stride, pad int, ceil bool) *ir.Value {
	return b.node(name, &ir.Pool{Kernel: []int{k, k}, Strides: []int{stride, stride}, Pads: []int{pad, pad, pad, pad}, Dilations: []int{1, 1}, CeilMode: ceil, CountIncludePad: true}, x)
}
