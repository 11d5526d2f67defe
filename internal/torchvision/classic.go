package torchvision

import (
	"fmt"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// AlexNetConfig is torchvision's AlexNet.
type AlexNetConfig struct{ Classes int }

// VGGConfig is torchvision's VGG: the feature layers (channels, 0 for a
// max pool) and whether each convolution has a BatchNorm.
type VGGConfig struct {
	Arch      string
	Layers    []int
	BatchNorm bool
	Classes   int
}

var vggLayers = map[string][]int{
	"vgg11": {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0},
	"vgg13": {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0},
	"vgg16": {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0},
	"vgg19": {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0},
}

func init() {
	register("alexnet", "classifier.6.weight", func(classes int) Config { return AlexNetConfig{Classes: classes} })
	for name, l := range vggLayers {
		name, l := name, l
		register(name, "classifier.6.weight", func(classes int) Config { return VGGConfig{Arch: name, Layers: l, Classes: classes} })
		register(name+"_bn", "classifier.6.weight", func(classes int) Config {
			return VGGConfig{Arch: name + "_bn", Layers: l, BatchNorm: true, Classes: classes}
		})
	}
}

// Name implements Config.
func (AlexNetConfig) Name() string { return "alexnet" }

// Name implements Config.
func (c VGGConfig) Name() string {
	if c.Arch != "" {
		return c.Arch
	}
	return fmt.Sprintf("vgg%v-bn%v", c.Layers, c.BatchNorm)
}

// adaptiveAvgPool is nn.AdaptiveAvgPool2d(out) on a square h x h map: the
// identity when the sizes agree, a broadcast when the map is 1x1, an
// average pool when out divides h, and otherwise a constant averaging
// matrix over the flattened map.
func (b *builder) adaptiveAvgPool(name string, x *ir.Value, c, h, out int) *ir.Value {
	switch {
	case h == out:
		return x
	case h == 1:
		shape := b.node(name+".shape", &ir.Concat{Axis: 0},
			b.node(name+".batch", &ir.Shape{Start: 0, End: intPtr(1)}, x), b.ints(name+".dims", c, out, out))
		return b.node(name, &ir.Expand{}, x, shape)
	case h%out == 0:
		return b.avgPool(name, x, h/out, h/out, 0, false)
	}
	// Output cell i averages rows floor(i*h/out) to ceil((i+1)*h/out).
	m := make([]float32, h*h*out*out)
	for oi := 0; oi < out; oi++ {
		r0, r1 := oi*h/out, ((oi+1)*h+out-1)/out
		for oj := 0; oj < out; oj++ {
			c0, c1 := oj*h/out, ((oj+1)*h+out-1)/out
			w := 1 / float32((r1-r0)*(c1-c0))
			for r := r0; r < r1; r++ {
				for col := c0; col < c1; col++ {
					m[(r*h+col)*out*out+oi*out+oj] = w
				}
			}
		}
	}
	t, _ := tensor.FromFloat32(tensor.Shape{h * h, out * out}, m)
	mat := &ir.Value{Name: b.name(name + ".matrix"), Type: ir.Type{DType: tensor.Float32, Shape: t.Shape}, Const: t}
	y := b.reshape(name+".flat", x, 0, c, h*h)
	y = b.node(name+".matmul", &ir.MatMul{}, y, mat)
	return b.reshape(name, y, 0, c, out, out)
}

func (c AlexNetConfig) build(b *builder, x *ir.Value, size int) *ir.Value {
	y := b.relu("features.1", b.conv("features.0", x, convArgs{in: 3, out: 64, k: 11, stride: 4, pad: 2, bias: true}))
	h := convOut(size, 11, 4, 2, 1, false)
	y = b.maxPool("features.2", y, 3, 2, 0, false)
	h = convOut(h, 3, 2, 0, 1, false)
	y = b.relu("features.4", b.conv("features.3", y, convArgs{in: 64, out: 192, k: 5, pad: 2, bias: true}))
	y = b.maxPool("features.5", y, 3, 2, 0, false)
	h = convOut(h, 3, 2, 0, 1, false)
	y = b.relu("features.7", b.conv("features.6", y, convArgs{in: 192, out: 384, k: 3, pad: 1, bias: true}))
	y = b.relu("features.9", b.conv("features.8", y, convArgs{in: 384, out: 256, k: 3, pad: 1, bias: true}))
	y = b.relu("features.11", b.conv("features.10", y, convArgs{in: 256, out: 256, k: 3, pad: 1, bias: true}))
	y = b.maxPool("features.12", y, 3, 2, 0, false)
	h = convOut(h, 3, 2, 0, 1, false)
	if h < 1 {
		panic(fmt.Sprintf("a %d-pixel image is too small for AlexNet", size))
	}
	y = b.adaptiveAvgPool("avgpool", y, 256, h, 6)
	y = b.node("flatten", &ir.Flatten{Axis: 1}, y)
	y = b.relu("classifier.2", b.linear("classifier.1", y, 256*36, 4096))
	y = b.relu("classifier.5", b.linear("classifier.4", y, 4096, 4096))
	return b.linear("classifier.6", y, 4096, c.Classes)
}

func (c VGGConfig) build(b *builder, x *ir.Value, size int) *ir.Value {
	y, in, h, i := x, 3, size, 0
	for _, l := range c.Layers {
		if l == 0 {
			y = b.maxPool(fmt.Sprintf("features.%d", i), y, 2, 2, 0, false)
			h = convOut(h, 2, 2, 0, 1, false)
			i++
			continue
		}
		y = b.conv(fmt.Sprintf("features.%d", i), y, convArgs{in: in, out: l, k: 3, pad: 1, bias: true})
		i++
		if c.BatchNorm {
			y = b.bn(fmt.Sprintf("features.%d", i), y, l, 1e-5)
			i++
		}
		y = b.relu(fmt.Sprintf("features.%d", i), y)
		i++
		in = l
	}
	if h < 1 {
		panic(fmt.Sprintf("a %d-pixel image is too small for VGG", size))
	}
	y = b.adaptiveAvgPool("avgpool", y, in, h, 7)
	y = b.node("flatten", &ir.Flatten{Axis: 1}, y)
	y = b.relu("classifier.1", b.linear("classifier.0", y, in*49, 4096))
	y = b.relu("classifier.4", b.linear("classifier.3", y, 4096, 4096))
	return b.linear("classifier.6", y, 4096, c.Classes)
}
