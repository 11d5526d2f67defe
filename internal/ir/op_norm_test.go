package ir

import (
	"math"
	"math/rand"
	"testing"

	"goinfer/internal/tensor"
)

func TestNorms(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{1, 2, 2}) // channel 0: 0,1; channel 1: 2,3
	v := func(vs ...float64) *Array { return arrOf(f32T, tensor.Shape{len(vs)}, vs...) }
	s5 := 1 / math.Sqrt(0.25+1e-5)
	runOpCases(t, []opCase{
		{name: "batchnorm", op: &BatchNorm{Epsilon: 0}, in: []*Array{x, v(1, 2), v(0, 1), v(1, 2), v(4, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 2}, -0.5, 0, 1, 3)}},
		{name: "batchnorm_per_activation", op: &BatchNorm{}, in: []*Array{x, constArr(tensor.Shape{2, 2}, 1), constArr(tensor.Shape{2, 2}, 0), iotaArr(f32T, tensor.Shape{2, 2}), constArr(tensor.Shape{2, 2}, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 2}, 0, 0, 0, 0)}},
		{name: "batchnorm_bad_param", op: &BatchNorm{}, in: []*Array{x, v(1), v(0, 1), v(1, 2), v(4, 1)}, err: "scale"},
		{name: "layernorm_last", op: &LayerNorm{Axis: -1, Epsilon: 1e-5}, in: []*Array{x, v(1, 2), v(0, 10)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 2}, -0.5*s5, 10+s5, -0.5*s5, 10+s5),
				arrOf(f32T, tensor.Shape{1, 2, 1}, 0.5, 2.5), arrOf(f32T, tensor.Shape{1, 2, 1}, s5, s5)}},
		{name: "layernorm_bad_scale", op: &LayerNorm{Axis: -1}, in: []*Array{x, v(1, 2, 3)}, err: "normalised shape"},
		{name: "instancenorm", op: &InstanceNorm{Epsilon: 1e-5}, in: []*Array{iotaArr(f32T, tensor.Shape{1, 2, 2}), v(1, 2), v(0, 1)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 2, 2}, -0.5*s5, 0.5*s5, 1-s5, 1+s5)}},
		{name: "lrn", op: &LRN{Alpha: 3, Beta: 1, Bias: 1, Size: 3}, in: []*Array{arrOf(f32T, tensor.Shape{1, 3, 1}, 1, 2, 3)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 3, 1}, 1.0/6, 2.0/15, 3.0/14)}},
		{name: "lrn_size2", op: &LRN{Alpha: 2, Beta: 1, Bias: 0, Size: 2}, in: []*Array{arrOf(f32T, tensor.Shape{1, 3, 1}, 1, 2, 3)},
			want: []*Array{arrOf(f32T, tensor.Shape{1, 3, 1}, 1.0/5, 2.0/13, 3.0/9)}},
	})
}

// LayerNorm over a tensor's last axes equals it over the flattened row.
func TestLayerNormAxisIsFlattenedRow(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	x := randArr(r, tensor.Shape{2, 3, 4})
	scale := randArr(r, tensor.Shape{3, 4})
	got := evalOne(t, &LayerNorm{Axis: 1, Epsilon: 1e-5}, x, scale)
	flat := x.Clone()
	flat.Shape = tensor.Shape{2, 12}
	fs := scale.Clone()
	fs.Shape = tensor.Shape{12}
	want := evalOne(t, &LayerNorm{Axis: -1, Epsilon: 1e-5}, flat, fs)
	want.Shape = got.Shape
	closeRel(t, "layernorm", got, want, 1e-12)
}

// Eval called without Infer (an unbound graph given other shapes) refuses
// inputs that do not fit instead of indexing past them.
func TestEvalRefusesMisfitInputs(t *testing.T) {
	x := iotaArr(f32T, tensor.Shape{1, 3, 2})
	short := arrOf(f32T, tensor.Shape{2}, 1, 1)
	for _, c := range []struct {
		op Op
		in []*Array
	}{
		{&BatchNorm{}, []*Array{x, short, short, short, short}},
		{&InstanceNorm{}, []*Array{x, short, short}},
		{&LayerNorm{Axis: -1}, []*Array{x, arrOf(f32T, tensor.Shape{3}, 1, 1, 1)}},
		{&LRN{Size: 0}, []*Array{x}},
		{&Gemm{Alpha: 1, Beta: 1}, []*Array{iotaArr(f32T, tensor.Shape{2, 2}), iotaArr(f32T, tensor.Shape{2, 2}), arrOf(f32T, tensor.Shape{3}, 1, 2, 3)}},
		{&Clip{}, []*Array{x, arrOf(f32T, tensor.Shape{0})}},
		{&Softmax{Axis: 3}, []*Array{x}},
		{&Conv{}, []*Array{x, iotaArr(f32T, tensor.Shape{2, 3, 1}), short.Clone(), nil}},
		{&Conv{}, []*Array{x, iotaArr(f32T, tensor.Shape{2, 3, 1}), arrOf(f32T, tensor.Shape{1}, 1)}},
		{&ConvTranspose{}, []*Array{x, iotaArr(f32T, tensor.Shape{3, 2, 1}), arrOf(f32T, tensor.Shape{1}, 1)}},
		{&GlobalPool{}, []*Array{arrOf(f32T, tensor.Shape{2}, 1, 2)}},
		{&GlobalLpPool{P: 2}, []*Array{arrOf(f32T, tensor.Shape{2}, 1, 2)}},
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic %v", c.op.Kind(), r)
				}
			}()
			if _, err := c.op.Eval(c.in); err == nil {
				t.Errorf("%s: Eval accepted misfit inputs", c.op.Kind())
			}
		}()
	}
}
