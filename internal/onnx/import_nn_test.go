package onnx

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

func TestImportNNOps(t *testing.T) {
	i := func(v int64) Attr { return Attr{Type: AttrInt, Int: v} }
	is := func(v ...int64) Attr { return Attr{Type: AttrInts, Ints: v} }
	f := func(v float32) Attr { return Attr{Type: AttrFloat, Float: v} }
	s := func(v string) Attr { return Attr{Type: AttrString, String: v} }
	f32 := func(v float64) wantExtra {
		return wantExtra{dt: tensor.Float32, shape: tensor.Shape{}, v: []float64{v}}
	}
	at := func(index int, w wantExtra) wantExtra { w.index = index; return w }
	for _, c := range []struct {
		name  string
		op    string
		opset int
		attrs Attrs
		want  ir.Op
		extra []wantExtra
		err   string
	}{
		{name: "conv_full", op: "Conv", opset: 11, attrs: Attrs{"kernel_shape": is(3, 3), "strides": is(2, 2), "pads": is(1, 1, 1, 1), "dilations": is(1, 1), "group": i(32)},
			want: &ir.Conv{Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, Dilations: []int{1, 1}, Group: 32, AutoPad: "NOTSET"}},
		{name: "conv_auto_pad", op: "Conv", opset: 1, attrs: Attrs{"auto_pad": s("SAME_LOWER")}, want: &ir.Conv{Group: 1, AutoPad: "SAME_LOWER"}},
		{name: "conv_bad_auto_pad", op: "Conv", opset: 11, attrs: Attrs{"auto_pad": s("SAME")}, err: `auto_pad "SAME"`},
		{name: "conv_bad_group", op: "Conv", opset: 11, attrs: Attrs{"group": i(0)}, err: "group 0"},
		{name: "conv_transpose", op: "ConvTranspose", opset: 11, attrs: Attrs{"strides": is(2), "output_padding": is(1), "output_shape": is(10)},
			want: &ir.ConvTranspose{Strides: []int{2}, OutputPadding: []int{1}, OutputShape: []int{10}, Group: 1, AutoPad: "NOTSET"}},
		{name: "maxpool_v12", op: "MaxPool", opset: 12, attrs: Attrs{"kernel_shape": is(3, 3), "ceil_mode": i(1), "storage_order": i(1)},
			want: &ir.Pool{Max: true, Kernel: []int{3, 3}, CeilMode: true, StorageOrder: 1, AutoPad: "NOTSET"}},
		{name: "maxpool_no_kernel", op: "MaxPool", opset: 12, err: "MaxPool needs its kernel_shape attribute"},
		{name: "averagepool_include_pad", op: "AveragePool", opset: 7, attrs: Attrs{"kernel_shape": is(2), "count_include_pad": i(1)},
			want: &ir.Pool{Kernel: []int{2}, CountIncludePad: true, AutoPad: "NOTSET"}},
		{name: "global_average", op: "GlobalAveragePool", opset: 1, want: &ir.GlobalPool{}},
		{name: "global_max", op: "GlobalMaxPool", opset: 1, want: &ir.GlobalPool{Max: true}},
		{name: "lppool", op: "LpPool", opset: 18, attrs: Attrs{"kernel_shape": is(2, 2), "p": i(3), "ceil_mode": i(1)},
			want: &ir.LpPool{P: 3, Pool: ir.Pool{Kernel: []int{2, 2}, CeilMode: true, AutoPad: "NOTSET"}}},
		{name: "lppool_bad_p", op: "LpPool", opset: 18, attrs: Attrs{"kernel_shape": is(2), "p": i(0)}, err: "p 0"},
		{name: "global_lppool", op: "GlobalLpPool", opset: 2, want: &ir.GlobalLpPool{P: 2}},
		{name: "gemm_default", op: "Gemm", opset: 13, want: &ir.Gemm{Alpha: 1, Beta: 1}},
		{name: "gemm_attrs", op: "Gemm", opset: 9, attrs: Attrs{"alpha": f(0.5), "beta": f(2), "transB": i(1)}, want: &ir.Gemm{Alpha: 0.5, Beta: 2, TransB: true}},
		{name: "matmul", op: "MatMul", opset: 13, want: &ir.MatMul{}},
		{name: "batchnorm", op: "BatchNormalization", opset: 15, attrs: Attrs{"epsilon": f(0.5), "momentum": f(0.1)}, want: &ir.BatchNorm{Epsilon: 0.5}},
		{name: "batchnorm_v7_spatial", op: "BatchNormalization", opset: 7, attrs: Attrs{"spatial": i(0)}, want: &ir.BatchNorm{Epsilon: float64(float32(1e-5))}},
		{name: "batchnorm_training", op: "BatchNormalization", opset: 15, attrs: Attrs{"training_mode": i(1)}, err: "training_mode=1"},
		{name: "batchnorm_v6_training", op: "BatchNormalization", opset: 6, attrs: Attrs{"is_test": i(0)}, err: "is_test=0"},
		{name: "layernorm", op: "LayerNormalization", opset: 17, attrs: Attrs{"axis": i(1)}, want: &ir.LayerNorm{Axis: 1, Epsilon: float64(float32(1e-5))}},
		{name: "instancenorm", op: "InstanceNormalization", opset: 6, want: &ir.InstanceNorm{Epsilon: float64(float32(1e-5))}},
		{name: "lrn", op: "LRN", opset: 13, attrs: Attrs{"size": i(5)}, want: &ir.LRN{Alpha: float64(float32(1e-4)), Beta: 0.75, Bias: 1, Size: 5}},
		{name: "lrn_no_size", op: "LRN", opset: 13, err: "LRN needs its size attribute"},
		{name: "clip_v6_attrs", op: "Clip", opset: 6, attrs: Attrs{"min": f(0), "max": f(6)}, want: &ir.Clip{}, extra: []wantExtra{at(1, f32(0)), at(2, f32(6))}},
		{name: "clip_v6_min_only", op: "Clip", opset: 6, attrs: Attrs{"min": f(-1)}, want: &ir.Clip{}, extra: []wantExtra{at(1, f32(-1)), at(2, f32(math.Inf(1)))}},
		{name: "clip_v13", op: "Clip", opset: 13, want: &ir.Clip{}},
		{name: "leakyrelu_default", op: "LeakyRelu", opset: 16, want: &ir.LeakyRelu{Alpha: float64(float32(0.01))}},
		{name: "elu", op: "Elu", opset: 6, attrs: Attrs{"alpha": f(0.5)}, want: &ir.Elu{Alpha: 0.5}},
		{name: "selu_default", op: "Selu", opset: 6, want: &ir.Selu{Alpha: float64(float32(1.6732632)), Gamma: float64(float32(1.050701))}},
		{name: "celu", op: "Celu", opset: 12, want: &ir.Celu{Alpha: 1}},
		{name: "hardsigmoid_default", op: "HardSigmoid", opset: 6, want: &ir.HardSigmoid{Alpha: float64(float32(0.2)), Beta: 0.5}},
		{name: "thresholdedrelu", op: "ThresholdedRelu", opset: 10, want: &ir.ThresholdedRelu{Alpha: 1}},
		{name: "shrink", op: "Shrink", opset: 9, attrs: Attrs{"bias": f(1)}, want: &ir.Shrink{Bias: 1, Lambd: 0.5}},
		{name: "gelu", op: "Gelu", opset: 20, want: &ir.Gelu{}},
		{name: "gelu_tanh", op: "Gelu", opset: 20, attrs: Attrs{"approximate": s("tanh")}, want: &ir.Gelu{Tanh: true}},
		{name: "gelu_bad", op: "Gelu", opset: 20, attrs: Attrs{"approximate": s("fast")}, err: `approximate "fast"`},
		{name: "softmax_v13_default", op: "Softmax", opset: 13, want: &ir.Softmax{Axis: -1}},
		{name: "softmax_v11_default", op: "Softmax", opset: 11, want: &ir.Softmax{Axis: 1, Coerce2D: true}},
		{name: "logsoftmax_v11_axis", op: "LogSoftmax", opset: 11, attrs: Attrs{"axis": i(-1)}, want: &ir.Softmax{Axis: -1, Log: true, Coerce2D: true}},
		{name: "hardmax", op: "Hardmax", opset: 13, attrs: Attrs{"axis": i(0)}, want: &ir.Softmax{Axis: 0, Hard: true}},
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

func TestImportBatchNormTrainingIsUnsupported(t *testing.T) {
	_, _, err := importers["BatchNormalization"](Attrs{"training_mode": {Type: AttrInt, Int: 1}}, 14)
	if !errors.Is(err, ir.ErrUnsupported) {
		t.Fatalf("error %v does not match ir.ErrUnsupported", err)
	}
}

// Clip-6's attributes become inputs that bound a float16 X as well.
func TestImportedClipV6Runs(t *testing.T) {
	op, extra, err := importers["Clip"](Attrs{"min": {Type: AttrFloat, Float: 0}, "max": {Type: AttrFloat, Float: 6}}, 6)
	if err != nil {
		t.Fatal(err)
	}
	x := &ir.Value{Name: "x", Type: ir.Type{DType: tensor.Float16, Shape: tensor.Shape{3}}}
	in := []*ir.Value{x, nil, nil}
	args := []*ir.Array{{DType: tensor.Float16, Shape: tensor.Shape{3}, Data: []float64{-1, 3, 7}}, nil, nil}
	for _, e := range extra {
		in[e.Index] = &ir.Value{Name: "bound", Type: ir.Type{DType: e.Value.DType, Shape: e.Value.Shape}, Const: e.Value}
		if args[e.Index], err = ir.ArrayFromTensor(e.Value); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := op.Infer(in); err != nil {
		t.Fatal(err)
	}
	out, err := op.Eval(args)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{0, 3, 6}; !reflect.DeepEqual(out[0].Data, want) {
		t.Fatalf("Clip-6 gave %v, want %v", out[0].Data, want)
	}
}

func TestImportResize(t *testing.T) {
	s := func(v string) Attr { return Attr{Type: AttrString, String: v} }
	legacy := func(mode string) *ir.Resize {
		return &ir.Resize{Mode: mode, CoordinateTransformMode: "asymmetric", NearestMode: "floor", CubicCoeffA: -0.75, KeepAspectRatioPolicy: "stretch", ScalesOnly: true}
	}
	for _, c := range []struct {
		name  string
		op    string
		opset int
		attrs Attrs
		want  ir.Op
		extra []wantExtra
		err   string
	}{
		{name: "upsample_v7_scales_attr", op: "Upsample", opset: 7, attrs: Attrs{"scales": {Type: AttrFloats, Floats: []float32{1, 1, 2, 2}}},
			want: legacy("nearest"), extra: []wantExtra{{index: 1, dt: tensor.Float32, shape: tensor.Shape{4}, v: []float64{1, 1, 2, 2}}}},
		{name: "upsample_v7_no_scales", op: "Upsample", opset: 7, err: "Upsample needs its scales attribute"},
		{name: "upsample_v9_bilinear", op: "Upsample", opset: 9, attrs: Attrs{"mode": s("bilinear")}, want: legacy("linear")},
		{name: "upsample_bad_mode", op: "Upsample", opset: 9, attrs: Attrs{"mode": s("cubic")}, err: `mode "cubic"`},
		{name: "resize_v10", op: "Resize", opset: 10, attrs: Attrs{"mode": s("linear")}, want: legacy("linear")},
		{name: "resize_v11_defaults", op: "Resize", opset: 11,
			want: &ir.Resize{Mode: "nearest", CoordinateTransformMode: "half_pixel", NearestMode: "round_prefer_floor", CubicCoeffA: -0.75, KeepAspectRatioPolicy: "stretch"}},
		{name: "resize_v19_full", op: "Resize", opset: 19, attrs: Attrs{
			"mode": s("cubic"), "coordinate_transformation_mode": s("half_pixel_symmetric"), "antialias": {Type: AttrInt, Int: 1},
			"axes": {Type: AttrInts, Ints: []int64{2, 3}}, "keep_aspect_ratio_policy": s("not_smaller"), "exclude_outside": {Type: AttrInt, Int: 1},
			"cubic_coeff_a": {Type: AttrFloat, Float: -0.5}, "extrapolation_value": {Type: AttrFloat, Float: 2}},
			want: &ir.Resize{Mode: "cubic", CoordinateTransformMode: "half_pixel_symmetric", NearestMode: "round_prefer_floor", CubicCoeffA: -0.5,
				ExcludeOutside: true, Antialias: true, Axes: []int{2, 3}, ExtrapolationValue: 2, KeepAspectRatioPolicy: "not_smaller"}},
		{name: "resize_v13_antialias", op: "Resize", opset: 13, attrs: Attrs{"antialias": {Type: AttrInt, Int: 1}}, err: "opset 18"},
		{name: "resize_v18_symmetric", op: "Resize", opset: 18, attrs: Attrs{"coordinate_transformation_mode": s("half_pixel_symmetric")}, err: "opset 19"},
	} {
		t.Run(c.name, func(t *testing.T) {
			attrs := c.attrs
			if attrs == nil {
				attrs = Attrs{}
			}
			op, extra, err := importers[c.op](attrs, c.opset)
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
			checkExtras(t, extra, c.extra)
		})
	}
}
