package onnx

import (
	"reflect"
	"strings"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/onnxpb"
	"goinfer/internal/tensor"
)

// TestLegacyBroadcast: opset 6's broadcast=1 with axis aligns B with A
// from axis on; PRelu-6's 1-D slope applies along the channels.
func TestLegacyBroadcast(t *testing.T) {
	ints := func(name string, v int64) *onnxpb.AttributeProto {
		return &onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INT, I: v}
	}
	// x [1,2,1,2] = 1,2,3,4; per channel 10, 20.
	x := arr(tensor.Float32, tensor.Shape{1, 2, 1, 2}, 1, 2, -3, 4)
	for _, c := range []struct {
		name   string
		nodes  []*onnxpb.NodeProto
		inits  []*onnxpb.TensorProto
		inputs []*onnxpb.ValueInfoProto
		feed   map[string]*ir.Array
		want   []float64
		err    string
	}{
		{name: "const_axis1", nodes: []*onnxpb.NodeProto{node("Add", "add", []string{"x", "b"}, []string{"y"}, ints("broadcast", 1), ints("axis", 1))},
			inits: []*onnxpb.TensorProto{floatInit("b", []int64{2}, 10, 20)}, want: []float64{11, 12, 17, 24}},
		{name: "input_axis1", nodes: []*onnxpb.NodeProto{node("Mul", "mul", []string{"x", "s"}, []string{"y"}, ints("broadcast", 1), ints("axis", 1))},
			inputs: []*onnxpb.ValueInfoProto{tinfo("s", 1, 2)}, feed: map[string]*ir.Array{"s": arr(tensor.Float32, tensor.Shape{2}, 10, 20)},
			want: []float64{10, 20, -60, 80}},
		{name: "computed_axis1", nodes: []*onnxpb.NodeProto{
			node("Neg", "neg", []string{"x"}, []string{"nx"}),
			node("Sub", "sub", []string{"nx", "b"}, []string{"y"}, ints("broadcast", 1), ints("axis", 1)),
		}, inits: []*onnxpb.TensorProto{floatInit("b", []int64{2}, 10, 20)}, want: []float64{-11, -12, -17, -24}},
		{name: "numpy_suffix", nodes: []*onnxpb.NodeProto{node("Add", "add", []string{"x", "b"}, []string{"y"}, ints("broadcast", 1))},
			inits: []*onnxpb.TensorProto{floatInit("b", []int64{2}, 10, 20)}, want: []float64{11, 22, 7, 24}},
		{name: "prelu_channels", nodes: []*onnxpb.NodeProto{node("PRelu", "pr", []string{"x", "slope"}, []string{"y"})},
			inits: []*onnxpb.TensorProto{floatInit("slope", []int64{2}, 0.5, 0.25)}, want: []float64{1, 2, -0.75, 4}},
		{name: "does_not_fit", nodes: []*onnxpb.NodeProto{node("Add", "add", []string{"x", "b"}, []string{"y"}, ints("broadcast", 1), ints("axis", 4))},
			inits: []*onnxpb.TensorProto{floatInit("b", []int64{2}, 10, 20)}, err: `node 0 "add" (Add): operand B [2] does not fit A's 4 dimensions at axis 4`},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := model(6, &onnxpb.GraphProto{Node: c.nodes, Initializer: c.inits,
				Input:  append([]*onnxpb.ValueInfoProto{tinfo("x", 1, 1, 2, 1, 2)}, c.inputs...),
				Output: []*onnxpb.ValueInfoProto{tinfo("y", 1, 1, 2, 1, 2)}})
			g, err := Decode(marshal(t, m))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			feed := map[string]*ir.Array{"x": x}
			for k, v := range c.feed {
				feed[k] = v
			}
			out := eval(t, g, feed)
			if !reflect.DeepEqual(out[0].Data, c.want) {
				t.Errorf("got %v, want %v", out[0].Data, c.want)
			}
		})
	}
}
