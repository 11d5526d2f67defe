package ir

import (
	"strings"
	"testing"

	"goinfer/internal/tensor"
)

func TestMACs(t *testing.T) {
	cst := func(name string, shape ...int) *Value {
		c := tensor.New(tensor.Float32, shape...)
		return &Value{Name: name, Const: c, Type: Type{DType: tensor.Float32, Shape: c.Shape.Clone()}}
	}
	g := &Graph{Name: "macs"}
	x := &Value{Name: "x", Type: Type{DType: tensor.Float32, Shape: tensor.Shape{Dynamic, 4, 8, 8}}}
	g.Inputs = []*Value{x}
	// 3x3 convolution 4 -> 6 channels, pad 1: 6*8*8 outputs of 4*9 taps.
	c1 := node(g, "conv", &Conv{Pads: []int{1, 1, 1, 1}}, x, cst("w1", 6, 4, 3, 3))
	// Depthwise 3x3, stride 2: 6*4*4 outputs of 1*9 taps.
	c2 := node(g, "dw", &Conv{Group: 6, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}, c1, cst("w2", 6, 1, 3, 3))
	// ConvTranspose 6 -> 2, 2x2 kernel: each of 6*4*4 inputs feeds 2*4.
	c3 := node(g, "up", &ConvTranspose{Strides: []int{2, 2}}, c2, cst("w3", 6, 2, 2, 2))
	f := node(g, "flat", &Flatten{Axis: 1}, c3) // [N, 2*8*8]
	gm := node(g, "fc", &Gemm{Alpha: 1, Beta: 1, TransB: true}, f, cst("wf", 5, 128))
	r := node(g, "r", &Reshape{}, gm, &Value{Name: "s", Const: tensorOfInts(-1, 1, 5), Type: Type{DType: tensor.Int64, Shape: tensor.Shape{3}}})
	mm := node(g, "mm", &MatMul{}, r, cst("wm", 5, 3)) // [N,1,5] x [5,3]
	g.Outputs = []*Value{mm}

	want := func(batch int64) int64 {
		return batch * (6*8*8*4*9 + 6*4*4*9 + 6*4*4*2*4 + 128*5 + 5*3)
	}
	for _, batch := range []int{1, 3} {
		b, err := Bind(g, batch)
		if err != nil {
			t.Fatal(err)
		}
		got, err := MACs(b)
		if err != nil {
			t.Fatal(err)
		}
		if got != want(int64(batch)) {
			t.Errorf("batch %d: MACs %d, want %d", batch, got, want(int64(batch)))
		}
	}
	if _, err := MACs(g); err == nil || !strings.Contains(err.Error(), "bind the graph first") {
		t.Errorf("unbound graph: got %v", err)
	}
}

func tensorOfInts(v ...int64) *tensor.Tensor {
	t := tensor.New(tensor.Int64, len(v))
	for i, x := range v {
		for j := 0; j < 8; j++ {
			t.Data[8*i+j] = byte(uint64(x) >> (8 * j))
		}
	}
	return t
}
