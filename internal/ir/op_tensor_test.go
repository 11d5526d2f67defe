package ir

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"goinfer/internal/tensor"
)

// arrOf builds an array; data defaults to zeros when empty.
func arrOf(dt tensor.DType, shape tensor.Shape, data ...float64) *Array {
	a := NewArray(dt, shape)
	if len(data) > 0 {
		if len(data) != len(a.Data) {
			panic(fmt.Sprintf("arrOf: %d values for shape %v", len(data), shape))
		}
		copy(a.Data, data)
	}
	return a
}

// i64s is a 1-D int64 array.
func i64s(v ...float64) *Array { return arrOf(tensor.Int64, tensor.Shape{len(v)}, v...) }

// iotaArr is an array holding 0, 1, 2, ...
func iotaArr(dt tensor.DType, shape tensor.Shape) *Array {
	a := NewArray(dt, shape)
	for i := range a.Data {
		a.Data[i] = float64(i)
	}
	return a
}

// opCase is one row of an op's table: the op applied to in (nil entries
// are absent inputs). Infer sees every input as a constant except those
// in nonConst; Infer's types and Eval's outputs must both match want.
type opCase struct {
	name     string
	op       Op
	in       []*Array
	nonConst []int
	want     []*Array
	err      string // a substring of the Infer or, failing that, Eval error
}

func runOpCases(t *testing.T, cases []opCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runOpCase(t, c) })
	}
}

func runOpCase(t *testing.T, c opCase) {
	t.Helper()
	vals := make([]*Value, len(c.in))
	for i, a := range c.in {
		if a == nil {
			continue
		}
		v := &Value{Name: fmt.Sprintf("in%d", i), Type: Type{DType: a.DType, Shape: a.Shape.Clone()}}
		if !slices.Contains(c.nonConst, i) {
			tt, err := a.Tensor()
			if err != nil {
				t.Fatal(err)
			}
			v.Const = tt
		}
		vals[i] = v
	}
	types, err := c.op.Infer(vals)
	var outs []*Array
	if err == nil {
		outs, err = c.op.Eval(c.in)
	}
	if c.err != "" {
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Fatalf("%s: error %v, want one containing %q", c.op.Kind(), err, c.err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", c.op.Kind(), err)
	}
	if len(types) < len(c.want) || len(outs) < len(c.want) {
		t.Fatalf("%s: %d types and %d outputs, want %d", c.op.Kind(), len(types), len(outs), len(c.want))
	}
	for i, w := range c.want {
		if got := types[i]; got.DType != w.DType || !got.Shape.Equal(w.Shape) {
			t.Errorf("Infer output %d: %s, want %s%v", i, got, w.DType, w.Shape)
		}
		if got := outs[i]; !arraysClose(got, w) {
			t.Errorf("Eval output %d: %s%v %v, want %s%v %v", i, got.DType, got.Shape, got.Data, w.DType, w.Shape, w.Data)
		}
	}
}

// arraysClose compares dtype, shape and values (NaN equal to NaN, floats
// to a relative 1e-6).
func arraysClose(a, b *Array) bool {
	if a.DType != b.DType || !a.Shape.Equal(b.Shape) || len(a.Data) != len(b.Data) {
		return false
	}
	for i, x := range a.Data {
		y := b.Data[i]
		switch {
		case math.IsNaN(x) || math.IsNaN(y):
			if !math.IsNaN(x) || !math.IsNaN(y) {
				return false
			}
		case math.IsInf(y, 0):
			if x != y {
				return false
			}
		case math.Abs(x-y) > 1e-6*math.Max(1, math.Abs(y)):
			return false
		}
	}
	return true
}

const (
	f32T  = tensor.Float32
	i64T  = tensor.Int64
	boolT = tensor.Bool
)

func TestGather(t *testing.T) {
	data := iotaArr(f32T, tensor.Shape{3, 2})
	runOpCases(t, []opCase{
		{name: "axis0", op: &Gather{}, in: []*Array{data, arrOf(i64T, tensor.Shape{2, 2}, 0, 1, 1, 2)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2, 2}, 0, 1, 2, 3, 2, 3, 4, 5)}},
		{name: "axis1", op: &Gather{Axis: 1}, in: []*Array{data, i64s(1, 0)},
			want: []*Array{arrOf(f32T, tensor.Shape{3, 2}, 1, 0, 3, 2, 5, 4)}},
		{name: "negative_indices", op: &Gather{}, in: []*Array{data, i64s(-1, -3)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 4, 5, 0, 1)}},
		{name: "scalar_index_drops_axis", op: &Gather{Axis: -1}, in: []*Array{data, arrOf(tensor.Int32, tensor.Shape{}, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{3}, 1, 3, 5)}},
		{name: "shape_gather", op: &Gather{}, in: []*Array{i64s(4, 3, 2), arrOf(i64T, tensor.Shape{}, 0)},
			want: []*Array{arrOf(i64T, tensor.Shape{}, 4)}},
		{name: "const_out_of_range", op: &Gather{}, in: []*Array{data, i64s(3)}, err: "index 3 is out of range for dimension 0 of size 3"},
		{name: "runtime_out_of_range", op: &Gather{}, in: []*Array{data, i64s(-4)}, nonConst: []int{1}, err: "index -4 is out of range"},
		{name: "bad_axis", op: &Gather{Axis: 2}, in: []*Array{data, i64s(0)}, err: "Gather's axis 2 is out of range for rank 2"},
		{name: "float_indices", op: &Gather{}, in: []*Array{data, arrOf(f32T, tensor.Shape{1})}, err: "want int64 or int32"},
	})
}

func TestGatherElements(t *testing.T) {
	runOpCases(t, []opCase{
		{name: "axis1", op: &GatherElements{Axis: 1},
			in:   []*Array{arrOf(f32T, tensor.Shape{2, 2}, 1, 2, 3, 4), arrOf(i64T, tensor.Shape{2, 2}, 0, 0, 1, 0)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 1, 1, 4, 3)}},
		{name: "axis0", op: &GatherElements{},
			in:   []*Array{arrOf(f32T, tensor.Shape{3, 3}, 1, 2, 3, 4, 5, 6, 7, 8, 9), arrOf(i64T, tensor.Shape{2, 3}, 1, 2, 0, 2, 0, 0)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 3}, 4, 8, 3, 7, 2, 3)}},
		{name: "negative_indices", op: &GatherElements{},
			in:   []*Array{arrOf(f32T, tensor.Shape{3, 3}, 1, 2, 3, 4, 5, 6, 7, 8, 9), arrOf(i64T, tensor.Shape{2, 3}, -1, -2, 0, -2, 0, 0)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 3}, 7, 5, 3, 4, 2, 3)}},
		{name: "rank_mismatch", op: &GatherElements{}, in: []*Array{arrOf(f32T, tensor.Shape{2, 2}), i64s(0)}, err: "differ in rank"},
		{name: "too_wide", op: &GatherElements{}, in: []*Array{arrOf(f32T, tensor.Shape{2, 2}), arrOf(i64T, tensor.Shape{1, 3})}, err: "exceed data [2 2] in dimension 1"},
		{name: "out_of_range", op: &GatherElements{}, in: []*Array{arrOf(f32T, tensor.Shape{2, 2}), arrOf(i64T, tensor.Shape{1, 1}, 2)}, err: "index 2 is out of range"},
	})
}

func TestCast(t *testing.T) {
	x := arrOf(tensor.Float64, tensor.Shape{6}, -1.7, 2.9, 300.5, -1, 0.1, math.NaN())
	runOpCases(t, []opCase{
		{name: "to_int32_truncates", op: &Cast{To: tensor.Int32}, in: []*Array{x},
			want: []*Array{arrOf(tensor.Int32, tensor.Shape{6}, -1, 2, 300, -1, 0, 0)}},
		{name: "to_uint8_wraps", op: &Cast{To: tensor.Uint8}, in: []*Array{x},
			want: []*Array{arrOf(tensor.Uint8, tensor.Shape{6}, 255, 2, 44, 255, 0, 0)}},
		{name: "to_int8_wraps", op: &Cast{To: tensor.Int8}, in: []*Array{arrOf(f32T, tensor.Shape{2}, 200, -129)},
			want: []*Array{arrOf(tensor.Int8, tensor.Shape{2}, -56, 127)}},
		{name: "to_bool", op: &Cast{To: boolT}, in: []*Array{x},
			want: []*Array{arrOf(boolT, tensor.Shape{6}, 1, 1, 1, 1, 1, 1)}},
		{name: "to_float32_rounds", op: &Cast{To: f32T}, in: []*Array{x},
			want: []*Array{arrOf(f32T, tensor.Shape{6}, float64(float32(-1.7)), float64(float32(2.9)), 300.5, -1, float64(float32(0.1)), math.NaN())}},
		{name: "to_float16_overflows", op: &Cast{To: tensor.Float16}, in: []*Array{arrOf(f32T, tensor.Shape{3}, 70000, 1.0009765625, 0.1)},
			want: []*Array{arrOf(tensor.Float16, tensor.Shape{3}, math.Inf(1), 1.0009765625, 0.0999755859375)}},
		{name: "to_bfloat16", op: &Cast{To: tensor.BFloat16}, in: []*Array{arrOf(f32T, tensor.Shape{1}, 1.00390625)},
			want: []*Array{arrOf(tensor.BFloat16, tensor.Shape{1}, 1)}},
		{name: "bool_to_int64", op: &Cast{To: i64T}, in: []*Array{arrOf(boolT, tensor.Shape{2}, 1, 0)},
			want: []*Array{i64s(1, 0)}},
		{name: "int64_to_float64", op: &Cast{To: tensor.Float64}, in: []*Array{i64s(-3, 1<<40)},
			want: []*Array{arrOf(tensor.Float64, tensor.Shape{2}, -3, 1<<40)}},
		{name: "invalid_target", op: &Cast{}, in: []*Array{x}, err: "Cast's target dtype invalid"},
	})
}

func TestCastLike(t *testing.T) {
	runOpCases(t, []opCase{
		{name: "to_int64", op: &CastLike{}, in: []*Array{arrOf(f32T, tensor.Shape{2}, 1.5, -2.5), i64s()},
			want: []*Array{i64s(1, -2)}},
		{name: "one_input", op: &CastLike{}, in: []*Array{arrOf(f32T, tensor.Shape{2})}, err: "takes 2 inputs"},
	})
}

func TestConstant(t *testing.T) {
	var _ Source = &Constant{}
	v, err := tensor.FromFloat32(tensor.Shape{2}, []float32{1.5, -2})
	if err != nil {
		t.Fatal(err)
	}
	runOpCases(t, []opCase{
		{name: "value", op: &Constant{Value: v}, want: []*Array{arrOf(f32T, tensor.Shape{2}, 1.5, -2)}},
		{name: "no_value", op: &Constant{}, err: "Constant has no value"},
		{name: "bad_value", op: &Constant{Value: &tensor.Tensor{DType: f32T, Shape: tensor.Shape{3}, Data: make([]byte, 4)}}, err: "needs 12 bytes"},
		{name: "with_input", op: &Constant{Value: v}, in: []*Array{i64s(1)}, err: "takes 0 inputs"},
	})
}

func TestConstantOfShape(t *testing.T) {
	runOpCases(t, []opCase{
		{name: "int64_fill", op: &ConstantOfShape{DType: i64T, Value: 5}, in: []*Array{i64s(2, 3)},
			want: []*Array{arrOf(i64T, tensor.Shape{2, 3}, 5, 5, 5, 5, 5, 5)}},
		{name: "default_float32_zero", op: &ConstantOfShape{}, in: []*Array{i64s(2)},
			want: []*Array{arrOf(f32T, tensor.Shape{2}, 0, 0)}},
		{name: "zero_dim", op: &ConstantOfShape{DType: tensor.Int32, Value: 1}, in: []*Array{i64s(0, 3)},
			want: []*Array{arrOf(tensor.Int32, tensor.Shape{0, 3})}},
		{name: "scalar", op: &ConstantOfShape{Value: 1}, in: []*Array{i64s()},
			want: []*Array{arrOf(f32T, tensor.Shape{}, 1)}},
		{name: "negative", op: &ConstantOfShape{}, in: []*Array{i64s(2, -1)}, err: "negative dimension"},
		{name: "not_constant", op: &ConstantOfShape{}, in: []*Array{i64s(2)}, nonConst: []int{0}, err: `ConstantOfShape's shape input "in0" is not known at load time`},
		{name: "not_1d", op: &ConstantOfShape{}, in: []*Array{arrOf(i64T, tensor.Shape{1, 1}, 2)}, err: "want a 1-D tensor"},
	})
}

func TestDropout(t *testing.T) {
	x := arrOf(f32T, tensor.Shape{3}, 1, -2, 3)
	mask := arrOf(boolT, tensor.Shape{3}, 1, 1, 1)
	runOpCases(t, []opCase{
		{name: "identity", op: &Dropout{}, in: []*Array{x}, want: []*Array{x, mask}},
		{name: "ratio_and_false_mode", op: &Dropout{}, in: []*Array{x, arrOf(f32T, tensor.Shape{}, 0.3), arrOf(boolT, tensor.Shape{}, 0)}, want: []*Array{x, mask}},
		{name: "absent_ratio", op: &Dropout{}, in: []*Array{x, nil, arrOf(boolT, tensor.Shape{}, 0)}, want: []*Array{x, mask}},
		{name: "training", op: &Dropout{}, in: []*Array{x, nil, arrOf(boolT, tensor.Shape{}, 1)}, err: "true with ratio 0.5: random training-mode dropout: not supported"},
		{name: "training_zero_ratio", op: &Dropout{}, in: []*Array{x, arrOf(f32T, tensor.Shape{}, 0), arrOf(boolT, tensor.Shape{}, 1)}, want: []*Array{x, mask}},
		{name: "training_runtime_ratio", op: &Dropout{}, in: []*Array{x, arrOf(f32T, tensor.Shape{}, 0), arrOf(boolT, tensor.Shape{}, 1)}, nonConst: []int{1}, err: "ratio input (in training mode) \"in1\" is not known at load time"},
		{name: "runtime_mode", op: &Dropout{}, in: []*Array{x, nil, arrOf(boolT, tensor.Shape{}, 0)}, nonConst: []int{2}, err: "not known at load time"},
	})
}

func TestDropoutTrainingUnsupported(t *testing.T) {
	x := &Value{Name: "x", Type: Type{DType: f32T, Shape: tensor.Shape{2}}}
	on, err := arrOf(boolT, tensor.Shape{}, 1).Tensor()
	if err != nil {
		t.Fatal(err)
	}
	mode := &Value{Name: "mode", Type: Type{DType: boolT, Shape: tensor.Shape{}}, Const: on}
	if _, err := (&Dropout{}).Infer([]*Value{x, nil, mode}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Infer = %v, want an error matching ErrUnsupported", err)
	}
}

func TestRange(t *testing.T) {
	sc := func(dt tensor.DType, v float64) *Array { return arrOf(dt, tensor.Shape{}, v) }
	i32 := tensor.Int32
	runOpCases(t, []opCase{
		{name: "int32_negative_delta", op: &Range{}, in: []*Array{sc(i32, 10), sc(i32, 4), sc(i32, -3)},
			want: []*Array{arrOf(i32, tensor.Shape{2}, 10, 7)}},
		{name: "float_positive_delta", op: &Range{}, in: []*Array{sc(f32T, 1), sc(f32T, 5), sc(f32T, 2)},
			want: []*Array{arrOf(f32T, tensor.Shape{2}, 1, 3)}},
		{name: "float_fraction", op: &Range{}, in: []*Array{sc(f32T, 0), sc(f32T, 1), sc(f32T, 0.25)},
			want: []*Array{arrOf(f32T, tensor.Shape{4}, 0, 0.25, 0.5, 0.75)}},
		{name: "int64_inexact_end", op: &Range{}, in: []*Array{sc(i64T, 0), sc(i64T, 7), sc(i64T, 3)},
			want: []*Array{i64s(0, 3, 6)}},
		{name: "empty", op: &Range{}, in: []*Array{sc(i64T, 5), sc(i64T, 1), sc(i64T, 1)},
			want: []*Array{i64s()}},
		{name: "zero_delta", op: &Range{}, in: []*Array{sc(i64T, 0), sc(i64T, 1), sc(i64T, 0)}, err: "delta is 0"},
		{name: "mixed_dtypes", op: &Range{}, in: []*Array{sc(i64T, 0), sc(f32T, 1), sc(i64T, 1)}, err: "input 1 is float32[]"},
		{name: "not_constant", op: &Range{}, in: []*Array{sc(i64T, 0), sc(i64T, 1), sc(i64T, 1)}, nonConst: []int{1}, err: `Range's limit input "in1" is not known at load time`},
		{name: "not_scalar", op: &Range{}, in: []*Array{i64s(0, 1), sc(i64T, 1), sc(i64T, 1)}, err: "want a scalar"},
	})
}

func TestWhere(t *testing.T) {
	runOpCases(t, []opCase{
		{name: "same_shapes", op: &Where{},
			in: []*Array{arrOf(boolT, tensor.Shape{2, 2}, 1, 0, 1, 1), arrOf(f32T, tensor.Shape{2, 2}, 1, 2, 3, 4),
				arrOf(f32T, tensor.Shape{2, 2}, 9, 8, 7, 6)},
			want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 1, 8, 3, 4)}},
		{name: "three_way_broadcast", op: &Where{},
			in:   []*Array{arrOf(boolT, tensor.Shape{2, 1}, 1, 0), arrOf(i64T, tensor.Shape{1, 3}, 1, 2, 3), arrOf(i64T, tensor.Shape{}, -1)},
			want: []*Array{arrOf(i64T, tensor.Shape{2, 3}, 1, 2, 3, -1, -1, -1)}},
		{name: "cond_not_bool", op: &Where{}, in: []*Array{arrOf(f32T, tensor.Shape{1}), arrOf(f32T, tensor.Shape{1}), arrOf(f32T, tensor.Shape{1})}, err: "condition is float32[1], want bool"},
		{name: "dtype_mismatch", op: &Where{}, in: []*Array{arrOf(boolT, tensor.Shape{1}), arrOf(f32T, tensor.Shape{1}), i64s(1)}, err: "differ in dtype"},
		{name: "no_broadcast", op: &Where{}, in: []*Array{arrOf(boolT, tensor.Shape{2}), arrOf(f32T, tensor.Shape{3}), arrOf(f32T, tensor.Shape{1})}, err: "do not broadcast"},
	})
}

func TestVariadic(t *testing.T) {
	a := arrOf(f32T, tensor.Shape{2, 2}, 1, 5, math.NaN(), -1)
	b := arrOf(f32T, tensor.Shape{2}, 3, 2)
	c := arrOf(f32T, tensor.Shape{}, 4)
	runOpCases(t, []opCase{
		{name: "sum", op: &Variadic{Fn: OpSum}, in: []*Array{a, b, c}, want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 8, 11, math.NaN(), 5)}},
		{name: "max_propagates_nan", op: &Variadic{Fn: OpMax}, in: []*Array{a, b}, want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 3, 5, math.NaN(), 2)}},
		{name: "min", op: &Variadic{Fn: OpMin}, in: []*Array{a, b, c}, want: []*Array{arrOf(f32T, tensor.Shape{2, 2}, 1, 2, math.NaN(), -1)}},
		{name: "mean", op: &Variadic{Fn: OpMean}, in: []*Array{b, c}, want: []*Array{arrOf(f32T, tensor.Shape{2}, 3.5, 3)}},
		{name: "one_input", op: &Variadic{Fn: OpSum}, in: []*Array{b}, want: []*Array{b}},
		{name: "int_max", op: &Variadic{Fn: OpMax}, in: []*Array{i64s(1, 9), i64s(5, -2)}, want: []*Array{i64s(5, 9)}},
		{name: "dtype_mismatch", op: &Variadic{Fn: OpSum}, in: []*Array{b, i64s(1)}, err: "input 1 is int64[1], input 0 is float32[2]"},
		{name: "no_inputs", op: &Variadic{Fn: OpMax}, err: "at least one input"},
		{name: "bool", op: &Variadic{Fn: OpMax}, in: []*Array{arrOf(boolT, tensor.Shape{1})}, err: "Max of bool is not defined"},
		{name: "unknown", op: &Variadic{Fn: "Median"}, in: []*Array{b}, err: `unknown variadic op "Median"`},
	})
}

func TestIsInf(t *testing.T) {
	x := arrOf(f32T, tensor.Shape{4}, math.Inf(1), math.Inf(-1), 0, math.NaN())
	runOpCases(t, []opCase{
		{name: "negative_only", op: &IsInf{DetectNegative: true}, in: []*Array{x}, want: []*Array{arrOf(boolT, tensor.Shape{4}, 0, 1, 0, 0)}},
		{name: "positive_only", op: &IsInf{DetectPositive: true}, in: []*Array{x}, want: []*Array{arrOf(boolT, tensor.Shape{4}, 1, 0, 0, 0)}},
		{name: "int_input", op: &IsInf{DetectPositive: true}, in: []*Array{i64s(1)}, err: "want a float dtype"},
	})
}

func TestTensorOpKinds(t *testing.T) {
	for want, op := range map[string]Op{
		"Gather": &Gather{}, "GatherElements": &GatherElements{}, "Cast": &Cast{}, "CastLike": &CastLike{},
		"Constant": &Constant{}, "ConstantOfShape": &ConstantOfShape{}, "Dropout": &Dropout{}, "Range": &Range{},
		"Where": &Where{}, "Sum": &Variadic{Fn: OpSum}, "Mean": &Variadic{Fn: OpMean}, "IsInf": &IsInf{},
	} {
		if got := op.Kind(); got != want {
			t.Errorf("Kind() = %q, want %q", got, want)
		}
	}
}
