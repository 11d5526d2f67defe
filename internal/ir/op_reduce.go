package ir

import (
	"fmt"
	"math"
	"sort"

	"goinfer/internal/tensor"
)

// ReduceKind names a reduction (ONNX op names).
type ReduceKind string

// The reductions.
const (
	ReduceMean      ReduceKind = "ReduceMean"
	ReduceSum       ReduceKind = "ReduceSum"
	ReduceMax       ReduceKind = "ReduceMax"
	ReduceMin       ReduceKind = "ReduceMin"
	ReduceProd      ReduceKind = "ReduceProd"
	ReduceL1        ReduceKind = "ReduceL1"
	ReduceL2        ReduceKind = "ReduceL2"
	ReduceSumSquare ReduceKind = "ReduceSumSquare"
	ReduceLogSum    ReduceKind = "ReduceLogSum"
	ReduceLogSumExp ReduceKind = "ReduceLogSumExp"
)

// Reduce reduces its input over some axes (opset 18 semantics for every
// kind). The axes come from the optional second input (int64, 1-D) when
// it is present, else from Axes; negative ones count from the back. No
// axes means all of them, or none with NoopWithEmptyAxes (each element is
// then reduced alone: ReduceSumSquare squares, ReduceL1 takes |x|).
// KeepDims keeps reduced dimensions as size 1.
type Reduce struct {
	Fn                ReduceKind
	Axes              []int
	KeepDims          bool
	NoopWithEmptyAxes bool
}

// Kind implements Op.
func (r *Reduce) Kind() string { return string(r.Fn) }

func (r *Reduce) check(dt tensor.DType) error {
	switch r.Fn {
	case ReduceMax, ReduceMin:
		return nil
	case ReduceMean, ReduceSum, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp:
		if dt == tensor.Bool {
			return fmt.Errorf("%s of bool is not defined", r.Fn)
		}
		return nil
	}
	return fmt.Errorf("unknown reduction %q", r.Fn)
}

// plan marks the reduced dimensions and returns the output shape.
func (r *Reduce) plan(shape tensor.Shape, axes []int) ([]bool, tensor.Shape, error) {
	red := make([]bool, len(shape))
	if len(axes) == 0 {
		if r.NoopWithEmptyAxes {
			return red, shape.Clone(), nil
		}
		for i := range red {
			red[i] = true
		}
	} else {
		ax, err := axesOf(axes, len(shape), string(r.Fn)+"'s axes")
		if err != nil {
			return nil, nil, err
		}
		for _, a := range ax {
			red[a] = true
		}
	}
	out := tensor.Shape{}
	for d, n := range shape {
		switch {
		case !red[d]:
			out = append(out, n)
		case r.KeepDims:
			out = append(out, 1)
		}
	}
	return red, out, nil
}

// Infer implements Op.
func (r *Reduce) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 2); err != nil {
		return nil, err
	}
	if err := r.check(in[0].Type.DType); err != nil {
		return nil, err
	}
	axes := r.Axes
	if len(in) == 2 && in[1] != nil {
		var err error
		if axes, err = loadTimeVector(in[1], string(r.Fn)+"'s axes input"); err != nil {
			return nil, err
		}
	}
	_, out, err := r.plan(in[0].Type.Shape, axes)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (r *Reduce) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	if err := r.check(x.DType); err != nil {
		return nil, err
	}
	axes := r.Axes
	if len(in) == 2 && in[1] != nil {
		var err error
		if axes, err = arrayInts(in[1], string(r.Fn)+"'s axes input"); err != nil {
			return nil, err
		}
	}
	red, shape, err := r.plan(x.Shape, axes)
	if err != nil {
		return nil, err
	}
	// Output offsets of each input coordinate: the kept-dims shape's
	// strides, 0 along reduced dimensions.
	kept := x.Shape.Clone()
	count := 1
	for d := range kept {
		if red[d] {
			count *= kept[d]
			kept[d] = 1
		}
	}
	ostr := Strides(kept)
	for d := range ostr {
		if red[d] {
			ostr[d] = 0
		}
	}
	out := NewArray(x.DType, shape)
	acc := out.Data
	init := 0.0
	switch r.Fn {
	case ReduceProd:
		init = 1
	case ReduceMax, ReduceLogSumExp:
		init = math.Inf(-1)
	case ReduceMin:
		init = math.Inf(1)
	}
	for i := range acc {
		acc[i] = init
	}
	if r.Fn == ReduceLogSumExp {
		// First the maxima, so that the exponentials do not overflow.
		eachCoord(x.Shape, func(k int, c []int) {
			o := flatIndex(c, ostr)
			acc[o] = maxNaN(acc[o], x.Data[k])
		})
		sums := make([]float64, len(acc))
		eachCoord(x.Shape, func(k int, c []int) {
			o := flatIndex(c, ostr)
			if !math.IsInf(acc[o], 0) {
				sums[o] += math.Exp(x.Data[k] - acc[o])
			}
		})
		for o, m := range acc {
			if !math.IsInf(m, 0) {
				acc[o] = m + math.Log(sums[o])
			}
		}
	} else {
		eachCoord(x.Shape, func(k int, c []int) {
			o := flatIndex(c, ostr)
			v := x.Data[k]
			switch r.Fn {
			case ReduceSum, ReduceMean, ReduceLogSum:
				acc[o] += v
			case ReduceProd:
				acc[o] *= v
			case ReduceMax:
				acc[o] = maxNaN(acc[o], v)
			case ReduceMin:
				acc[o] = -maxNaN(-acc[o], -v)
			case ReduceL1:
				acc[o] += math.Abs(v)
			case ReduceL2, ReduceSumSquare:
				acc[o] += v * v
			}
		})
	}
	for o, v := range acc {
		switch r.Fn {
		case ReduceMean:
			acc[o] = v / float64(count)
		case ReduceL2:
			acc[o] = math.Sqrt(v)
		case ReduceLogSum:
			acc[o] = math.Log(v)
		}
	}
	if !isFloatType(x.DType) {
		// An empty Max or Min gives the dtype's extreme, not an infinity.
		lo, hi := dtypeRange(x.DType)
		for o, v := range acc {
			acc[o] = min(max(v, lo), hi)
		}
	}
	out.RoundTo()
	return []*Array{out}, nil
}

// maxNaN is max propagating NaN, as NumPy's maximum.
func maxNaN(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return math.Max(a, b)
}

// dtypeRange is the least and greatest value of an integer or bool dtype.
func dtypeRange(dt tensor.DType) (lo, hi float64) {
	switch dt {
	case tensor.Bool:
		return 0, 1
	case tensor.Uint8:
		return 0, math.MaxUint8
	case tensor.Int8:
		return math.MinInt8, math.MaxInt8
	case tensor.Int32:
		return math.MinInt32, math.MaxInt32
	}
	return math.MinInt64, math.MaxInt64
}

// ArgReduce is ArgMax (Max set) or ArgMin: the int64 index of the
// greatest or least element along Axis, the first one among equals unless
// SelectLastIndex. KeepDims keeps the axis as size 1. NaN counts as the
// extreme, as NumPy's argmax and argmin do.
type ArgReduce struct {
	Max             bool
	Axis            int
	KeepDims        bool
	SelectLastIndex bool
}

// Kind implements Op.
func (a *ArgReduce) Kind() string {
	if a.Max {
		return "ArgMax"
	}
	return "ArgMin"
}

func (a *ArgReduce) plan(shape tensor.Shape) (int, tensor.Shape, error) {
	if len(shape) == 0 {
		return 0, nil, fmt.Errorf("%s of a scalar: the input needs rank 1 or more", a.Kind())
	}
	axis, err := axisOf(a.Axis, len(shape), a.Kind()+"'s axis")
	if err != nil {
		return 0, nil, err
	}
	if shape[axis] == 0 {
		return 0, nil, fmt.Errorf("%s along the empty dimension %d of %v", a.Kind(), axis, shape)
	}
	out := shape.Clone()
	if a.KeepDims {
		out[axis] = 1
	} else {
		out = append(out[:axis], out[axis+1:]...)
	}
	return axis, out, nil
}

// Infer implements Op.
func (a *ArgReduce) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if in[0].Type.DType == tensor.Bool {
		return nil, fmt.Errorf("%s of bool is not defined", a.Kind())
	}
	_, out, err := a.plan(in[0].Type.Shape)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: tensor.Int64, Shape: out}}, nil
}

// Eval implements Op.
func (a *ArgReduce) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	axis, shape, err := a.plan(x.Shape)
	if err != nil {
		return nil, err
	}
	outer := x.Shape[:axis].NumElements()
	n := x.Shape[axis]
	inner := x.Shape[axis+1:].NumElements()
	sign := 1.0
	if !a.Max {
		sign = -1
	}
	out := NewArray(tensor.Int64, shape)
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			base := o*n*inner + i
			best, bi := x.Data[base]*sign, 0
			for j := 1; j < n && !math.IsNaN(best); j++ {
				v := x.Data[base+j*inner] * sign
				if v > best || math.IsNaN(v) || a.SelectLastIndex && v == best {
					best, bi = v, j
				}
			}
			out.Data[o*inner+i] = float64(bi)
		}
	}
	return []*Array{out}, nil
}

// TopK outputs the K greatest (Largest) or least elements along Axis and
// their int64 indices; K is its second input, an int64 tensor of one
// element. Results are always sorted, equal values in index order, which
// also satisfies Sorted false (ONNX leaves that order unspecified). ONNX's
// defaults are Largest and Sorted true.
type TopK struct {
	Axis    int
	Largest bool
	Sorted  bool
}

// Kind implements Op.
func (*TopK) Kind() string { return "TopK" }

func (t *TopK) plan(shape tensor.Shape, k int) (int, tensor.Shape, error) {
	if len(shape) == 0 {
		return 0, nil, fmt.Errorf("TopK of a scalar: the input needs rank 1 or more")
	}
	axis, err := axisOf(t.Axis, len(shape), "TopK's axis")
	if err != nil {
		return 0, nil, err
	}
	if k < 0 || k > shape[axis] {
		return 0, nil, fmt.Errorf("TopK's k %d is out of range for dimension %d of %v", k, axis, shape)
	}
	out := shape.Clone()
	out[axis] = k
	return axis, out, nil
}

func topKValue(k []int) (int, error) {
	if len(k) != 1 {
		return 0, fmt.Errorf("TopK's k input has %d elements, want 1", len(k))
	}
	return k[0], nil
}

// Infer implements Op.
func (t *TopK) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 2); err != nil {
		return nil, err
	}
	if in[0].Type.DType == tensor.Bool {
		return nil, fmt.Errorf("TopK of bool is not defined")
	}
	ks, err := loadTimeInts(in[1], "TopK's k input")
	if err != nil {
		return nil, err
	}
	k, err := topKValue(ks)
	if err != nil {
		return nil, err
	}
	_, out, err := t.plan(in[0].Type.Shape, k)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}, {DType: tensor.Int64, Shape: out.Clone()}}, nil
}

// Eval implements Op.
func (t *TopK) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	ks, err := arrayInts(in[1], "TopK's k input")
	if err != nil {
		return nil, err
	}
	k, err := topKValue(ks)
	if err != nil {
		return nil, err
	}
	axis, shape, err := t.plan(x.Shape, k)
	if err != nil {
		return nil, err
	}
	outer := x.Shape[:axis].NumElements()
	n := x.Shape[axis]
	inner := x.Shape[axis+1:].NumElements()
	vals := NewArray(x.DType, shape)
	idxs := NewArray(tensor.Int64, shape)
	order := make([]int, n)
	// before orders by value, NaN above every number; SliceStable keeps
	// equal values in index order.
	before := func(a, b float64) bool {
		if an, bn := math.IsNaN(a), math.IsNaN(b); an || bn {
			if t.Largest {
				return an && !bn
			}
			return bn && !an
		}
		if t.Largest {
			return a > b
		}
		return a < b
	}
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			base := o*n*inner + i
			for j := range order {
				order[j] = j
			}
			sort.SliceStable(order, func(p, q int) bool {
				return before(x.Data[base+order[p]*inner], x.Data[base+order[q]*inner])
			})
			for j := 0; j < k; j++ {
				p := o*k*inner + j*inner + i
				vals.Data[p] = x.Data[base+order[j]*inner]
				idxs.Data[p] = float64(order[j])
			}
		}
	}
	return []*Array{vals, idxs}, nil
}
