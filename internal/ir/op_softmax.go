package ir

import (
	"fmt"
	"math"

	"goinfer/internal/tensor"
)

// Kind implements Op.
func (s *Softmax) Kind() string {
	switch {
	case s.Hard:
		return "Hardmax"
	case s.Log:
		return "LogSoftmax"
	}
	return "Softmax"
}

// plan returns the rows normalized: outer rows of n elements each spaced
// stride apart.
func (s *Softmax) plan(x tensor.Shape) (outer, n, stride int, err error) {
	if len(x) == 0 {
		if s.Coerce2D {
			return 1, 1, 1, nil
		}
		return 0, 0, 0, fmt.Errorf("input must have rank 1 or more")
	}
	axis, err := axisOf(s.Axis, len(x), "axis")
	if err != nil {
		return 0, 0, 0, err
	}
	if s.Coerce2D {
		return x[:axis].NumElements(), x[axis:].NumElements(), 1, nil
	}
	return x[:axis].NumElements(), x[axis], x[axis+1:].NumElements(), nil
}

// Infer implements Op.
func (s *Softmax) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if err := wantFloat(in, 0); err != nil {
		return nil, err
	}
	if _, _, _, err := s.plan(in[0].Type.Shape); err != nil {
		return nil, err
	}
	return []Type{sameType(in[0].Type)}, nil
}

// Eval implements Op.
func (s *Softmax) Eval(in []*Array) ([]*Array, error) {
	if err := inferArrays(s, in); err != nil {
		return nil, err
	}
	x := in[0]
	outer, n, stride, err := s.plan(x.Shape)
	if err != nil {
		return nil, err
	}
	y := NewArray(x.DType, x.Shape)
	row := make([]float64, n)
	for o := 0; o < outer; o++ {
		for in := 0; in < stride; in++ {
			base := o*n*stride + in
			m := math.Inf(-1)
			at := 0
			for i := range row {
				row[i] = x.Data[base+i*stride]
				if row[i] > m {
					m, at = row[i], i
				}
			}
			if s.Hard {
				for i := range row {
					y.Data[base+i*stride] = b2f(i == at)
				}
				continue
			}
			sum := 0.0
			for _, v := range row {
				sum += math.Exp(v - m)
			}
			for i, v := range row {
				if s.Log {
					y.Data[base+i*stride] = v - m - math.Log(sum)
				} else {
					y.Data[base+i*stride] = math.Exp(v-m) / sum
				}
			}
		}
	}
	return []*Array{y}, nil
}
