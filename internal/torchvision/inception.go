package torchvision

import (
	"goinfer/internal/checkpoint"
	"goinfer/internal/ir"
)

// InceptionV3Config is torchvision's Inception3.
type InceptionV3Config struct {
	// TransformInput: see GoogLeNetConfig.
	TransformInput bool
	// AuxLogits: the state dict holds the auxiliary classifier (torchvision
	// keeps it in inception_v3), which inference does not read.
	AuxLogits bool
	Classes   int
}

func init() {
	register("inception_v3", "fc.weight", func(classes int) Config {
		return InceptionV3Config{TransformInput: true, AuxLogits: true, Classes: classes}
	})
}

// Name implements Config.
func (c InceptionV3Config) Name() string { return "inception_v3" }

func (c InceptionV3Config) adapt(sd *checkpoint.StateDict) Config {
	_, c.AuxLogits = sd.Get("AuxLogits.fc.weight")
	return c
}

// bconv is a BasicConv2d with a square kernel.
func (b *builder) bconv(prefix string, x *ir.Value, in, out, k, stride, pad int) *ir.Value {
	return b.basicConv(prefix, x, in, out, k, k, stride, pad, pad)
}

func (c InceptionV3Config) build(b *builder, x *ir.Value, _ int) *ir.Value {
	if c.TransformInput {
		x = b.transformInput(x)
	}
	cat := func(name string, v ...*ir.Value) *ir.Value { return b.node(name, &ir.Concat{Axis: 1}, v...) }
	y := b.bconv("Conv2d_1a_3x3", x, 3, 32, 3, 2, 0)
	y = b.bconv("Conv2d_2a_3x3", y, 32, 32, 3, 1, 0)
	y = b.bconv("Conv2d_2b_3x3", y, 32, 64, 3, 1, 1)
	y = b.maxPool("maxpool1", y, 3, 2, 0, false)
	y = b.bconv("Conv2d_3b_1x1", y, 64, 80, 1, 1, 0)
	y = b.bconv("Conv2d_4a_3x3", y, 80, 192, 3, 1, 0)
	y = b.maxPool("maxpool2", y, 3, 2, 0, false)
	a := func(p string, y *ir.Value, in, pool int) *ir.Value {
		b1 := b.bconv(p+".branch1x1", y, in, 64, 1, 1, 0)
		b5 := b.bconv(p+".branch5x5_1", y, in, 48, 1, 1, 0)
		b5 = b.bconv(p+".branch5x5_2", b5, 48, 64, 5, 1, 2)
		b3 := b.bconv(p+".branch3x3dbl_1", y, in, 64, 1, 1, 0)
		b3 = b.bconv(p+".branch3x3dbl_2", b3, 64, 96, 3, 1, 1)
		b3 = b.bconv(p+".branch3x3dbl_3", b3, 96, 96, 3, 1, 1)
		bp := b.bconv(p+".branch_pool", b.avgPool(p+".avg_pool", y, 3, 1, 1, false), in, pool, 1, 1, 0)
		return cat(p, b1, b5, b3, bp)
	}
	y = a("Mixed_5b", y, 192, 32)
	y = a("Mixed_5c", y, 256, 64)
	y = a("Mixed_5d", y, 288, 64)
	// Mixed_6a (InceptionB).
	b3 := b.bconv("Mixed_6a.branch3x3", y, 288, 384, 3, 2, 0)
	bd := b.bconv("Mixed_6a.branch3x3dbl_1", y, 288, 64, 1, 1, 0)
	bd = b.bconv("Mixed_6a.branch3x3dbl_2", bd, 64, 96, 3, 1, 1)
	bd = b.bconv("Mixed_6a.branch3x3dbl_3", bd, 96, 96, 3, 2, 0)
	y = cat("Mixed_6a", b3, bd, b.maxPool("Mixed_6a.max_pool", y, 3, 2, 0, false))
	cc := func(p string, y *ir.Value, c7 int) *ir.Value {
		b1 := b.bconv(p+".branch1x1", y, 768, 192, 1, 1, 0)
		b7 := b.bconv(p+".branch7x7_1", y, 768, c7, 1, 1, 0)
		b7 = b.basicConv(p+".branch7x7_2", b7, c7, c7, 1, 7, 1, 0, 3)
		b7 = b.basicConv(p+".branch7x7_3", b7, c7, 192, 7, 1, 1, 3, 0)
		bd := b.bconv(p+".branch7x7dbl_1", y, 768, c7, 1, 1, 0)
		bd = b.basicConv(p+".branch7x7dbl_2", bd, c7, c7, 7, 1, 1, 3, 0)
		bd = b.basicConv(p+".branch7x7dbl_3", bd, c7, c7, 1, 7, 1, 0, 3)
		bd = b.basicConv(p+".branch7x7dbl_4", bd, c7, c7, 7, 1, 1, 3, 0)
		bd = b.basicConv(p+".branch7x7dbl_5", bd, c7, 192, 1, 7, 1, 0, 3)
		bp := b.bconv(p+".branch_pool", b.avgPool(p+".avg_pool", y, 3, 1, 1, false), 768, 192, 1, 1, 0)
		return cat(p, b1, b7, bd, bp)
	}
	y = cc("Mixed_6b", y, 128)
	y = cc("Mixed_6c", y, 160)
	y = cc("Mixed_6d", y, 160)
	y = cc("Mixed_6e", y, 192)
	if c.AuxLogits {
		b.ignoredBasicConv("AuxLogits.conv0", 768, 128, 1)
		b.ignoredBasicConv("AuxLogits.conv1", 128, 768, 5)
		b.ignored("AuxLogits.fc.weight", c.Classes, 768)
		b.ignored("AuxLogits.fc.bias", c.Classes)
	}
	// Mixed_7a (InceptionD).
	b3 = b.bconv("Mixed_7a.branch3x3_1", y, 768, 192, 1, 1, 0)
	b3 = b.bconv("Mixed_7a.branch3x3_2", b3, 192, 320, 3, 2, 0)
	b7 := b.bconv("Mixed_7a.branch7x7x3_1", y, 768, 192, 1, 1, 0)
	b7 = b.basicConv("Mixed_7a.branch7x7x3_2", b7, 192, 192, 1, 7, 1, 0, 3)
	b7 = b.basicConv("Mixed_7a.branch7x7x3_3", b7, 192, 192, 7, 1, 1, 3, 0)
	b7 = b.bconv("Mixed_7a.branch7x7x3_4", b7, 192, 192, 3, 2, 0)
	y = cat("Mixed_7a", b3, b7, b.maxPool("Mixed_7a.max_pool", y, 3, 2, 0, false))
	e := func(p string, y *ir.Value, in int) *ir.Value {
		b1 := b.bconv(p+".branch1x1", y, in, 320, 1, 1, 0)
		b3 := b.bconv(p+".branch3x3_1", y, in, 384, 1, 1, 0)
		b3 = cat(p+".branch3x3", b.basicConv(p+".branch3x3_2a", b3, 384, 384, 1, 3, 1, 0, 1), b.basicConv(p+".branch3x3_2b", b3, 384, 384, 3, 1, 1, 1, 0))
		bd := b.bconv(p+".branch3x3dbl_1", y, in, 448, 1, 1, 0)
		bd = b.bconv(p+".branch3x3dbl_2", bd, 448, 384, 3, 1, 1)
		bd = cat(p+".branch3x3dbl", b.basicConv(p+".branch3x3dbl_3a", bd, 384, 384, 1, 3, 1, 0, 1), b.basicConv(p+".branch3x3dbl_3b", bd, 384, 384, 3, 1, 1, 1, 0))
		bp := b.bconv(p+".branch_pool", b.avgPool(p+".avg_pool", y, 3, 1, 1, false), in, 192, 1, 1, 0)
		return cat(p, b1, b3, bd, bp)
	}
	y = e("Mixed_7b", y, 1280)
	y = e("Mixed_7c", y, 2048)
	y = b.poolFlatten("avgpool", y)
	return b.linear("fc", y, 2048, c.Classes)
}
