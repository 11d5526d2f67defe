package torchvision

import (
	"fmt"
	"strings"

	"goinfer/internal/checkpoint"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// GoogLeNetConfig is torchvision's GoogLeNet (Inception v1).
type GoogLeNetConfig struct {
	// TransformInput re-normalises ImageNet-normalised input to the
	// [-1, 1] range the original weights were trained on, as torchvision
	// does when it loads them.
	TransformInput bool
	// AuxLogits: the state dict holds the auxiliary training classifiers
	// (the published weights do), which inference does not read.
	AuxLogits bool
	Classes   int
}

func init() {
	register("googlenet", "fc.weight", func(classes int) Config {
		return GoogLeNetConfig{TransformInput: true, Classes: classes}
	})
}

// Name implements Config.
func (c GoogLeNetConfig) Name() string { return "googlenet" }

func (c GoogLeNetConfig) adapt(sd *checkpoint.StateDict) Config {
	_, c.AuxLogits = sd.Get("aux1.fc2.weight")
	return c
}

// ignored checks a tensor that the state dict holds but inference does
// not read (an auxiliary training classifier's).
func (b *builder) ignored(key string, shape ...int) {
	if strings.HasSuffix(key, ".num_batches_tracked") {
		b.buffer(key)
		return
	}
	s := tensor.Shape(shape).Clone()
	b.specs = append(b.specs, ParamSpec{Key: key, Shape: s, Ignored: true})
	if b.sd == nil {
		return
	}
	b.used[key] = true
	t, ok := b.sd.Get(key)
	switch {
	case !ok:
		b.problem("missing key %q (want shape %v)", key, s)
	case !t.Shape.Equal(s):
		b.problem("key %q has shape %v, the architecture needs %v", key, t.Shape, s)
	}
}

// basicConv is GoogLeNet's and Inception's BasicConv2d: a bias-free
// convolution, BatchNorm with eps 1e-3, ReLU.
func (b *builder) basicConv(prefix string, x *ir.Value, in, out, kh, kw, stride, ph, pw int) *ir.Value {
	w := b.param(prefix+".conv.weight", out, in, kh, kw)
	y := b.node(prefix+".conv", &ir.Conv{
		Kernel: []int{kh, kw}, Strides: []int{stride, stride}, Pads: []int{ph, pw, ph, pw}, Dilations: []int{1, 1}, Group: 1,
	}, x, w)
	return b.relu(prefix+".relu", b.bn(prefix+".bn", y, out, 1e-3))
}

// ignoredBasicConv records a BasicConv2d that inference skips.
func (b *builder) ignoredBasicConv(prefix string, in, out, k int) {
	b.ignored(prefix+".conv.weight", out, in, k, k)
	for _, s := range []string{"weight", "bias", "running_mean", "running_var"} {
		b.ignored(prefix+".bn."+s, out)
	}
	b.ignored(prefix + ".bn.num_batches_tracked")
}

// transformInput is torchvision's _transform_input of the Inception
// models: x*std/0.5 + (mean-0.5)/0.5 per channel, turning ImageNet
// normalisation into normalisation to [-1, 1].
func (b *builder) transformInput(x *ir.Value) *ir.Value {
	// torchvision's literals in float64, as its transform computes them,
	// not preprocess's float32 statistics.
	mean, std := [3]float64{0.485, 0.456, 0.406}, [3]float64{0.229, 0.224, 0.225}
	scale, shift := make([]float32, 3), make([]float32, 3)
	for c := range scale {
		scale[c] = float32(std[c] / 0.5)
		shift[c] = float32((mean[c] - 0.5) / 0.5)
	}
	st, _ := tensor.FromFloat32(tensor.Shape{1, 3, 1, 1}, scale)
	sh, _ := tensor.FromFloat32(tensor.Shape{1, 3, 1, 1}, shift)
	sv := &ir.Value{Name: b.name("transform_input.scale"), Type: ir.Type{DType: tensor.Float32, Shape: st.Shape}, Const: st}
	hv := &ir.Value{Name: b.name("transform_input.shift"), Type: ir.Type{DType: tensor.Float32, Shape: sh.Shape}, Const: sh}
	y := b.node("transform_input.mul", &ir.Binary{Fn: ir.OpMul}, x, sv)
	return b.add("transform_input", y, hv)
}

func (c GoogLeNetConfig) build(b *builder, x *ir.Value, _ int) *ir.Value {
	if c.TransformInput {
		x = b.transformInput(x)
	}
	y := b.basicConv("conv1", x, 3, 64, 7, 7, 2, 3, 3)
	y = b.maxPool("maxpool1", y, 3, 2, 0, true)
	y = b.basicConv("conv2", y, 64, 64, 1, 1, 1, 0, 0)
	y = b.basicConv("conv3", y, 64, 192, 3, 3, 1, 1, 1)
	y = b.maxPool("maxpool2", y, 3, 2, 0, true)
	inception := func(name string, y *ir.Value, in, c1, c3r, c3, c5r, c5, pp int) *ir.Value {
		b1 := b.basicConv(name+".branch1", y, in, c1, 1, 1, 1, 0, 0)
		b2 := b.basicConv(name+".branch2.0", y, in, c3r, 1, 1, 1, 0, 0)
		b2 = b.basicConv(name+".branch2.1", b2, c3r, c3, 3, 3, 1, 1, 1)
		// torchvision's "5x5" branch has a 3x3 kernel, which its weights
		// were trained with.
		b3 := b.basicConv(name+".branch3.0", y, in, c5r, 1, 1, 1, 0, 0)
		b3 = b.basicConv(name+".branch3.1", b3, c5r, c5, 3, 3, 1, 1, 1)
		b4 := b.maxPool(name+".branch4.0", y, 3, 1, 1, true)
		b4 = b.basicConv(name+".branch4.1", b4, in, pp, 1, 1, 1, 0, 0)
		return b.node(name, &ir.Concat{Axis: 1}, b1, b2, b3, b4)
	}
	y = inception("inception3a", y, 192, 64, 96, 128, 16, 32, 32)
	y = inception("inception3b", y, 256, 128, 128, 192, 32, 96, 64)
	y = b.maxPool("maxpool3", y, 3, 2, 0, true)
	y = inception("inception4a", y, 480, 192, 96, 208, 16, 48, 64)
	y = inception("inception4b", y, 512, 160, 112, 224, 24, 64, 64)
	y = inception("inception4c", y, 512, 128, 128, 256, 24, 64, 64)
	y = inception("inception4d", y, 512, 112, 144, 288, 32, 64, 64)
	y = inception("inception4e", y, 528, 256, 160, 320, 32, 128, 128)
	y = b.maxPool("maxpool4", y, 2, 2, 0, true)
	y = inception("inception5a", y, 832, 256, 160, 320, 32, 128, 128)
	y = inception("inception5b", y, 832, 384, 192, 384, 48, 128, 128)
	// The auxiliary classifiers only train; the published weights hold them.
	for i, in := range []int{512, 528} {
		if !c.AuxLogits {
			break
		}
		p := fmt.Sprintf("aux%d", i+1)
		b.ignoredBasicConv(p+".conv", in, 128, 1)
		b.ignored(p+".fc1.weight", 1024, 2048)
		b.ignored(p+".fc1.bias", 1024)
		b.ignored(p+".fc2.weight", c.Classes, 1024)
		b.ignored(p+".fc2.bias", c.Classes)
	}
	y = b.poolFlatten("avgpool", y)
	return b.linear("fc", y, 1024, c.Classes)
}
