package ir

import (
	"testing"

	"goinfer/internal/tensor"
)

// FuzzNNOps gives the NN ops random input shapes (and Resize random
// scales or sizes): Eval, with or without Infer first, errs or succeeds
// with Infer's types; it never panics.
func FuzzNNOps(f *testing.F) {
	f.Add([]byte{0, 2, 3, 4, 1, 3})
	f.Add([]byte{5, 3, 2, 2, 4, 1, 2, 2})
	f.Add([]byte{9, 4, 1, 2, 3, 3, 2, 1, 0})
	modes := []string{"nearest", "linear", "cubic"}
	coords := []string{"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzInts{b: data}
		which := r.next(0, 12)
		rank := r.next(1, 4)
		shape := func() tensor.Shape {
			s := make(tensor.Shape, rank)
			for i := range s {
				s[i] = r.next(1, 4)
			}
			return s
		}
		vec := func() *Array { return iotaArr(f32T, tensor.Shape{r.next(1, 4)}) }
		x := iotaArr(f32T, shape())
		var op Op
		in := []*Array{x}
		switch which {
		case 0:
			op, in = &BatchNorm{Epsilon: 1e-5}, []*Array{x, vec(), vec(), vec(), constArr(tensor.Shape{r.next(1, 4)}, 1)}
		case 1:
			op, in = &LayerNorm{Axis: r.next(-3, 6), Epsilon: 1e-5}, []*Array{x, iotaArr(f32T, shape())}
		case 2:
			op, in = &InstanceNorm{Epsilon: 1e-5}, []*Array{x, vec(), vec()}
		case 3:
			op = &LRN{Alpha: 1e-4, Beta: 0.75, Bias: 1, Size: r.next(0, 4)}
		case 4:
			op = &Softmax{Axis: r.next(-4, 8), Log: r.next(0, 2) == 1, Hard: r.next(0, 2) == 1, Coerce2D: r.next(0, 2) == 1}
		case 5:
			op, in = &Gemm{Alpha: 1, Beta: 1, TransA: r.next(0, 2) == 1, TransB: r.next(0, 2) == 1}, []*Array{x, iotaArr(f32T, shape()), vec()}
		case 6:
			op, in = &MatMul{}, []*Array{x, iotaArr(f32T, shape())}
		case 7:
			op, in = &Clip{}, []*Array{x, arrOf(f32T, tensor.Shape{}, 1), iotaArr(f32T, tensor.Shape{r.next(0, 2)})}
		case 8:
			op = &GlobalPool{Max: r.next(0, 2) == 1}
		case 9, 10:
			rs := &Resize{Mode: modes[r.next(0, 3)], CoordinateTransformMode: coords[r.next(0, len(coords))], NearestMode: "round_prefer_floor",
				CubicCoeffA: -0.75, ExcludeOutside: r.next(0, 2) == 1, Antialias: r.next(0, 2) == 1}
			if rs.Mode == "nearest" {
				rs.Antialias = false
			}
			roi := NewArray(f32T, tensor.Shape{2 * rank})
			for i := range roi.Data {
				roi.Data[i] = float64(r.next(0, 5)) / 4
			}
			if which == 9 {
				sc := NewArray(f32T, tensor.Shape{rank})
				for i := range sc.Data {
					sc.Data[i] = float64(r.next(1, 12)) / 4
				}
				op, in = rs, []*Array{x, roi, sc}
			} else {
				sz := NewArray(i64T, tensor.Shape{rank})
				for i := range sz.Data {
					sz.Data[i] = float64(r.next(0, 7))
				}
				rs.KeepAspectRatioPolicy = []string{"stretch", "not_larger", "not_smaller"}[r.next(0, 3)]
				op, in = rs, []*Array{x, roi, nil, sz}
			}
		default:
			op = &LpPool{P: r.next(0, 3), Pool: Pool{Kernel: []int(shape()[:max(0, rank-2)])}}
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s %+v on %v: Eval without Infer panicked: %v", op.Kind(), op, x.Shape, p)
				}
			}()
			_, _ = op.Eval(in)
		}()
		vals := make([]*Value, len(in))
		for i, a := range in {
			if a != nil {
				tt, err := a.Tensor()
				if err != nil {
					t.Fatal(err)
				}
				vals[i] = &Value{Name: "v", Type: Type{DType: a.DType, Shape: a.Shape}, Const: tt}
			}
		}
		types, err := op.Infer(vals)
		if err != nil {
			return
		}
		if types[0].Shape.NumElements() > 1<<16 {
			return
		}
		out, err := op.Eval(in)
		if err != nil {
			t.Fatalf("%s %+v on %v: Infer accepted, Eval failed: %v", op.Kind(), op, x.Shape, err)
		}
		if !out[0].Shape.Equal(types[0].Shape) || out[0].DType != types[0].DType {
			t.Fatalf("%s %+v on %v: Infer %s, Eval %s%v", op.Kind(), op, x.Shape, types[0], out[0].DType, out[0].Shape)
		}
	})
}
