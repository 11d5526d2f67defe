package onnx

import (
	"reflect"
	"strings"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// wantExtra is an expected ExtraInput: its index, dtype, shape and values.
type wantExtra struct {
	index int
	dt    tensor.DType
	shape tensor.Shape
	v     []float64
}

func checkExtras(t *testing.T, got []ExtraInput, want []wantExtra) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d extra inputs, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		a, err := ir.ArrayFromTensor(g.Value)
		if err != nil {
			t.Fatalf("extra input %d: %v", i, err)
		}
		if g.Index != w.index || a.DType != w.dt || !a.Shape.Equal(w.shape) || !reflect.DeepEqual(a.Data, w.v) && len(w.v)+len(a.Data) > 0 {
			t.Errorf("extra input %d: index %d %s%v %v, want index %d %s%v %v", i, g.Index, a.DType, a.Shape, a.Data, w.index, w.dt, w.shape, w.v)
		}
	}
}

func TestImportTensorOps(t *testing.T) {
	i := func(v int64) Attr { return Attr{Type: AttrInt, Int: v} }
	is := func(v ...int64) Attr { return Attr{Type: AttrInts, Ints: v} }
	f := func(v float32) Attr { return Attr{Type: AttrFloat, Float: v} }
	fs := func(v ...float32) Attr { return Attr{Type: AttrFloats, Floats: v} }
	s := func(v string) Attr { return Attr{Type: AttrString, String: v} }
	tn := func(v *tensor.Tensor) Attr { return Attr{Type: AttrTensor, Tensor: v} }
	ints := func(index int, v ...float64) wantExtra {
		return wantExtra{index: index, dt: tensor.Int64, shape: tensor.Shape{len(v)}, v: v}
	}
	minus1 := -1
	f32vec, _ := tensor.FromFloat32(tensor.Shape{2}, []float32{1, 2})
	for _, c := range []struct {
		name  string
		op    string
		opset int
		attrs Attrs
		want  ir.Op
		extra []wantExtra
		err   string
	}{
		{name: "shape_start_end", op: "Shape", opset: 15, attrs: Attrs{"start": i(1), "end": i(-1)}, want: &ir.Shape{Start: 1, End: &minus1}},
		{name: "shape_plain", op: "Shape", opset: 13, want: &ir.Shape{}},
		{name: "size", op: "Size", opset: 13, want: &ir.Size{}},
		{name: "reshape_allowzero", op: "Reshape", opset: 14, attrs: Attrs{"allowzero": i(1)}, want: &ir.Reshape{AllowZero: true}},
		{name: "reshape_v1_shape_attr", op: "Reshape", opset: 4, attrs: Attrs{"shape": is(2, -1)}, want: &ir.Reshape{}, extra: []wantExtra{ints(1, 2, -1)}},
		{name: "reshape_v1_no_shape", op: "Reshape", opset: 1, err: "Reshape needs its shape attribute"},
		{name: "flatten_default", op: "Flatten", opset: 13, want: &ir.Flatten{Axis: 1}},
		{name: "flatten_axis", op: "Flatten", opset: 13, attrs: Attrs{"axis": i(-1)}, want: &ir.Flatten{Axis: -1}},
		{name: "transpose_perm", op: "Transpose", opset: 13, attrs: Attrs{"perm": is(0, 2, 1)}, want: &ir.Transpose{Perm: []int{0, 2, 1}}},
		{name: "transpose_default", op: "Transpose", opset: 13, want: &ir.Transpose{}},
		{name: "squeeze_v11_axes", op: "Squeeze", opset: 11, attrs: Attrs{"axes": is(0)}, want: &ir.Squeeze{}, extra: []wantExtra{ints(1, 0)}},
		{name: "squeeze_v11_all", op: "Squeeze", opset: 11, want: &ir.Squeeze{}},
		{name: "squeeze_v13", op: "Squeeze", opset: 13, want: &ir.Squeeze{}},
		{name: "unsqueeze_v11_axes", op: "Unsqueeze", opset: 11, attrs: Attrs{"axes": is(0, 2)}, want: &ir.Unsqueeze{}, extra: []wantExtra{ints(1, 0, 2)}},
		{name: "unsqueeze_v11_no_axes", op: "Unsqueeze", opset: 11, err: "Unsqueeze needs its axes attribute"},
		{name: "unsqueeze_v13", op: "Unsqueeze", opset: 13, want: &ir.Unsqueeze{}},
		{name: "concat", op: "Concat", opset: 13, attrs: Attrs{"axis": i(-1)}, want: &ir.Concat{Axis: -1}},
		{name: "concat_no_axis", op: "Concat", opset: 13, err: "Concat needs its axis attribute"},
		{name: "concat_v1_default", op: "Concat", opset: 1, want: &ir.Concat{Axis: 1}},
		{name: "split_v11_attr", op: "Split", opset: 11, attrs: Attrs{"axis": i(1), "split": is(1, 2)}, want: &ir.Split{Axis: 1}, extra: []wantExtra{ints(1, 1, 2)}},
		{name: "split_v13", op: "Split", opset: 13, want: &ir.Split{}},
		{name: "split_v18_num_outputs", op: "Split", opset: 18, attrs: Attrs{"num_outputs": i(3)}, want: &ir.Split{NumOutputs: 3}},
		{name: "split_bad_num_outputs", op: "Split", opset: 18, attrs: Attrs{"num_outputs": i(0)}, err: "num_outputs 0 is not positive"},
		{name: "slice_v9_attrs", op: "Slice", opset: 9, attrs: Attrs{"starts": is(0, 1), "ends": is(2, 9223372036854775807), "axes": is(0, -1)},
			want: &ir.Slice{}, extra: []wantExtra{ints(1, 0, 1), ints(2, 2, 9223372036854775807), ints(3, 0, -1)}},
		{name: "slice_v9_no_axes", op: "Slice", opset: 1, attrs: Attrs{"starts": is(1), "ends": is(2)}, want: &ir.Slice{}, extra: []wantExtra{ints(1, 1), ints(2, 2)}},
		{name: "slice_v9_no_ends", op: "Slice", opset: 9, attrs: Attrs{"starts": is(1)}, err: "Slice needs its ends attribute"},
		{name: "slice_v13", op: "Slice", opset: 13, want: &ir.Slice{}},
		{name: "gather", op: "Gather", opset: 13, attrs: Attrs{"axis": i(1)}, want: &ir.Gather{Axis: 1}},
		{name: "gather_float_axis", op: "Gather", opset: 13, attrs: Attrs{"axis": f(1)}, err: `attribute "axis": want an int`},
		{name: "gather_elements", op: "GatherElements", opset: 13, attrs: Attrs{"axis": i(-1)}, want: &ir.GatherElements{Axis: -1}},
		{name: "expand", op: "Expand", opset: 13, want: &ir.Expand{}},
		{name: "tile", op: "Tile", opset: 13, want: &ir.Tile{}},
		{name: "tile_v1", op: "Tile", opset: 1, err: "Tile before opset 6"},
		{name: "pad_v2_attrs", op: "Pad", opset: 2, attrs: Attrs{"mode": s("reflect"), "pads": is(1, 2), "value": f(1.5)},
			want: &ir.Pad{Mode: "reflect"}, extra: []wantExtra{ints(1, 1, 2), {index: 2, dt: tensor.Float32, shape: tensor.Shape{}, v: []float64{1.5}}}},
		{name: "pad_v1_paddings", op: "Pad", opset: 1, attrs: Attrs{"paddings": is(0, 1)}, want: &ir.Pad{Mode: "constant"}, extra: []wantExtra{ints(1, 0, 1)}},
		{name: "pad_v2_no_pads", op: "Pad", opset: 2, err: "Pad needs its pads attribute"},
		{name: "pad_v18", op: "Pad", opset: 18, attrs: Attrs{"mode": s("edge")}, want: &ir.Pad{Mode: "edge"}},
		{name: "pad_v19_wrap", op: "Pad", opset: 19, attrs: Attrs{"mode": s("wrap")}, want: &ir.Pad{Mode: "wrap"}},
		{name: "cast_int64", op: "Cast", opset: 13, attrs: Attrs{"to": i(7)}, want: &ir.Cast{To: tensor.Int64}},
		{name: "cast_bfloat16", op: "Cast", opset: 19, attrs: Attrs{"to": i(16), "saturate": i(1)}, want: &ir.Cast{To: tensor.BFloat16}},
		{name: "cast_v1_string_to", op: "Cast", opset: 1, attrs: Attrs{"to": s("FLOAT16")}, want: &ir.Cast{To: tensor.Float16}},
		{name: "cast_v1_bad_name", op: "Cast", opset: 1, attrs: Attrs{"to": s("HALF")}, err: `Cast's to "HALF" is not an ONNX data type`},
		{name: "cast_string", op: "Cast", opset: 13, attrs: Attrs{"to": i(8)}, err: "STRING (8)"},
		{name: "cast_float8", op: "Cast", opset: 19, attrs: Attrs{"to": i(17)}, err: "FLOAT8E4M3FN (17)"},
		{name: "cast_no_to", op: "Cast", opset: 13, err: "Cast needs its to attribute"},
		{name: "cast_like", op: "CastLike", opset: 15, want: &ir.CastLike{}},
		{name: "constant_tensor", op: "Constant", opset: 13, attrs: Attrs{"value": tn(f32vec)}, want: &ir.Constant{Value: f32vec}},
		{name: "constant_float", op: "Constant", opset: 13, attrs: Attrs{"value_float": f(2.5)}, want: &ir.Constant{Value: tensorOfFloat32(2.5)}},
		{name: "constant_floats", op: "Constant", opset: 13, attrs: Attrs{"value_floats": fs(1, 2)}, want: &ir.Constant{Value: f32vec}},
		{name: "constant_int", op: "Constant", opset: 13, attrs: Attrs{"value_int": i(3)}, want: &ir.Constant{Value: tensorOfInt64s(tensor.Shape{}, []int64{3})}},
		{name: "constant_ints", op: "Constant", opset: 13, attrs: Attrs{"value_ints": is(1, 2)}, want: &ir.Constant{Value: tensorOfInt64s(tensor.Shape{2}, []int64{1, 2})}},
		{name: "constant_string", op: "Constant", opset: 13, attrs: Attrs{"value_string": s("x")}, err: "Constant's value_string attribute is not supported"},
		{name: "constant_none", op: "Constant", opset: 13, err: "exactly one value attribute, has []"},
		{name: "constant_two", op: "Constant", opset: 13, attrs: Attrs{"value_int": i(1), "value_float": f(1)}, err: "has [value_float value_int]"},
		{name: "constant_of_shape_default", op: "ConstantOfShape", opset: 9, want: &ir.ConstantOfShape{DType: tensor.Float32}},
		{name: "constant_of_shape_int", op: "ConstantOfShape", opset: 9, attrs: Attrs{"value": tn(tensorOfInt64s(tensor.Shape{1}, []int64{7}))},
			want: &ir.ConstantOfShape{DType: tensor.Int64, Value: 7}},
		{name: "constant_of_shape_two_values", op: "ConstantOfShape", opset: 9, attrs: Attrs{"value": tn(f32vec)}, err: "want one element"},
		{name: "dropout_v7_ratio", op: "Dropout", opset: 7, attrs: Attrs{"ratio": f(0.2)}, want: &ir.Dropout{}},
		{name: "range", op: "Range", opset: 11, want: &ir.Range{}},
		{name: "where", op: "Where", opset: 16, want: &ir.Where{}},
		{name: "sum", op: "Sum", opset: 13, want: &ir.Variadic{Fn: ir.OpSum}},
		{name: "max", op: "Max", opset: 13, want: &ir.Variadic{Fn: ir.OpMax}},
		{name: "min", op: "Min", opset: 13, want: &ir.Variadic{Fn: ir.OpMin}},
		{name: "mean", op: "Mean", opset: 13, want: &ir.Variadic{Fn: ir.OpMean}},
		{name: "reduce_sum_v11_axes", op: "ReduceSum", opset: 11, attrs: Attrs{"axes": is(1), "keepdims": i(0)}, want: &ir.Reduce{Fn: ir.ReduceSum, Axes: []int{1}}},
		{name: "reduce_sum_v13_noop", op: "ReduceSum", opset: 13, attrs: Attrs{"noop_with_empty_axes": i(1)}, want: &ir.Reduce{Fn: ir.ReduceSum, KeepDims: true, NoopWithEmptyAxes: true}},
		{name: "reduce_sum_v13_axes_attr", op: "ReduceSum", opset: 13, attrs: Attrs{"axes": is(1)}, err: "ReduceSum takes axes as an input from opset 13"},
		{name: "reduce_mean_v13_axes", op: "ReduceMean", opset: 13, attrs: Attrs{"axes": is(-1)}, want: &ir.Reduce{Fn: ir.ReduceMean, Axes: []int{-1}, KeepDims: true}},
		{name: "reduce_mean_v18", op: "ReduceMean", opset: 18, attrs: Attrs{"keepdims": i(0)}, want: &ir.Reduce{Fn: ir.ReduceMean}},
		{name: "reduce_max_v18_axes_attr", op: "ReduceMax", opset: 18, attrs: Attrs{"axes": is(0)}, err: "ReduceMax takes axes as an input from opset 18"},
		{name: "reduce_log_sum_exp", op: "ReduceLogSumExp", opset: 13, want: &ir.Reduce{Fn: ir.ReduceLogSumExp, KeepDims: true}},
		{name: "reduce_log_sum", op: "ReduceLogSum", opset: 18, want: &ir.Reduce{Fn: ir.ReduceLogSum, KeepDims: true}},
		{name: "argmax", op: "ArgMax", opset: 12, attrs: Attrs{"axis": i(1), "keepdims": i(0), "select_last_index": i(1)}, want: &ir.ArgReduce{Max: true, Axis: 1, SelectLastIndex: true}},
		{name: "argmin_default", op: "ArgMin", opset: 11, want: &ir.ArgReduce{KeepDims: true}},
		{name: "topk_v1_k_attr", op: "TopK", opset: 1, attrs: Attrs{"k": i(3)}, want: &ir.TopK{Axis: -1, Largest: true, Sorted: true}, extra: []wantExtra{ints(1, 3)}},
		{name: "topk_v1_no_k", op: "TopK", opset: 1, err: "TopK needs its k attribute"},
		{name: "topk_v11", op: "TopK", opset: 11, attrs: Attrs{"axis": i(0), "largest": i(0), "sorted": i(0)}, want: &ir.TopK{}},
		{name: "depth_to_space", op: "DepthToSpace", opset: 13, attrs: Attrs{"blocksize": i(2), "mode": s("CRD")}, want: &ir.DepthToSpace{BlockSize: 2, Mode: "CRD"}},
		{name: "depth_to_space_default", op: "DepthToSpace", opset: 1, attrs: Attrs{"blocksize": i(3)}, want: &ir.DepthToSpace{BlockSize: 3, Mode: "DCR"}},
		{name: "depth_to_space_no_blocksize", op: "DepthToSpace", opset: 13, err: "DepthToSpace needs its blocksize attribute"},
		{name: "space_to_depth", op: "SpaceToDepth", opset: 13, attrs: Attrs{"blocksize": i(2)}, want: &ir.SpaceToDepth{BlockSize: 2, Mode: "DCR"}},
		{name: "space_to_depth_crd", op: "SpaceToDepth", opset: 25, attrs: Attrs{"blocksize": i(2), "mode": s("CRD")}, want: &ir.SpaceToDepth{BlockSize: 2, Mode: "CRD"}},
		{name: "isinf_both", op: "IsInf", opset: 10, want: &ir.Unary{Fn: ir.OpIsInf}},
		{name: "isinf_positive", op: "IsInf", opset: 10, attrs: Attrs{"detect_negative": i(0)}, want: &ir.IsInf{DetectPositive: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			imp, ok := importers[c.op]
			if !ok {
				t.Fatalf("no importer for %s", c.op)
			}
			attrs := c.attrs
			if attrs == nil {
				attrs = Attrs{}
			}
			op, extra, err := imp(attrs, c.opset)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(op, c.want) {
				t.Errorf("op %#v, want %#v", op, c.want)
			}
			if op.Kind() != c.op {
				t.Errorf("Kind() = %q, want %q", op.Kind(), c.op)
			}
			checkExtras(t, extra, c.extra)
		})
	}
}

// TestImportedOldOpsetRuns applies an old opset's importer and its extra
// inputs to a node and checks the IR op infers what the old op meant.
func TestImportedOldOpsetRuns(t *testing.T) {
	x := &ir.Value{Name: "x", Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape{2, 1, 6}}}
	for _, c := range []struct {
		op    string
		opset int
		attrs Attrs
		want  tensor.Shape
	}{
		{"Squeeze", 11, Attrs{"axes": {Type: AttrInts, Ints: []int64{1}}}, tensor.Shape{2, 6}},
		{"Unsqueeze", 12, Attrs{"axes": {Type: AttrInts, Ints: []int64{0, -1}}}, tensor.Shape{1, 2, 1, 6, 1}},
		{"Slice", 9, Attrs{"starts": {Type: AttrInts, Ints: []int64{1}}, "ends": {Type: AttrInts, Ints: []int64{-1}}, "axes": {Type: AttrInts, Ints: []int64{2}}}, tensor.Shape{2, 1, 4}},
		{"Reshape", 4, Attrs{"shape": {Type: AttrInts, Ints: []int64{0, -1}}}, tensor.Shape{2, 6}},
		{"Pad", 10, Attrs{"pads": {Type: AttrInts, Ints: []int64{0, 0, 1, 0, 0, 1}}, "value": {Type: AttrFloat, Float: 1}}, tensor.Shape{2, 1, 8}},
		{"TopK", 9, Attrs{"k": {Type: AttrInt, Int: 2}}, tensor.Shape{2, 1, 2}},
		{"ReduceMean", 13, Attrs{"axes": {Type: AttrInts, Ints: []int64{-1}}, "keepdims": {Type: AttrInt, Int: 0}}, tensor.Shape{2, 1}},
	} {
		op, extra, err := importers[c.op](c.attrs, c.opset)
		if err != nil {
			t.Fatalf("%s-%d: %v", c.op, c.opset, err)
		}
		in := []*ir.Value{x}
		for _, e := range extra {
			for len(in) <= e.Index {
				in = append(in, nil)
			}
			in[e.Index] = &ir.Value{Name: "extra", Type: ir.Type{DType: e.Value.DType, Shape: e.Value.Shape}, Const: e.Value}
		}
		types, err := op.Infer(in)
		if err != nil {
			t.Fatalf("%s-%d: %v", c.op, c.opset, err)
		}
		if !types[0].Shape.Equal(c.want) {
			t.Errorf("%s-%d: output %s, want %v", c.op, c.opset, types[0], c.want)
		}
	}
}
