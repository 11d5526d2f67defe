package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"goinfer/internal/ir"
	"goinfer/internal/onnxpb"
	"goinfer/internal/tensor"
)

func TestModelInspectONNX(t *testing.T) {
	code, stdout, stderr := goinfer(t, "model", "inspect", goldenDir+"tiny_cnn.onnx")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// tools/golden/make_onnx_fixture.py's TinyCNN, batch norms folded:
	// stem 8x27+8, depthwise 8x9+8, pointwise 16x8+16, fc 5x16+5.
	// MACs at batch 1: stem 8*8*8 outputs x 27, depthwise 8*8*8 x 9,
	// pointwise 16*4*4 x 8, fc 5 x 16.
	for _, w := range []string{
		"format:      onnx (IR version 7)",
		"producer:    pytorch 1.13.0",
		"opsets:      ai.onnx 13",
		"inputs:      image float32[N,3,16,16]",
		"outputs:     logits float32[N,5]",
		"parameters:  533 (in 8 float32 tensors)",
		"nodes:       10: Conv 3, Relu 3, Flatten 1, Gemm 1, GlobalAveragePool 1, MaxPool 1",
		"compute:     20,560 MACs at batch 1",
	} {
		if !strings.Contains(stdout, w) {
			t.Errorf("output lacks %q:\n%s", w, stdout)
		}
	}
}

func TestModelInspectONNXErrors(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile(goldenDir + "tiny_cnn.onnx")
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.onnx")
	if err := os.WriteFile(truncated, raw[:len(raw)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name string, nodes ...*onnxpb.NodeProto) string {
		vi := func(n string) *onnxpb.ValueInfoProto {
			return &onnxpb.ValueInfoProto{Name: n, Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
				TensorType: &onnxpb.TypeProto_Tensor{ElemType: 1, Shape: &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{
					{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 4}}}}}}}}
		}
		b, err := proto.Marshal(&onnxpb.ModelProto{IrVersion: 8, OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: 17}},
			Graph: &onnxpb.GraphProto{Node: nodes, Input: []*onnxpb.ValueInfoProto{vi("x")}, Output: []*onnxpb.ValueInfoProto{vi("y")}}})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	n := func(op, name string, in, out []string) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{OpType: op, Name: name, Input: in, Output: out}
	}
	unsupported := write("unsupported.onnx", n("Relu", "r", []string{"x"}, []string{"a"}), n("Foo", "f1", []string{"a"}, []string{"b"}),
		n("Bar", "b1", []string{"b"}, []string{"c"}), n("Foo", "f2", []string{"c"}, []string{"y"}))
	cycle := write("cycle.onnx", n("Add", "a", []string{"x", "c"}, []string{"b"}), n("Relu", "r", []string{"b"}, []string{"c"}),
		n("Neg", "n", []string{"c"}, []string{"y"}))
	dangling := write("dangling.onnx", n("Add", "a", []string{"x", "ghost"}, []string{"y"}))
	for _, tt := range []struct {
		name string
		file string
		want string
	}{
		{"truncated", truncated, "truncated.onnx: onnx: not a valid ONNX model"},
		{"missing", filepath.Join(dir, "gone.onnx"), "no such file"},
		{"unsupported", unsupported, `2 op type(s) goinfer does not support: Bar (first at node 2 "b1", 1 node(s)); Foo (first at node 1 "f1", 2 node(s))`},
		{"cycle", cycle, `cycle through node`},
		{"dangling", dangling, `node 0 "a" (Add): input "ghost" is not a graph input, an initializer or any node's output`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := goinfer(t, "model", "inspect", tt.file)
			if code != 1 || !strings.Contains(stderr, tt.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("exit %d, stderr %q; want exit 1 and one line with %q", code, stderr, tt.want)
			}
		})
	}
}

// TestReadNetGraphDynamicImageSize: an ONNX export with symbolic height
// and width takes the size the command asks for (224 by default).
func TestReadNetGraphDynamicImageSize(t *testing.T) {
	dim := func(v any) *onnxpb.TensorShapeProto_Dimension {
		if s, ok := v.(string); ok {
			return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: s}}
		}
		return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(v.(int))}}
	}
	vi := func(name string, dims ...any) *onnxpb.ValueInfoProto {
		shape := &onnxpb.TensorShapeProto{}
		for _, d := range dims {
			shape.Dim = append(shape.Dim, dim(d))
		}
		return &onnxpb.ValueInfoProto{Name: name, Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
			TensorType: &onnxpb.TypeProto_Tensor{ElemType: 1, Shape: shape}}}}
	}
	m := &onnxpb.ModelProto{IrVersion: 8, OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: 17}}, Graph: &onnxpb.GraphProto{
		Node: []*onnxpb.NodeProto{
			{OpType: "Conv", Input: []string{"image", "w"}, Output: []string{"c"}, Attribute: []*onnxpb.AttributeProto{
				{Name: "pads", Type: onnxpb.AttributeProto_INTS, Ints: []int64{1, 1, 1, 1}}}},
			{OpType: "GlobalAveragePool", Input: []string{"c"}, Output: []string{"p"}},
			{OpType: "Flatten", Input: []string{"p"}, Output: []string{"logits"}},
		},
		Initializer: []*onnxpb.TensorProto{{Name: "w", Dims: []int64{2, 3, 3, 3}, DataType: 1, FloatData: make([]float32, 54)}},
		Input:       []*onnxpb.ValueInfoProto{vi("image", "batch", 3, "height", "width")},
		Output:      []*onnxpb.ValueInfoProto{vi("logits", "batch", 2)},
	}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dyn.onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := goinfer(t, "model", "inspect", path)
	if code != 0 || !strings.Contains(stdout, "inputs:      image float32[N,3,224,224]") || !strings.Contains(stdout, `symbolic dimensions 0 (batch), 2 (height), 3 (width)`) {
		t.Errorf("inspect: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	for _, c := range []struct{ size, want int }{{32, 32}, {0, 224}} {
		g, err := readNetGraph(context.Background(), source{Path: path}, c.size)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.general.Inputs[0].Type.Shape; !got.Equal(tensor.Shape{ir.Dynamic, 3, c.want, c.want}) {
			t.Errorf("size %d: input shape %v, want [N 3 %d %d]", c.size, got, c.want, c.want)
		}
	}
}
