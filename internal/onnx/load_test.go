package onnx

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"goinfer/internal/ir"
	"goinfer/internal/onnxpb"
	"goinfer/internal/tensor"
)

// The helpers build ModelProtos in Go, so that each test states exactly the
// structure it checks.

func tinfo(name string, elem int32, dims ...any) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		switch d := d.(type) {
		case int:
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
		case string:
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}})
		}
	}
	return &onnxpb.ValueInfoProto{Name: name, Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: elem, Shape: shape}}}}
}

func node(op, name string, in, out []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: op, Name: name, Input: in, Output: out, Attribute: attrs}
}

func floatInit(name string, dims []int64, v ...float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: name, Dims: dims, DataType: 1, FloatData: v}
}

func model(opset int64, g *onnxpb.GraphProto) *onnxpb.ModelProto {
	return &onnxpb.ModelProto{IrVersion: 8, ProducerName: "goinfer-test", ProducerVersion: "1",
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: "", Version: opset}}, Graph: g}
}

func marshal(t testing.TB, m *onnxpb.ModelProto) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// addModel is y = x + w with w a [3] initializer, x [N,3].
func addModel() *onnxpb.ModelProto {
	return model(13, &onnxpb.GraphProto{
		Name:        "add",
		Node:        []*onnxpb.NodeProto{node("Add", "add", []string{"x", "w"}, []string{"y"})},
		Initializer: []*onnxpb.TensorProto{floatInit("w", []int64{3}, 1, 2, 3)},
		Input:       []*onnxpb.ValueInfoProto{tinfo("x", 1, "N", 3)},
		Output:      []*onnxpb.ValueInfoProto{tinfo("y", 1, "N", 3)},
	})
}

func eval(t *testing.T, g *ir.Graph, in map[string]*ir.Array) []*ir.Array {
	t.Helper()
	out, err := ir.EvaluateBound(context.Background(), g, in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func arr(dt tensor.DType, shape tensor.Shape, v ...float64) *ir.Array {
	return &ir.Array{DType: dt, Shape: shape, Data: v}
}

func TestDecodeAdd(t *testing.T) {
	g, err := Decode(marshal(t, addModel()))
	if err != nil {
		t.Fatal(err)
	}
	if g.Opset != 13 || g.Meta["producer"] != "goinfer-test" || g.Meta["opsets"] != "ai.onnx 13" {
		t.Errorf("opset %d, meta %v", g.Opset, g.Meta)
	}
	if len(g.Inputs) != 1 || !g.Inputs[0].Type.Shape.Equal(tensor.Shape{ir.Dynamic, 3}) {
		t.Fatalf("inputs %v", g.Inputs)
	}
	out := eval(t, g, map[string]*ir.Array{"x": arr(tensor.Float32, tensor.Shape{2, 3}, 1, 1, 1, 2, 2, 2)})
	if want := []float64{2, 3, 4, 3, 4, 5}; !reflect.DeepEqual(out[0].Data, want) {
		t.Errorf("got %v, want %v", out[0].Data, want)
	}
	ins, outs, err := ir.Signature(g)
	if err != nil {
		t.Fatal(err)
	}
	if !ins[0].Type.Shape.Equal(tensor.Shape{ir.Dynamic, 3}) || !outs[0].Type.Shape.Equal(tensor.Shape{ir.Dynamic, 3}) {
		t.Errorf("signature %v -> %v", ins, outs)
	}
}

func le16s(v ...uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

// TestInitializerEncodings reads one initializer per dtype, from raw_data
// and from its typed field, through an Identity node.
func TestInitializerEncodings(t *testing.T) {
	f32raw := make([]byte, 8)
	binary.LittleEndian.PutUint32(f32raw, math.Float32bits(1.5))
	binary.LittleEndian.PutUint32(f32raw[4:], math.Float32bits(-2))
	f64raw := make([]byte, 16)
	binary.LittleEndian.PutUint64(f64raw, math.Float64bits(0.1))
	binary.LittleEndian.PutUint64(f64raw[8:], math.Float64bits(-3))
	i64raw := make([]byte, 16)
	binary.LittleEndian.PutUint64(i64raw, uint64(1<<40))
	binary.LittleEndian.PutUint64(i64raw[8:], uint64(0xffffffffffffffff))
	h1, h2 := tensor.Float32ToF16(0.5), tensor.Float32ToF16(-1.25)
	b1, b2 := tensor.Float32ToBF16(3), tensor.Float32ToBF16(-0.5)
	for _, c := range []struct {
		name string
		tp   *onnxpb.TensorProto
		dt   tensor.DType
		want []float64
	}{
		{"float_data", &onnxpb.TensorProto{DataType: 1, FloatData: []float32{1.5, -2}}, tensor.Float32, []float64{1.5, -2}},
		{"float_raw", &onnxpb.TensorProto{DataType: 1, RawData: f32raw}, tensor.Float32, []float64{1.5, -2}},
		{"double_data", &onnxpb.TensorProto{DataType: 11, DoubleData: []float64{0.1, -3}}, tensor.Float64, []float64{0.1, -3}},
		{"double_raw", &onnxpb.TensorProto{DataType: 11, RawData: f64raw}, tensor.Float64, []float64{0.1, -3}},
		{"int64_data", &onnxpb.TensorProto{DataType: 7, Int64Data: []int64{1 << 40, -1}}, tensor.Int64, []float64{1 << 40, -1}},
		{"int64_raw", &onnxpb.TensorProto{DataType: 7, RawData: i64raw}, tensor.Int64, []float64{1 << 40, -1}},
		{"int32_data", &onnxpb.TensorProto{DataType: 6, Int32Data: []int32{-7, 9}}, tensor.Int32, []float64{-7, 9}},
		{"uint8_data", &onnxpb.TensorProto{DataType: 2, Int32Data: []int32{255, 3}}, tensor.Uint8, []float64{255, 3}},
		{"int8_data", &onnxpb.TensorProto{DataType: 3, Int32Data: []int32{-128, 5}}, tensor.Int8, []float64{-128, 5}},
		{"int8_raw", &onnxpb.TensorProto{DataType: 3, RawData: []byte{0x80, 5}}, tensor.Int8, []float64{-128, 5}},
		{"bool_data", &onnxpb.TensorProto{DataType: 9, Int32Data: []int32{1, 0}}, tensor.Bool, []float64{1, 0}},
		{"fp16_data", &onnxpb.TensorProto{DataType: 10, Int32Data: []int32{int32(h1), int32(h2)}}, tensor.Float16, []float64{0.5, -1.25}},
		{"fp16_raw", &onnxpb.TensorProto{DataType: 10, RawData: le16s(h1, h2)}, tensor.Float16, []float64{0.5, -1.25}},
		{"bf16_data", &onnxpb.TensorProto{DataType: 16, Int32Data: []int32{int32(b1), int32(b2)}}, tensor.BFloat16, []float64{3, -0.5}},
		{"bf16_raw", &onnxpb.TensorProto{DataType: 16, RawData: le16s(b1, b2)}, tensor.BFloat16, []float64{3, -0.5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.tp.Name, c.tp.Dims = "w", []int64{2}
			m := model(13, &onnxpb.GraphProto{
				Node:        []*onnxpb.NodeProto{node("Identity", "id", []string{"w"}, []string{"y"})},
				Initializer: []*onnxpb.TensorProto{c.tp},
				Output:      []*onnxpb.ValueInfoProto{tinfo("y", c.tp.DataType, 2)},
			})
			g, err := Decode(marshal(t, m))
			if err != nil {
				t.Fatal(err)
			}
			out := eval(t, g, nil)
			if out[0].DType != c.dt || !reflect.DeepEqual(out[0].Data, c.want) {
				t.Errorf("got %s %v, want %s %v", out[0].DType, out[0].Data, c.dt, c.want)
			}
		})
	}
}

func TestTensorSizeChecks(t *testing.T) {
	for _, c := range []struct {
		name string
		tp   *onnxpb.TensorProto
		err  string
	}{
		{"short_raw", &onnxpb.TensorProto{Dims: []int64{4}, DataType: 1, RawData: make([]byte, 12)}, "raw_data holds 12 bytes"},
		{"few_floats", &onnxpb.TensorProto{Dims: []int64{4}, DataType: 1, FloatData: []float32{1}}, "needs 4 elements, the message holds 1"},
		// A huge header with no data must fail before allocating.
		{"huge_no_data", &onnxpb.TensorProto{Dims: []int64{1 << 20, 1 << 19}, DataType: 1}, "needs 549755813888 elements"},
		{"negative_dim", &onnxpb.TensorProto{Dims: []int64{-1}, DataType: 1}, "dimension 0 is -1"},
		{"overflow", &onnxpb.TensorProto{Dims: []int64{1 << 30, 1 << 30, 1 << 30}, DataType: 1}, "more than"},
		{"string", &onnxpb.TensorProto{Dims: []int64{1}, DataType: 8, StringData: [][]byte{[]byte("a")}}, "STRING"},
		{"undefined", &onnxpb.TensorProto{Dims: []int64{1}, DataType: 0}, "invalid ONNX data type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.tp.Name = "w"
			b, err := proto.Marshal(c.tp)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = DecodeTensor(b)
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), `"w"`) {
				t.Errorf("got %v, want an error naming the tensor and containing %q", err, c.err)
			}
		})
	}
}

// externalModel is y = w with w stored in location.
func externalModel(location string, extra ...*onnxpb.StringStringEntryProto) *onnxpb.ModelProto {
	w := &onnxpb.TensorProto{Name: "w", Dims: []int64{2}, DataType: 1, DataLocation: onnxpb.TensorProto_EXTERNAL,
		ExternalData: append([]*onnxpb.StringStringEntryProto{{Key: "location", Value: location}}, extra...)}
	return model(13, &onnxpb.GraphProto{
		Node:        []*onnxpb.NodeProto{node("Identity", "id", []string{"w"}, []string{"y"})},
		Initializer: []*onnxpb.TensorProto{w},
		Output:      []*onnxpb.ValueInfoProto{tinfo("y", 1, 2)},
	})
}

func TestExternalData(t *testing.T) {
	dir := t.TempDir()
	modelDir := filepath.Join(dir, "model")
	if err := os.Mkdir(modelDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// 4 bytes of padding, then 1.5 and -2 as float32.
	data := append([]byte{9, 9, 9, 9}, tensor.F32Bytes([]float32{1.5, -2})...)
	for _, p := range []string{filepath.Join(modelDir, "w.bin"), filepath.Join(dir, "outside.bin")} {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "outside.bin"), filepath.Join(modelDir, "link.bin")); err != nil {
		t.Fatal(err)
	}
	kv := func(k, v string) *onnxpb.StringStringEntryProto {
		return &onnxpb.StringStringEntryProto{Key: k, Value: v}
	}
	write := func(t *testing.T, m *onnxpb.ModelProto) string {
		p := filepath.Join(modelDir, "m.onnx")
		if err := os.WriteFile(p, marshal(t, m), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("ok", func(t *testing.T) {
		g, err := Load(write(t, externalModel("w.bin", kv("offset", "4"), kv("length", "8"))))
		if err != nil {
			t.Fatal(err)
		}
		if out := eval(t, g, nil); !reflect.DeepEqual(out[0].Data, []float64{1.5, -2}) {
			t.Errorf("got %v", out[0].Data)
		}
	})
	for _, c := range []struct {
		name string
		m    *onnxpb.ModelProto
		err  string
	}{
		{"escape", externalModel("../outside.bin", kv("offset", "4")), "escapes"},
		{"absolute", externalModel(filepath.Join(dir, "outside.bin"), kv("offset", "4")), "outside.bin"},
		{"symlink_out", externalModel("link.bin", kv("offset", "4")), "link.bin"},
		{"missing", externalModel("nope.bin"), `external data file "nope.bin"`},
		{"wrong_length", externalModel("w.bin"), "12 bytes long, the tensor needs 8"},
		{"past_end", externalModel("w.bin", kv("offset", "8"), kv("length", "8")), "run past its end"},
		{"bad_offset", externalModel("w.bin", kv("offset", "-3")), "not a non-negative integer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(write(t, c.m))
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("got %v, want an error containing %q", err, c.err)
			}
		})
	}
	t.Run("no_dir", func(t *testing.T) {
		_, err := Decode(marshal(t, externalModel("w.bin")))
		if err == nil || !strings.Contains(err.Error(), "WithExternalDataDir") {
			t.Errorf("got %v", err)
		}
	})
}

func TestOpsetsAndDomains(t *testing.T) {
	for _, c := range []struct {
		name        string
		m           func() *onnxpb.ModelProto
		unsupported bool
		err         string
	}{
		{"too_old", func() *onnxpb.ModelProto { m := addModel(); m.OpsetImport[0].Version = 5; return m }, true, "opset 5"},
		{"too_new", func() *onnxpb.ModelProto { m := addModel(); m.OpsetImport[0].Version = MaxOpset + 1; return m }, true, "supports opsets 6 to 23"},
		{"no_imports", func() *onnxpb.ModelProto { m := addModel(); m.OpsetImport = nil; return m }, false, "no opset_import"},
		{"no_default_import", func() *onnxpb.ModelProto {
			m := addModel()
			m.OpsetImport[0].Domain = "com.example"
			return m
		}, false, `uses domain "" (ai.onnx, ONNX's default), which the model does not import`},
		{"unimported_domain", func() *onnxpb.ModelProto {
			m := addModel()
			m.Graph.Node[0].Domain = "com.example"
			return m
		}, false, `domain "com.example", which the model does not import`},
		{"custom_domain", func() *onnxpb.ModelProto {
			m := addModel()
			m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: "com.microsoft", Version: 1})
			m.Graph.Node[0].Domain = "com.microsoft"
			return m
		}, true, `com.microsoft.Add (first at node 0 "add"`},
		{"ai_onnx_spelling", func() *onnxpb.ModelProto {
			m := addModel()
			m.OpsetImport[0].Domain = "ai.onnx"
			m.Graph.Node[0].Domain = "ai.onnx"
			return m
		}, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(marshal(t, c.m()))
			if c.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) || errors.Is(err, ErrUnsupportedModel) != c.unsupported {
				t.Errorf("got %v, want an error containing %q (unsupported %v)", err, c.err, c.unsupported)
			}
		})
	}
}

func TestUnsupportedOpsListed(t *testing.T) {
	m := model(17, &onnxpb.GraphProto{
		Node: []*onnxpb.NodeProto{
			node("Relu", "r", []string{"x"}, []string{"a"}),
			node("FancyOp", "f1", []string{"a"}, []string{"b"}),
			node("Loop", "l1", []string{"b"}, []string{"c"}),
			node("FancyOp", "f2", []string{"c"}, []string{"y"}),
		},
		Input:  []*onnxpb.ValueInfoProto{tinfo("x", 1, 2)},
		Output: []*onnxpb.ValueInfoProto{tinfo("y", 1, 2)},
	})
	_, err := Decode(marshal(t, m))
	var ue *UnsupportedOpsError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v, want an UnsupportedOpsError", err)
	}
	want := []UnsupportedOp{
		{OpType: "FancyOp", Node: "f1", Index: 1, Count: 2},
		{OpType: "Loop", Node: "l1", Index: 2, Count: 1},
	}
	if !reflect.DeepEqual(ue.Ops, want) {
		t.Errorf("got %+v, want %+v", ue.Ops, want)
	}
	if !errors.Is(err, ErrUnsupportedModel) || !strings.Contains(err.Error(), `FancyOp (first at node 1 "f1", 2 node(s)); Loop`) {
		t.Errorf("message %q", err)
	}
}

func TestGraphStructure(t *testing.T) {
	in := []*onnxpb.ValueInfoProto{tinfo("x", 1, 2, 3)}
	out := []*onnxpb.ValueInfoProto{tinfo("y", 1, 2, 3)}
	for _, c := range []struct {
		name  string
		nodes []*onnxpb.NodeProto
		err   string
	}{
		{"cycle", []*onnxpb.NodeProto{
			node("Add", "a", []string{"x", "c"}, []string{"b"}),
			node("Relu", "r", []string{"b"}, []string{"c"}),
			node("Identity", "i", []string{"c"}, []string{"y"}),
		}, "cycle through node"},
		{"self_loop", []*onnxpb.NodeProto{node("Add", "a", []string{"x", "y"}, []string{"y"})}, `cycle through node 0 "a" (Add)`},
		{"dangling", []*onnxpb.NodeProto{node("Add", "a", []string{"x", "ghost"}, []string{"y"})}, `node 0 "a" (Add): input "ghost" is not a graph input`},
		{"twice", []*onnxpb.NodeProto{
			node("Relu", "r1", []string{"x"}, []string{"y"}),
			node("Relu", "r2", []string{"x"}, []string{"y"}),
		}, `output "y" is also produced by node 0 "r1"`},
		{"redefine_input", []*onnxpb.NodeProto{node("Relu", "r", []string{"x"}, []string{"x"})}, "redefines a graph input"},
		{"no_output", []*onnxpb.NodeProto{node("Relu", "r", []string{"x"}, []string{"z"})}, `graph output "y" is not produced`},
		{"not_inferable", []*onnxpb.NodeProto{
			node("Constant", "k", nil, []string{"k"}, &onnxpb.AttributeProto{Name: "value_floats", Type: onnxpb.AttributeProto_FLOATS, Floats: []float32{1, 2, 3, 4}}),
			node("Add", "badadd", []string{"x", "k"}, []string{"y"}),
		}, `"badadd" (Add) with inputs (float32[2,3], float32[4])`},
		{"bad_attr", []*onnxpb.NodeProto{node("Softmax", "sm", []string{"x"}, []string{"y"},
			&onnxpb.AttributeProto{Name: "axis", Type: onnxpb.AttributeProto_FLOAT, F: 1})}, `node 0 "sm" (Softmax): attribute "axis": want an int`},
		{"subgraph_attr", []*onnxpb.NodeProto{node("Relu", "r", []string{"x"}, []string{"y"},
			&onnxpb.AttributeProto{Name: "body", Type: onnxpb.AttributeProto_GRAPH, G: &onnxpb.GraphProto{}})}, `attribute "body" of type GRAPH`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "bad_attr" {
				if _, ok := importers["Softmax"]; !ok {
					t.Skip("Softmax's importer is not registered yet")
				}
			}
			_, err := Decode(marshal(t, model(17, &onnxpb.GraphProto{Node: c.nodes, Input: in, Output: out})))
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("got %v, want an error containing %q", err, c.err)
			}
		})
	}
	t.Run("out_of_order", func(t *testing.T) {
		// ONNX requires topological order; the loader sorts files that are
		// not, when they have no cycle.
		nodes := []*onnxpb.NodeProto{
			node("Relu", "r", []string{"a"}, []string{"y"}),
			node("Neg", "n", []string{"x"}, []string{"a"}),
		}
		g, err := Decode(marshal(t, model(17, &onnxpb.GraphProto{Node: nodes, Input: in, Output: out})))
		if err != nil {
			t.Fatal(err)
		}
		res := eval(t, g, map[string]*ir.Array{"x": arr(tensor.Float32, tensor.Shape{2, 3}, -1, 2, -3, 4, -5, 6)})
		if want := []float64{1, 0, 3, 0, 5, 0}; !reflect.DeepEqual(res[0].Data, want) {
			t.Errorf("got %v, want %v", res[0].Data, want)
		}
	})
}

func TestCorruptFiles(t *testing.T) {
	good := marshal(t, addModel())
	for _, c := range []struct {
		name string
		data []byte
		err  string
	}{
		{"empty", nil, "holds no graph"},
		{"truncated", good[:len(good)-5], "truncated"},
		{"text", []byte("this is not a model"), "not a valid ONNX model"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.data)
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("got %v, want an error containing %q", err, c.err)
			}
		})
	}
	t.Run("missing_file", func(t *testing.T) {
		_, err := Load(filepath.Join(t.TempDir(), "none.onnx"))
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("got %v", err)
		}
	})
}

// TestConstantsAndInitializerInputs: a Constant node feeds a node, and an
// initializer also listed as a graph input (older exporters did so) stays a
// constant rather than becoming an input.
func TestConstantsAndInitializerInputs(t *testing.T) {
	m := model(11, &onnxpb.GraphProto{
		Node: []*onnxpb.NodeProto{
			node("Constant", "k", nil, []string{"k"}, &onnxpb.AttributeProto{Name: "value", Type: onnxpb.AttributeProto_TENSOR,
				T: floatInit("", []int64{3}, 10, 20, 30)}),
			node("Add", "a1", []string{"x", "w"}, []string{"s"}),
			node("Mul", "m", []string{"s", "k"}, []string{"y"}),
		},
		Initializer: []*onnxpb.TensorProto{floatInit("w", []int64{3}, 1, 2, 3)},
		Input:       []*onnxpb.ValueInfoProto{tinfo("x", 1, 1, 3), tinfo("w", 1, 3)},
		Output:      []*onnxpb.ValueInfoProto{tinfo("y", 1, 1, 3)},
	})
	g, err := Decode(marshal(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Inputs) != 1 || g.Inputs[0].Name != "x" {
		t.Fatalf("inputs %v, want only x", g.Inputs)
	}
	out := eval(t, g, map[string]*ir.Array{"x": arr(tensor.Float32, tensor.Shape{1, 3}, 0, 1, 2)})
	if want := []float64{10, 60, 150}; !reflect.DeepEqual(out[0].Data, want) {
		t.Errorf("got %v, want %v", out[0].Data, want)
	}
	if g.ParamCount() != 3 {
		t.Errorf("ParamCount %d, want 3", g.ParamCount())
	}
}

func TestInputShapes(t *testing.T) {
	m := addModel()
	m.Graph.Input[0] = tinfo("x", 1, "batch", "width")
	m.Graph.Output[0] = tinfo("y", 1, "batch", "width")
	_, err := Decode(marshal(t, m))
	var se *SymbolicShapeError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), `dimension 1 is symbolic ("width")`) {
		t.Fatalf("got %v, want a SymbolicShapeError about the symbolic width", err)
	}
	if se.Input != "x" || !se.Shape.Equal(tensor.Shape{ir.Dynamic, ir.Dynamic}) || !reflect.DeepEqual(se.Params, []string{"batch", "width"}) {
		t.Errorf("error fields %+v", se)
	}
	g, err := Decode(marshal(t, m), WithInputShapes(map[string][]int{"x": {ir.Dynamic, 3}}))
	if err != nil {
		t.Fatal(err)
	}
	if !g.Inputs[0].Type.Shape.Equal(tensor.Shape{ir.Dynamic, 3}) {
		t.Errorf("shape %v", g.Inputs[0].Type.Shape)
	}
	if _, err := Decode(marshal(t, m), WithInputShapes(map[string][]int{"x": {1, 3}, "nope": {1}})); err == nil || !strings.Contains(err.Error(), `input "nope"`) {
		t.Errorf("unknown input: got %v", err)
	}
	m.Graph.Input[0].Type.GetTensorType().Shape = nil
	if _, err := Decode(marshal(t, m)); err == nil || !strings.Contains(err.Error(), "has no shape") {
		t.Errorf("no shape: got %v", err)
	}
	m.Graph.Input[0].Type = &onnxpb.TypeProto{Value: &onnxpb.TypeProto_SequenceType{SequenceType: &onnxpb.TypeProto_Sequence{}}}
	if _, err := Decode(marshal(t, m)); !errors.Is(err, ErrUnsupportedModel) || !strings.Contains(err.Error(), "sequence") {
		t.Errorf("sequence input: got %v", err)
	}
}

func TestConstantInputs(t *testing.T) {
	// Reshape's shape as a graph input can only be inferred from its data.
	m := model(14, &onnxpb.GraphProto{
		Node:   []*onnxpb.NodeProto{node("Reshape", "rs", []string{"x", "s"}, []string{"y"})},
		Input:  []*onnxpb.ValueInfoProto{tinfo("x", 1, 2, 3), tinfo("s", 7, 2)},
		Output: []*onnxpb.ValueInfoProto{tinfo("y", 1, 3, 2)},
	})
	_, err := Decode(marshal(t, m))
	if !errors.Is(err, ir.ErrNotConstant) || !strings.Contains(err.Error(), `"rs"`) {
		t.Fatalf("got %v, want ErrNotConstant naming the node", err)
	}
	g, err := Decode(marshal(t, m), WithConstantInputs(map[string]*tensor.Tensor{"s": tensorOfInt64s(tensor.Shape{2}, []int64{3, 2})}))
	if err != nil {
		t.Fatal(err)
	}
	out := eval(t, g, map[string]*ir.Array{"x": arr(tensor.Float32, tensor.Shape{2, 3}, 1, 2, 3, 4, 5, 6)})
	if !out[0].Shape.Equal(tensor.Shape{3, 2}) {
		t.Errorf("shape %v", out[0].Shape)
	}
}

// FuzzDecodeONNX feeds mutated models to Decode and DecodeTensor: they may
// fail, never panic, and never allocate more than the bytes present imply.
func FuzzDecodeONNX(f *testing.F) {
	f.Add(marshal(f, addModel()))
	f.Add(marshal(f, externalModel("w.bin")))
	m := model(11, &onnxpb.GraphProto{
		Node: []*onnxpb.NodeProto{
			node("Constant", "k", nil, []string{"k"}, &onnxpb.AttributeProto{Name: "value", Type: onnxpb.AttributeProto_TENSOR,
				T: floatInit("", []int64{3}, 10, 20, 30)}),
			node("Add", "a1", []string{"x", "w"}, []string{"s"}),
			node("Transpose", "t", []string{"s"}, []string{"u"}, &onnxpb.AttributeProto{Name: "perm", Type: onnxpb.AttributeProto_INTS, Ints: []int64{1, 0}}),
			node("Reshape", "r", []string{"u", "shape"}, []string{"y"}),
		},
		Initializer: []*onnxpb.TensorProto{floatInit("w", []int64{3}, 1, 2, 3),
			{Name: "shape", Dims: []int64{2}, DataType: 7, Int64Data: []int64{1, 3}}},
		Input:  []*onnxpb.ValueInfoProto{tinfo("x", 1, 1, 3)},
		Output: []*onnxpb.ValueInfoProto{tinfo("y", 1, 1, 3)},
	})
	f.Add(marshal(f, m))
	tb, _ := proto.Marshal(&onnxpb.TensorProto{Dims: []int64{2, 2}, DataType: 10, Int32Data: []int32{1, 2, 3, 4}})
	f.Add(tb)
	// A real export: convolutions, pools and Gemm with their attributes.
	if b, err := os.ReadFile("../../testdata/golden/tiny_cnn.onnx"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if g, err := Decode(data); err == nil {
			if verr := g.Validate(); verr != nil {
				t.Fatalf("Decode accepted an invalid graph: %v", verr)
			}
		}
		if tt, _, err := DecodeTensor(data); err == nil {
			if len(tt.Data) > 8*len(data)+64 {
				t.Fatalf("a %d-byte message decoded to %d bytes of tensor", len(data), len(tt.Data))
			}
		}
	})
}

// TestTinyCNNFixture runs testdata/golden/tiny_cnn.onnx (written by
// tools/golden/make_onnx_fixture.py) on its input and compares with
// PyTorch's float64 logits.
func TestTinyCNNFixture(t *testing.T) {
	const dir = "../../testdata/golden/"
	g, err := Load(dir + "tiny_cnn.onnx")
	if err != nil {
		t.Fatal(err)
	}
	x, err := tensor.LoadNPY(dir + "tiny_cnn.input.npy")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := tensor.LoadNPY(dir + "tiny_cnn.logits.npy")
	if err != nil {
		t.Fatal(err)
	}
	xa, err := ir.ArrayFromTensor(x)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ir.ArrayFromTensor(ref)
	if err != nil {
		t.Fatal(err)
	}
	out := eval(t, g, map[string]*ir.Array{g.Inputs[0].Name: xa})
	if !out[0].Shape.Equal(want.Shape) {
		t.Fatalf("logits %v, want %v", out[0].Shape, want.Shape)
	}
	// The weights are float32 and the evaluator float64: the gap is the
	// rounding of the weights PyTorch exported, far below 1e-4 relative.
	var maxRef, maxDiff float64
	for i, w := range want.Data {
		maxRef = math.Max(maxRef, math.Abs(w))
		maxDiff = math.Max(maxDiff, math.Abs(out[0].Data[i]-w))
	}
	if maxDiff > 1e-4*maxRef {
		t.Errorf("max |got-ref| %g, max |ref| %g: relative %g > 1e-4", maxDiff, maxRef, maxDiff/maxRef)
	}
}

// TestUnusedOptionalOutputs: exporters list outputs an inference graph
// never reads (BatchNormalization's running statistics before opset 14);
// the loader leaves them out instead of asking the op for them.
func TestUnusedOptionalOutputs(t *testing.T) {
	m := model(9, &onnxpb.GraphProto{
		Node: []*onnxpb.NodeProto{
			node("BatchNormalization", "bn", []string{"x", "s", "b", "mean", "var"}, []string{"y0", "rm", "rv", "sm", "sv"}),
			node("Dropout", "drop", []string{"y0"}, []string{"y", "mask"}),
		},
		Initializer: []*onnxpb.TensorProto{
			floatInit("s", []int64{2}, 2, 1), floatInit("b", []int64{2}, 0, 1),
			floatInit("mean", []int64{2}, 1, 0), floatInit("var", []int64{2}, 1, 4),
		},
		Input:  []*onnxpb.ValueInfoProto{tinfo("x", 1, 1, 2, 1, 1)},
		Output: []*onnxpb.ValueInfoProto{tinfo("y", 1, 1, 2, 1, 1)},
	})
	if _, ok := importers["BatchNormalization"]; !ok {
		t.Skip("BatchNormalization's importer is not registered")
	}
	g, err := Decode(marshal(t, m))
	if err != nil {
		t.Fatal(err)
	}
	out := eval(t, g, map[string]*ir.Array{"x": arr(tensor.Float32, tensor.Shape{1, 2, 1, 1}, 3, 4)})
	// (3-1)/sqrt(1+eps)*2 + 0 and (4-0)/sqrt(4+eps)*1 + 1.
	want := []float64{4, 3}
	for i, w := range want {
		if math.Abs(out[0].Data[i]-w) > 1e-4 {
			t.Errorf("got %v, want %v", out[0].Data, want)
		}
	}
}
