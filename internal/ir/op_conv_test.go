package ir

import (
	"math"
	"math/rand"
	"testing"

	"goinfer/internal/tensor"
)

// randArr is a float32 array of uniform values in [-1, 1).
func randArr(r *rand.Rand, shape tensor.Shape) *Array {
	a := NewArray(f32T, shape)
	for i := range a.Data {
		a.Data[i] = r.Float64()*2 - 1
	}
	return a
}

func evalOne(t *testing.T, op Op, in ...*Array) *Array {
	t.Helper()
	vals := make([]*Value, len(in))
	for i, a := range in {
		if a != nil {
			vals[i] = &Value{Name: "in", Type: Type{DType: a.DType, Shape: a.Shape.Clone()}}
		}
	}
	types, err := op.Infer(vals)
	if err != nil {
		t.Fatalf("%s Infer: %v", op.Kind(), err)
	}
	out, err := op.Eval(in)
	if err != nil {
		t.Fatalf("%s Eval: %v", op.Kind(), err)
	}
	if !types[0].Shape.Equal(out[0].Shape) || types[0].DType != out[0].DType {
		t.Fatalf("%s: Infer says %s, Eval gave %s%v", op.Kind(), types[0], out[0].DType, out[0].Shape)
	}
	return out[0]
}

func TestConvHand(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{1, 1, 3, 3}) // 0..8
	ones := arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 1, 1, 1, 1)
	runOpCases(t, []opCase{
		{name: "valid_2x2", op: &Conv{}, in: []*Array{x, ones},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 8, 12, 20, 24)}},
		{name: "bias", op: &Conv{}, in: []*Array{x, ones, arrOf(f32T, tensor.Shape{1}, 0.5)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 8.5, 12.5, 20.5, 24.5)}},
		{name: "stride2_pad1", op: &Conv{Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}, in: []*Array{x, ones},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 0, 1+2, 3+6, 4+5+7+8)}},
		{name: "asymmetric_pads", op: &Conv{Pads: []int{1, 0, 0, 0}}, in: []*Array{x, ones},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 3, 2}, 1, 3, 8, 12, 20, 24)}},
		{name: "dilation2", op: &Conv{Dilations: []int{2, 2}}, in: []*Array{x, ones},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 1, 1}, 0+2+6+8)}},
		{name: "same_upper", op: &Conv{AutoPad: "SAME_UPPER"}, in: []*Array{x, ones},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 3, 3}, 8, 12, 7, 20, 24, 13, 13, 15, 8)}},
		{name: "same_lower", op: &Conv{AutoPad: "SAME_LOWER"}, in: []*Array{x, ones},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 3, 3}, 0, 1, 3, 3, 8, 12, 9, 20, 24)}},
		{name: "valid_ignores_pads", op: &Conv{AutoPad: "VALID", Pads: []int{1, 1, 1, 1}}, in: []*Array{x, ones},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 8, 12, 20, 24)}},
		// A kernel wider than the input with padding that still fits: every
		// output position sees the whole input, each tap bounds-checked.
		{name: "kernel_wider_than_input", op: &Conv{Pads: []int{3, 3, 3, 3}},
			in:   []*Array{arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 1, 2, 3, 4), constArr(tensor.Shape{1, 1, 7, 7}, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 10, 10, 10, 10)}},
		{name: "conv1d", op: &Conv{Strides: []int{2}}, in: []*Array{iotaArr(f32T, tensor.Shape{1, 1, 5}), arrOf(f32T, tensor.Shape{1, 1, 2}, 1, -1)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2}, -1, -1)}},
		{name: "conv3d", op: &Conv{}, in: []*Array{iotaArr(f32T, tensor.Shape{1, 1, 2, 2, 2}), constArr(tensor.Shape{1, 1, 2, 2, 2}, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 1, 1, 1}, 28)}},
		{name: "depthwise", op: &Conv{Group: 2}, in: []*Array{iotaArr(f32T, tensor.Shape{1, 2, 1, 2}), arrOf(f32T, tensor.Shape{2, 1, 1, 1}, 2, -1)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 1, 2}, 0, 2, -2, -3)}},
		{name: "epilogue_residual_relu", op: &Conv{Epilogue: Epilogue{Act: ActRelu, Residual: true}},
			in:   []*Array{x, ones, nil, arrOf(f32T, tensor.Shape{1, 1, 2, 2}, -10, -10, -30, 0)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 0, 2, 0, 24)}},
		{name: "kernel_too_large", op: &Conv{}, in: []*Array{x, constArr(tensor.Shape{1, 1, 4, 4}, 1)}, err: "larger than the padded input"},
		{name: "bad_group", op: &Conv{Group: 2}, in: []*Array{iotaArr(f32T, tensor.Shape{1, 3, 2, 2}), constArr(tensor.Shape{2, 1, 1, 1}, 1)}, err: "group 2"},
		{name: "channel_mismatch", op: &Conv{}, in: []*Array{iotaArr(f32T, tensor.Shape{1, 3, 2, 2}), constArr(tensor.Shape{2, 2, 1, 1}, 1)}, err: "channels per group"},
		{name: "bad_bias", op: &Conv{}, in: []*Array{x, ones, arrOf(f32T, tensor.Shape{2}, 1, 2)}, err: "bias B"},
		{name: "bad_strides", op: &Conv{Strides: []int{1}}, in: []*Array{x, ones}, err: "strides"},
		{name: "bad_auto_pad", op: &Conv{AutoPad: "SAME"}, in: []*Array{x, ones}, err: "auto_pad"},
		{name: "residual_missing", op: &Conv{Epilogue: Epilogue{Residual: true}}, in: []*Array{x, ones}, err: "residual"},
	})
}

// constArr is a float32 array filled with v.
func constArr(shape tensor.Shape, v float64) *Array {
	a := NewArray(f32T, shape)
	for i := range a.Data {
		a.Data[i] = v
	}
	return a
}

// sliceAxis returns indices [lo, hi) of dimension dim.
func sliceAxis(a *Array, dim, lo, hi int) *Array {
	outer := a.Shape[:dim].NumElements()
	inner := a.Shape[dim+1:].NumElements()
	shape := a.Shape.Clone()
	shape[dim] = hi - lo
	out := NewArray(a.DType, shape)
	k := 0
	for o := 0; o < outer; o++ {
		for c := lo; c < hi; c++ {
			copy(out.Data[k:k+inner], a.Data[(o*a.Shape[dim]+c)*inner:])
			k += inner
		}
	}
	return out
}

func closeRel(t *testing.T, what string, got, want *Array, tol float64) {
	t.Helper()
	if !got.Shape.Equal(want.Shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, want.Shape)
	}
	scale := 0.0
	for _, v := range want.Data {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range got.Data {
		if d := math.Abs(got.Data[i] - want.Data[i]); d > tol*math.Max(scale, 1e-30) || math.IsNaN(got.Data[i]) != math.IsNaN(want.Data[i]) {
			t.Fatalf("%s: element %d is %g, want %g", what, i, got.Data[i], want.Data[i])
		}
	}
}

// A grouped convolution is the concatenation of independent convolutions
// over each group's channels.
func TestConvGroupsAreIndependentConvs(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for _, g := range []int{2, 3, 6} {
		x := randArr(r, tensor.Shape{2, 6, 7, 5})
		w := randArr(r, tensor.Shape{6, 6 / g, 3, 2})
		op := &Conv{Group: g, Strides: []int{2, 1}, Pads: []int{1, 0, 2, 1}, Dilations: []int{1, 2}}
		got := evalOne(t, op, x, w)
		one := &Conv{Strides: op.Strides, Pads: op.Pads, Dilations: op.Dilations}
		per := 6 / g
		for gi := 0; gi < g; gi++ {
			part := evalOne(t, one, sliceAxis(x, 1, gi*per, (gi+1)*per), sliceAxis(w, 0, gi*per, (gi+1)*per))
			closeRel(t, "group", sliceAxis(got, 1, gi*per, (gi+1)*per), part, 1e-12)
		}
	}
}

// dot is the inner product of two equally shaped arrays.
func dot(a, b *Array) float64 {
	s := 0.0
	for i := range a.Data {
		s += a.Data[i] * b.Data[i]
	}
	return s
}

// ConvTranspose is the adjoint of Conv: <Conv(x), y> = <x, ConvT(y)>.
func TestConvTransposeIsAdjointOfConv(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for _, c := range []struct {
		name      string
		in        tensor.Shape
		k         []int
		s, p, d   []int
		g         int
		outPadded bool
	}{
		{name: "plain", in: tensor.Shape{1, 2, 5, 5}, k: []int{3, 3}, g: 1},
		{name: "strided_padded", in: tensor.Shape{2, 4, 7, 6}, k: []int{3, 2}, s: []int{2, 2}, p: []int{1, 0, 1, 1}, g: 2},
		{name: "dilated", in: tensor.Shape{1, 3, 9}, k: []int{3}, d: []int{2}, s: []int{2}, g: 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			cin, cout := c.in[1], 2*c.g
			w := randArr(r, append(tensor.Shape{cout, cin / c.g}, c.k...))
			x := randArr(r, c.in)
			conv := &Conv{Strides: c.s, Pads: c.p, Dilations: c.d, Group: c.g}
			y := evalOne(t, conv, x, w)
			dy := randArr(r, y.Shape)
			// ConvTranspose's weight is [C_in(of it) = cout, cin/g, k...]:
			// the same tensor read the other way round.
			ct := &ConvTranspose{Strides: c.s, Pads: c.p, Dilations: c.d, Group: c.g, OutputShape: []int(c.in[2:])}
			dx := evalOne(t, ct, dy, w)
			if !dx.Shape.Equal(x.Shape) {
				t.Fatalf("ConvTranspose gave %v, want %v", dx.Shape, x.Shape)
			}
			a, b := dot(y, dy), dot(x, dx)
			if math.Abs(a-b) > 1e-9*math.Max(1, math.Abs(a)) {
				t.Fatalf("<conv(x), dy> = %g, <x, convT(dy)> = %g", a, b)
			}
		})
	}
}

func TestConvTransposeHand(t *testing.T) {
	x := arrOf(f32T, tensor.Shape{1, 1, 2}, 1, 2)
	w := arrOf(f32T, tensor.Shape{1, 1, 3}, 1, 10, 100)
	runOpCases(t, []opCase{
		{name: "stride1", op: &ConvTranspose{}, in: []*Array{x, w},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 4}, 1, 12, 120, 200)}},
		{name: "stride2", op: &ConvTranspose{Strides: []int{2}}, in: []*Array{x, w},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 5}, 1, 10, 102, 20, 200)}},
		{name: "stride2_output_padding", op: &ConvTranspose{Strides: []int{2}, OutputPadding: []int{1}}, in: []*Array{x, w},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 6}, 1, 10, 102, 20, 200, 0)}},
		{name: "pads", op: &ConvTranspose{Strides: []int{2}, Pads: []int{1, 1}}, in: []*Array{x, w, arrOf(f32T, tensor.Shape{1}, 0.5)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 3}, 10.5, 102.5, 20.5)}},
		{name: "output_shape_same_upper", op: &ConvTranspose{Strides: []int{2}, AutoPad: "SAME_UPPER"}, in: []*Array{x, w},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 4}, 1, 10, 102, 20)}},
		{name: "output_shape_same_lower", op: &ConvTranspose{Strides: []int{2}, AutoPad: "SAME_LOWER"}, in: []*Array{x, w},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 4}, 10, 102, 20, 200)}},
		// An output_shape beyond the full result makes the total padding
		// negative (-2): begin gets total - floor(total/2) = -1, one zero
		// before, and the end the other.
		{name: "output_shape_beyond_full", op: &ConvTranspose{OutputShape: []int{6}}, in: []*Array{x, w},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 6}, 0, 1, 12, 120, 200, 0)}},
		{name: "bad_output_shape", op: &ConvTranspose{OutputShape: []int{0}}, in: []*Array{x, w}, err: "must be positive"},
	})
}

func TestPool(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{1, 1, 3, 3}) // 0..8
	runOpCases(t, []opCase{
		{name: "max_2x2", op: &Pool{Max: true, Kernel: []int{2, 2}}, in: []*Array{x},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 4, 5, 7, 8), arrOf(i64T, tensor.Shape{1, 1, 2, 2}, 4, 5, 7, 8)}},
		{name: "max_storage_order_1", op: &Pool{Max: true, Kernel: []int{2, 2}, StorageOrder: 1}, in: []*Array{x},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 4, 5, 7, 8), arrOf(i64T, tensor.Shape{1, 1, 2, 2}, 4, 7, 5, 8)}},
		{name: "max_ceil_mode", op: &Pool{Max: true, Kernel: []int{2, 2}, Strides: []int{2, 2}, CeilMode: true}, in: []*Array{x},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 4, 5, 7, 8), arrOf(i64T, tensor.Shape{1, 1, 2, 2}, 4, 5, 7, 8)}},
		{name: "max_floor_mode", op: &Pool{Max: true, Kernel: []int{2, 2}, Strides: []int{2, 2}}, in: []*Array{x},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 1, 1}, 4), arrOf(i64T, tensor.Shape{1, 1, 1, 1}, 4)}},
		{name: "max_padded_dilated", op: &Pool{Max: true, Kernel: []int{2, 2}, Pads: []int{1, 1, 1, 1}, Dilations: []int{2, 2}, Strides: []int{3, 3}}, in: []*Array{arrOf(f32T, tensor.Shape{1, 1, 3, 3}, -1, -2, -3, -4, -5, -6, -7, -8, -9)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 1, 1}, -5), arrOf(i64T, tensor.Shape{1, 1, 1, 1}, 4)}},
		{name: "avg_exclude_pad", op: &Pool{Kernel: []int{2, 2}, Pads: []int{1, 1, 0, 0}}, in: []*Array{x},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 3, 3}, 0, 0.5, 1.5, 1.5, 2, 3, 4.5, 5, 6)}},
		{name: "avg_include_pad", op: &Pool{Kernel: []int{2, 2}, Pads: []int{1, 1, 0, 0}, CountIncludePad: true}, in: []*Array{x},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 3, 3}, 0, 0.25, 0.75, 0.75, 2, 3, 2.25, 5, 6)}},
		// ceil_mode's extra window runs past the end padding; those
		// positions count neither way.
		{name: "avg_ceil_include_pad", op: &Pool{Kernel: []int{2, 2}, Strides: []int{2, 2}, CeilMode: true, CountIncludePad: true}, in: []*Array{x},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2, 2}, 2, 3.5, 6.5, 8)}},
		{name: "avg_same_upper", op: &Pool{Kernel: []int{2, 2}, AutoPad: "SAME_UPPER"}, in: []*Array{x},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 3, 3}, 2, 3, 3.5, 5, 6, 6.5, 6.5, 7.5, 8)}},
		{name: "avg_1d_stride", op: &Pool{Kernel: []int{3}, Strides: []int{2}}, in: []*Array{iotaArr(f32T, tensor.Shape{1, 2, 5})},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 2}, 1, 3, 6, 8)}},
		{name: "no_kernel", op: &Pool{}, in: []*Array{x}, err: "kernel_shape"},
		{name: "rank2", op: &Pool{Kernel: []int{2}}, in: []*Array{iotaArr(f32T, tensor.Shape{2, 2})}, err: "rank 3"},
		{name: "lp2_padded", op: &LpPool{P: 2, Pool: Pool{Kernel: []int{2}, Pads: []int{1, 0}}}, in: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2}, 3, -4)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2}, 3, 5)}},
		{name: "lp1", op: &LpPool{P: 1, Pool: Pool{Kernel: []int{2}}}, in: []*Array{arrOf(f32T, tensor.Shape{1, 1, 3}, 1, -2, 3)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2}, 3, 5)}},
		{name: "lp_bad_p", op: &LpPool{Pool: Pool{Kernel: []int{2}}}, in: []*Array{arrOf(f32T, tensor.Shape{1, 1, 3}, 1, -2, 3)}, err: "p 0"},
		{name: "global_lp2", op: &GlobalLpPool{P: 2}, in: []*Array{arrOf(f32T, tensor.Shape{1, 1, 2}, 3, 4)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 1, 1}, 5)}},
		{name: "global_avg", op: &GlobalPool{}, in: []*Array{iotaArr(f32T, tensor.Shape{1, 2, 2, 2})},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 1, 1}, 1.5, 5.5)}},
		{name: "global_max", op: &GlobalPool{Max: true}, in: []*Array{iotaArr(f32T, tensor.Shape{1, 2, 3})},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 1}, 2, 5)}},
	})
}
