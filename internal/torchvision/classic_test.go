package torchvision

import (
	"context"
	"math"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// TestAdaptiveAvgPool compares each of adaptiveAvgPool's lowerings with
// AdaptiveAvgPool2d's definition: output cell i averages input rows
// floor(i*h/out) to ceil((i+1)*h/out), and the same for columns.
func TestAdaptiveAvgPool(t *testing.T) {
	const c = 2
	for _, tc := range []struct{ h, out int }{{6, 6}, {1, 3}, {6, 3}, {5, 3}, {7, 6}, {3, 7}} {
		b := newBuilder(nil)
		x := &ir.Value{Name: "x", Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape{ir.Dynamic, c, tc.h, tc.h}}}
		b.g.Inputs = []*ir.Value{x}
		b.g.Outputs = []*ir.Value{b.adaptiveAvgPool("pool", x, c, tc.h, tc.out)}
		in := ir.NewArray(tensor.Float32, tensor.Shape{2, c, tc.h, tc.h})
		for i := range in.Data {
			in.Data[i] = float64(float32(math.Sin(float64(i))))
		}
		res, err := ir.EvaluateBound(context.Background(), b.g, map[string]*ir.Array{"x": in})
		if err != nil {
			t.Fatalf("%d -> %d: %v", tc.h, tc.out, err)
		}
		got := res[0]
		if !got.Shape.Equal(tensor.Shape{2, c, tc.out, tc.out}) {
			t.Fatalf("%d -> %d: shape %v", tc.h, tc.out, got.Shape)
		}
		k := 0
		for n := 0; n < 2*c; n++ {
			plane := in.Data[n*tc.h*tc.h:]
			for i := 0; i < tc.out; i++ {
				r0, r1 := i*tc.h/tc.out, ((i+1)*tc.h+tc.out-1)/tc.out
				for j := 0; j < tc.out; j++ {
					c0, c1 := j*tc.h/tc.out, ((j+1)*tc.h+tc.out-1)/tc.out
					var sum float64
					for r := r0; r < r1; r++ {
						for col := c0; col < c1; col++ {
							sum += plane[r*tc.h+col]
						}
					}
					want := sum / float64((r1-r0)*(c1-c0))
					if math.Abs(got.Data[k]-want) > 1e-7 {
						t.Fatalf("%d -> %d: cell %d = %v, want %v", tc.h, tc.out, k, got.Data[k], want)
					}
					k++
				}
			}
		}
	}
}
