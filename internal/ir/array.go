package ir

import (
	"encoding/binary"
	"fmt"
	"math"

	"goinfer/internal/tensor"
)

// Array is the reference evaluator's tensor: float64 values of a logical
// dtype. Integers and booleans are held exactly (shapes and indices stay
// far below 2^53); converting back to the dtype rounds and wraps as the
// dtype would.
type Array struct {
	DType tensor.DType
	Shape tensor.Shape
	Data  []float64
}

// NewArray returns a zeroed array.
func NewArray(dt tensor.DType, shape tensor.Shape) *Array {
	return &Array{DType: dt, Shape: shape.Clone(), Data: make([]float64, shape.NumElements())}
}

// Scalar returns a rank-0 array.
func Scalar(dt tensor.DType, v float64) *Array {
	return &Array{DType: dt, Shape: tensor.Shape{}, Data: []float64{v}}
}

// Clone returns a deep copy.
func (a *Array) Clone() *Array {
	return &Array{DType: a.DType, Shape: a.Shape.Clone(), Data: append([]float64(nil), a.Data...)}
}

// Ints returns the values as ints (shape and index tensors).
func (a *Array) Ints() []int {
	out := make([]int, len(a.Data))
	for i, v := range a.Data {
		out[i] = int(v)
	}
	return out
}

// Strides returns the row-major element strides of shape.
func Strides(shape tensor.Shape) []int {
	s := make([]int, len(shape))
	n := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = n
		n *= shape[i]
	}
	return s
}

// ArrayFromTensor converts a tensor's values to float64.
func ArrayFromTensor(t *tensor.Tensor) (*Array, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	n := t.NumElements()
	a := &Array{DType: t.DType, Shape: t.Shape.Clone(), Data: make([]float64, n)}
	b := t.Data
	le := binary.LittleEndian
	switch t.DType {
	case tensor.Float32:
		for i := range a.Data {
			a.Data[i] = float64(math.Float32frombits(le.Uint32(b[4*i:])))
		}
	case tensor.Float64:
		for i := range a.Data {
			a.Data[i] = math.Float64frombits(le.Uint64(b[8*i:]))
		}
	case tensor.Float16:
		for i := range a.Data {
			a.Data[i] = float64(tensor.F16ToFloat32(le.Uint16(b[2*i:])))
		}
	case tensor.BFloat16:
		for i := range a.Data {
			a.Data[i] = float64(tensor.BF16ToFloat32(le.Uint16(b[2*i:])))
		}
	case tensor.Uint8:
		for i := range a.Data {
			a.Data[i] = float64(b[i])
		}
	case tensor.Int8:
		for i := range a.Data {
			a.Data[i] = float64(int8(b[i]))
		}
	case tensor.Int32:
		for i := range a.Data {
			a.Data[i] = float64(int32(le.Uint32(b[4*i:])))
		}
	case tensor.Int64:
		for i := range a.Data {
			a.Data[i] = float64(int64(le.Uint64(b[8*i:])))
		}
	case tensor.Bool:
		for i := range a.Data {
			if b[i] != 0 {
				a.Data[i] = 1
			}
		}
	default:
		return nil, fmt.Errorf("ir: no reference conversion from %s", t.DType)
	}
	return a, nil
}

// Tensor converts the array to its dtype's bytes: floats round to nearest,
// integers truncate toward zero and wrap, booleans are v != 0. int64
// saturates instead: float64 holds INT64_MAX (the "to the end" of exports'
// Slice ends) as 2^63, which would wrap to the most negative value.
func (a *Array) Tensor() (*tensor.Tensor, error) {
	t := tensor.New(a.DType, a.Shape...)
	b := t.Data
	le := binary.LittleEndian
	switch a.DType {
	case tensor.Float32:
		for i, v := range a.Data {
			le.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		}
	case tensor.Float64:
		for i, v := range a.Data {
			le.PutUint64(b[8*i:], math.Float64bits(v))
		}
	case tensor.Float16:
		for i, v := range a.Data {
			le.PutUint16(b[2*i:], tensor.Float32ToF16(float32(v)))
		}
	case tensor.BFloat16:
		for i, v := range a.Data {
			le.PutUint16(b[2*i:], tensor.Float32ToBF16(float32(v)))
		}
	case tensor.Uint8, tensor.Int8:
		for i, v := range a.Data {
			b[i] = byte(int64(v))
		}
	case tensor.Int32:
		for i, v := range a.Data {
			le.PutUint32(b[4*i:], uint32(int64(v)))
		}
	case tensor.Int64:
		for i, v := range a.Data {
			le.PutUint64(b[8*i:], uint64(int64(satInt(v))))
		}
	case tensor.Bool:
		for i, v := range a.Data {
			if v != 0 {
				b[i] = 1
			}
		}
	default:
		return nil, fmt.Errorf("ir: no conversion of a reference array to %s", a.DType)
	}
	return t, nil
}

// RoundTo makes the values exactly representable in the array's dtype, as
// storing them there would (float32 rounding, integer truncation).
func (a *Array) RoundTo() {
	switch a.DType {
	case tensor.Float32:
		for i, v := range a.Data {
			a.Data[i] = float64(float32(v))
		}
	case tensor.Float16:
		for i, v := range a.Data {
			a.Data[i] = float64(tensor.F16ToFloat32(tensor.Float32ToF16(float32(v))))
		}
	case tensor.BFloat16:
		for i, v := range a.Data {
			a.Data[i] = float64(tensor.BF16ToFloat32(tensor.Float32ToBF16(float32(v))))
		}
	case tensor.Int64, tensor.Int32, tensor.Int8, tensor.Uint8:
		for i, v := range a.Data {
			a.Data[i] = math.Trunc(v)
		}
	case tensor.Bool:
		for i, v := range a.Data {
			if v != 0 {
				a.Data[i] = 1
			}
		}
	}
}

// BroadcastShape returns the NumPy broadcast of shapes, or an error naming
// them.
func BroadcastShape(shapes ...tensor.Shape) (tensor.Shape, error) {
	rank := 0
	for _, s := range shapes {
		rank = max(rank, len(s))
	}
	out := make(tensor.Shape, rank)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := rank - len(s)
		for i, d := range s {
			switch o := out[off+i]; {
			case d == o || d == 1:
			case o == 1:
				out[off+i] = d
			default:
				return nil, fmt.Errorf("shapes %v do not broadcast (dimension %d: %d vs %d)", shapes, off+i-rank, o, d)
			}
		}
	}
	return out, nil
}

// BroadcastIndex maps each element of out (row-major) to the element of an
// array of shape in that NumPy broadcasting reads.
func BroadcastIndex(in, out tensor.Shape) []int {
	n := out.NumElements()
	idx := make([]int, n)
	rank := len(out)
	off := rank - len(in)
	inStr := Strides(in)
	// Per output dimension, the input stride (0 where broadcast).
	str := make([]int, rank)
	for i := range in {
		if in[i] != 1 {
			str[off+i] = inStr[i]
		}
	}
	coord := make([]int, rank)
	p := 0
	for k := 0; k < n; k++ {
		idx[k] = p
		for d := rank - 1; d >= 0; d-- {
			coord[d]++
			p += str[d]
			if coord[d] < out[d] {
				break
			}
			p -= str[d] * coord[d]
			coord[d] = 0
		}
	}
	return idx
}
