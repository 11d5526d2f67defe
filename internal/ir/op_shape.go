package ir

import (
	"fmt"

	"goinfer/internal/tensor"
)

// This file holds the ops that move data without computing on it: shape
// queries, reshapes, transposes, concatenation and splitting, slicing,
// broadcasting, tiling, padding and block rearrangement.

// Shape outputs its input's dimensions Start to End (exclusive) as a 1-D
// int64 tensor; negative bounds count from the back and both are clamped
// to [0, rank] (opset 15). A nil End means the rank. As it reads only the
// input's type, Bind folds it.
type Shape struct {
	Start int
	End   *int
}

// Kind implements Op.
func (*Shape) Kind() string { return "Shape" }

func (s *Shape) dims(in tensor.Shape) tensor.Shape {
	r := len(in)
	clamp := func(i int) int {
		if i < 0 {
			i += r
		}
		return min(max(i, 0), r)
	}
	start, end := clamp(s.Start), r
	if s.End != nil {
		end = clamp(*s.End)
	}
	if end <= start {
		return tensor.Shape{}
	}
	return in[start:end]
}

func intVector(v []int) *Array {
	a := NewArray(tensor.Int64, tensor.Shape{len(v)})
	for i, d := range v {
		a.Data[i] = float64(d)
	}
	return a
}

// Infer implements Op.
func (s *Shape) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	return []Type{{DType: tensor.Int64, Shape: tensor.Shape{len(s.dims(in[0].Type.Shape))}}}, nil
}

// EvalTypes implements TypeEvaluator.
func (s *Shape) EvalTypes(in []Type) ([]*Array, error) {
	return []*Array{intVector(s.dims(in[0].Shape))}, nil
}

// Eval implements Op.
func (s *Shape) Eval(in []*Array) ([]*Array, error) {
	return []*Array{intVector(s.dims(in[0].Shape))}, nil
}

// Size outputs its input's element count as an int64 scalar. As it reads
// only the input's type, Bind folds it.
type Size struct{}

// Kind implements Op.
func (*Size) Kind() string { return "Size" }

// Infer implements Op.
func (*Size) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	return []Type{{DType: tensor.Int64, Shape: tensor.Shape{}}}, nil
}

// EvalTypes implements TypeEvaluator.
func (*Size) EvalTypes(in []Type) ([]*Array, error) {
	return []*Array{Scalar(tensor.Int64, float64(in[0].Shape.NumElements()))}, nil
}

// Eval implements Op.
func (*Size) Eval(in []*Array) ([]*Array, error) {
	return []*Array{Scalar(tensor.Int64, float64(in[0].Shape.NumElements()))}, nil
}

// Reshape gives its data input the shape its second input holds: a 0
// copies the input's dimension at that position (or is a real 0 with
// AllowZero), one -1 takes what the other dimensions leave.
type Reshape struct{ AllowZero bool }

// Kind implements Op.
func (*Reshape) Kind() string { return "Reshape" }

// reshapeTo resolves Reshape's shape spec against the input's shape.
func reshapeTo(in tensor.Shape, spec []int, allowZero bool) (tensor.Shape, error) {
	out := make(tensor.Shape, len(spec))
	infer := -1
	known := 1
	hasZero := false
	for i, d := range spec {
		switch {
		case d == -1:
			if infer >= 0 {
				return nil, fmt.Errorf("Reshape's shape %v has more than one -1", spec)
			}
			infer = i
			continue
		case d < -1:
			return nil, fmt.Errorf("Reshape's shape %v has a negative dimension %d", spec, d)
		case d == 0 && !allowZero:
			if i >= len(in) {
				return nil, fmt.Errorf("Reshape's shape %v copies dimension %d (a 0) of an input of rank %d", spec, i, len(in))
			}
			d = in[i]
		case d == 0:
			hasZero = true
		}
		out[i] = d
		known *= d
	}
	total := in.NumElements()
	if infer >= 0 {
		if hasZero {
			return nil, fmt.Errorf("Reshape's shape %v has both a 0 and a -1 with allowzero set", spec)
		}
		if known == 0 || total%known != 0 {
			return nil, fmt.Errorf("cannot reshape %v (%d elements) to %v: the -1 has no integer size", in, total, spec)
		}
		out[infer] = total / known
		known *= out[infer]
	}
	if known != total {
		return nil, fmt.Errorf("cannot reshape %v (%d elements) to %v (%v, %d elements)", in, total, spec, out, known)
	}
	return out, nil
}

// Infer implements Op.
func (r *Reshape) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 2); err != nil {
		return nil, err
	}
	spec, err := loadTimeVector(in[1], "Reshape's shape input")
	if err != nil {
		return nil, err
	}
	out, err := reshapeTo(in[0].Type.Shape, spec, r.AllowZero)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (r *Reshape) Eval(in []*Array) ([]*Array, error) {
	spec, err := arrayInts(in[1], "Reshape's shape input")
	if err != nil {
		return nil, err
	}
	out, err := reshapeTo(in[0].Shape, spec, r.AllowZero)
	if err != nil {
		return nil, err
	}
	return []*Array{reshaped(in[0], out)}, nil
}

// reshaped returns a copy of a with another shape of as many elements.
func reshaped(a *Array, shape tensor.Shape) *Array {
	c := a.Clone()
	c.Shape = shape.Clone()
	return c
}

// Flatten reshapes its input to 2-D: the dimensions before Axis, then the
// others. Axis may be negative and may equal the rank.
type Flatten struct{ Axis int }

// Kind implements Op.
func (*Flatten) Kind() string { return "Flatten" }

func (f *Flatten) shape(in tensor.Shape) (tensor.Shape, error) {
	r := len(in)
	axis := f.Axis
	if axis < -r || axis > r {
		return nil, fmt.Errorf("Flatten's axis %d is out of range for rank %d", f.Axis, r)
	}
	if axis < 0 {
		axis += r
	}
	return tensor.Shape{in[:axis].NumElements(), in[axis:].NumElements()}, nil
}

// Infer implements Op.
func (f *Flatten) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	out, err := f.shape(in[0].Type.Shape)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (f *Flatten) Eval(in []*Array) ([]*Array, error) {
	out, err := f.shape(in[0].Shape)
	if err != nil {
		return nil, err
	}
	return []*Array{reshaped(in[0], out)}, nil
}

// Transpose permutes its input's dimensions: output dimension i is input
// dimension Perm[i]. A nil Perm reverses them.
type Transpose struct{ Perm []int }

// Kind implements Op.
func (*Transpose) Kind() string { return "Transpose" }

func (t *Transpose) perm(rank int) ([]int, error) {
	if t.Perm == nil {
		p := make([]int, rank)
		for i := range p {
			p[i] = rank - 1 - i
		}
		return p, nil
	}
	if len(t.Perm) != rank {
		return nil, fmt.Errorf("Transpose's perm %v has %d entries for an input of rank %d", t.Perm, len(t.Perm), rank)
	}
	p, err := axesOf(t.Perm, rank, "Transpose's perm")
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Infer implements Op.
func (t *Transpose) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	s := in[0].Type.Shape
	p, err := t.perm(len(s))
	if err != nil {
		return nil, err
	}
	out := make(tensor.Shape, len(p))
	for i, a := range p {
		out[i] = s[a]
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (t *Transpose) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	p, err := t.perm(len(x.Shape))
	if err != nil {
		return nil, err
	}
	shape := make(tensor.Shape, len(p))
	str := make([]int, len(p))
	inStr := Strides(x.Shape)
	for i, a := range p {
		shape[i] = x.Shape[a]
		str[i] = inStr[a]
	}
	out := NewArray(x.DType, shape)
	eachCoord(shape, func(k int, c []int) { out.Data[k] = x.Data[flatIndex(c, str)] })
	return []*Array{out}, nil
}

// Squeeze removes size-1 dimensions: those its optional int64 axes input
// names, or all of them when it is absent.
type Squeeze struct{}

// Kind implements Op.
func (*Squeeze) Kind() string { return "Squeeze" }

func squeezeShape(in tensor.Shape, axes []int, all bool) (tensor.Shape, error) {
	drop := make([]bool, len(in))
	if all {
		for i, d := range in {
			drop[i] = d == 1
		}
	} else {
		ax, err := axesOf(axes, len(in), "Squeeze's axes")
		if err != nil {
			return nil, err
		}
		for i, a := range ax {
			if in[a] != 1 {
				return nil, fmt.Errorf("Squeeze's axis %d: dimension %d of %v has size %d, not 1", axes[i], a, in, in[a])
			}
			drop[a] = true
		}
	}
	out := tensor.Shape{}
	for i, d := range in {
		if !drop[i] {
			out = append(out, d)
		}
	}
	return out, nil
}

// Infer implements Op.
func (*Squeeze) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 2); err != nil {
		return nil, err
	}
	var axes []int
	all := len(in) < 2 || in[1] == nil
	if !all {
		var err error
		if axes, err = loadTimeVector(in[1], "Squeeze's axes input"); err != nil {
			return nil, err
		}
	}
	out, err := squeezeShape(in[0].Type.Shape, axes, all)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (*Squeeze) Eval(in []*Array) ([]*Array, error) {
	var axes []int
	all := len(in) < 2 || in[1] == nil
	if !all {
		var err error
		if axes, err = arrayInts(in[1], "Squeeze's axes input"); err != nil {
			return nil, err
		}
	}
	out, err := squeezeShape(in[0].Shape, axes, all)
	if err != nil {
		return nil, err
	}
	return []*Array{reshaped(in[0], out)}, nil
}

// Unsqueeze inserts size-1 dimensions at the positions, in the output,
// that its int64 axes input names.
type Unsqueeze struct{}

// Kind implements Op.
func (*Unsqueeze) Kind() string { return "Unsqueeze" }

func unsqueezeShape(in tensor.Shape, axes []int) (tensor.Shape, error) {
	r := len(in) + len(axes)
	ax, err := axesOf(axes, r, "Unsqueeze's axes")
	if err != nil {
		return nil, err
	}
	ins := make([]bool, r)
	for _, a := range ax {
		ins[a] = true
	}
	out := make(tensor.Shape, r)
	j := 0
	for i := range out {
		if ins[i] {
			out[i] = 1
		} else {
			out[i] = in[j]
			j++
		}
	}
	return out, nil
}

// Infer implements Op.
func (*Unsqueeze) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 2); err != nil {
		return nil, err
	}
	axes, err := loadTimeVector(in[1], "Unsqueeze's axes input")
	if err != nil {
		return nil, err
	}
	out, err := unsqueezeShape(in[0].Type.Shape, axes)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (*Unsqueeze) Eval(in []*Array) ([]*Array, error) {
	axes, err := arrayInts(in[1], "Unsqueeze's axes input")
	if err != nil {
		return nil, err
	}
	out, err := unsqueezeShape(in[0].Shape, axes)
	if err != nil {
		return nil, err
	}
	return []*Array{reshaped(in[0], out)}, nil
}

// Concat joins its inputs along Axis; they agree in dtype, rank and every
// other dimension.
type Concat struct{ Axis int }

// Kind implements Op.
func (*Concat) Kind() string { return "Concat" }

func (c *Concat) shape(shapes []tensor.Shape) (int, tensor.Shape, error) {
	if len(shapes) == 0 {
		return 0, nil, fmt.Errorf("Concat takes at least one input")
	}
	first := shapes[0]
	if len(first) == 0 {
		return 0, nil, fmt.Errorf("Concat of scalars: inputs need rank 1 or more")
	}
	axis, err := axisOf(c.Axis, len(first), "Concat's axis")
	if err != nil {
		return 0, nil, err
	}
	out := first.Clone()
	out[axis] = 0
	for i, s := range shapes {
		if len(s) != len(first) {
			return 0, nil, fmt.Errorf("Concat's input %d %v and input 0 %v differ in rank", i, s, first)
		}
		for d := range s {
			if d != axis && s[d] != first[d] {
				return 0, nil, fmt.Errorf("Concat along axis %d: input %d %v and input 0 %v differ in dimension %d", axis, i, s, first, d)
			}
		}
		out[axis] += s[axis]
	}
	return axis, out, nil
}

// Infer implements Op.
func (c *Concat) Infer(in []*Value) ([]Type, error) {
	shapes := make([]tensor.Shape, len(in))
	for i, v := range in {
		if v == nil {
			return nil, fmt.Errorf("Concat's input %d is absent", i)
		}
		shapes[i] = v.Type.Shape
	}
	_, out, err := c.shape(shapes)
	if err != nil {
		return nil, err
	}
	if err := sameDTypes(in, "Concat"); err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (c *Concat) Eval(in []*Array) ([]*Array, error) {
	shapes := make([]tensor.Shape, len(in))
	for i, a := range in {
		shapes[i] = a.Shape
	}
	axis, shape, err := c.shape(shapes)
	if err != nil {
		return nil, err
	}
	out := NewArray(in[0].DType, shape)
	outer := shape[:axis].NumElements()
	inner := shape[axis+1:].NumElements()
	p := 0
	for o := 0; o < outer; o++ {
		for _, a := range in {
			n := a.Shape[axis] * inner
			copy(out.Data[p:p+n], a.Data[o*n:(o+1)*n])
			p += n
		}
	}
	return []*Array{out}, nil
}

// OutputCounter is implemented by ops whose number of outputs is the
// node's (Split without split sizes or num_outputs, as ONNX before opset
// 18 allowed): builders call SetOutputCount with it after creating the op.
type OutputCounter interface{ SetOutputCount(n int) }

// Split cuts its input along Axis into several outputs: of the sizes its
// optional int64 split input holds, or NumOutputs parts of ceil(dim /
// NumOutputs), the last one smaller when the dimension does not divide.
type Split struct {
	Axis       int
	NumOutputs int
}

// Kind implements Op.
func (*Split) Kind() string { return "Split" }

// SetOutputCount implements OutputCounter; a count already set (from
// num_outputs) is kept.
func (s *Split) SetOutputCount(n int) {
	if s.NumOutputs == 0 {
		s.NumOutputs = n
	}
}

func (s *Split) sizes(shape tensor.Shape, split []int, given bool) (int, []int, error) {
	if len(shape) == 0 {
		return 0, nil, fmt.Errorf("Split of a scalar: the input needs rank 1 or more")
	}
	axis, err := axisOf(s.Axis, len(shape), "Split's axis")
	if err != nil {
		return 0, nil, err
	}
	dim := shape[axis]
	if given {
		sum := 0
		for _, n := range split {
			if n < 0 {
				return 0, nil, fmt.Errorf("Split's sizes %v have a negative entry", split)
			}
			sum += n
		}
		if sum != dim {
			return 0, nil, fmt.Errorf("Split's sizes %v add up to %d, dimension %d of %v is %d", split, sum, axis, shape, dim)
		}
		if s.NumOutputs != 0 && s.NumOutputs != len(split) {
			return 0, nil, fmt.Errorf("Split's sizes %v make %d outputs, the node has %d", split, len(split), s.NumOutputs)
		}
		return axis, split, nil
	}
	n := s.NumOutputs
	if n <= 0 {
		return 0, nil, fmt.Errorf("Split has neither split sizes nor a number of outputs")
	}
	chunk := (dim + n - 1) / n
	out := make([]int, n)
	for i := range out {
		out[i] = chunk
	}
	out[n-1] = dim - chunk*(n-1)
	if out[n-1] < 0 {
		return 0, nil, fmt.Errorf("Split of dimension %d of %v (size %d) into %d parts of %d leaves the last one negative", axis, shape, dim, n, chunk)
	}
	return axis, out, nil
}

// Infer implements Op.
func (s *Split) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 2); err != nil {
		return nil, err
	}
	var split []int
	given := len(in) == 2 && in[1] != nil
	if given {
		var err error
		if split, err = loadTimeVector(in[1], "Split's split input"); err != nil {
			return nil, err
		}
		// Some exports pass an empty split for "equal parts".
		given = len(split) > 0
	}
	axis, sizes, err := s.sizes(in[0].Type.Shape, split, given)
	if err != nil {
		return nil, err
	}
	out := make([]Type, len(sizes))
	for i, n := range sizes {
		sh := in[0].Type.Shape.Clone()
		sh[axis] = n
		out[i] = Type{DType: in[0].Type.DType, Shape: sh}
	}
	return out, nil
}

// Eval implements Op.
func (s *Split) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	var split []int
	given := len(in) == 2 && in[1] != nil
	if given {
		var err error
		if split, err = arrayInts(in[1], "Split's split input"); err != nil {
			return nil, err
		}
		given = len(split) > 0
	}
	axis, sizes, err := s.sizes(x.Shape, split, given)
	if err != nil {
		return nil, err
	}
	outer := x.Shape[:axis].NumElements()
	inner := x.Shape[axis+1:].NumElements()
	row := x.Shape[axis] * inner
	outs := make([]*Array, len(sizes))
	off := 0
	for i, n := range sizes {
		sh := x.Shape.Clone()
		sh[axis] = n
		a := NewArray(x.DType, sh)
		m := n * inner
		for o := 0; o < outer; o++ {
			copy(a.Data[o*m:(o+1)*m], x.Data[o*row+off:o*row+off+m])
		}
		off += m
		outs[i] = a
	}
	return outs, nil
}

// Slice takes a strided sub-tensor: inputs data, starts, ends, optional
// axes and optional steps (int64 or int32, 1-D). Negative starts and ends
// count from the end of their dimension and are clamped to it, so
// INT64_MAX means "to the end"; a negative step walks backwards.
type Slice struct{}

// Kind implements Op.
func (*Slice) Kind() string { return "Slice" }

// sliceDim is one output dimension: count elements from start by step.
type sliceDim struct{ start, step, count int }

func slicePlan(shape tensor.Shape, starts, ends, axes, steps []int) ([]sliceDim, error) {
	r := len(shape)
	if len(ends) != len(starts) {
		return nil, fmt.Errorf("Slice's starts %v and ends %v differ in length", starts, ends)
	}
	if axes == nil {
		axes = make([]int, len(starts))
		for i := range axes {
			axes[i] = i
		}
	} else if len(axes) != len(starts) {
		return nil, fmt.Errorf("Slice's axes %v and starts %v differ in length", axes, starts)
	}
	if steps == nil {
		steps = make([]int, len(starts))
		for i := range steps {
			steps[i] = 1
		}
	} else if len(steps) != len(starts) {
		return nil, fmt.Errorf("Slice's steps %v and starts %v differ in length", steps, starts)
	}
	ax, err := axesOf(axes, r, "Slice's axes")
	if err != nil {
		return nil, err
	}
	plan := make([]sliceDim, r)
	for d, n := range shape {
		plan[d] = sliceDim{0, 1, n}
	}
	for i, a := range ax {
		d, step := shape[a], steps[i]
		if step == 0 {
			return nil, fmt.Errorf("Slice's steps %v have a 0", steps)
		}
		s, e := starts[i], ends[i]
		if s < 0 {
			s += d
		}
		if e < 0 {
			e += d
		}
		var count int
		if step > 0 {
			s, e = min(max(s, 0), d), min(max(e, 0), d)
			if e > s {
				count = (e - s + step - 1) / step
			}
		} else {
			s, e = min(max(s, 0), d-1), min(max(e, -1), d-1)
			if s > e {
				count = (s - e - step - 1) / -step
			}
		}
		plan[a] = sliceDim{s, step, count}
	}
	return plan, nil
}

func sliceShape(plan []sliceDim) tensor.Shape {
	s := make(tensor.Shape, len(plan))
	for i, p := range plan {
		s[i] = p.count
	}
	return s
}

// sliceParams reads starts, ends, axes and steps with get, which returns
// nil for an absent optional input.
func sliceParams(n int, get func(i int, desc string) ([]int, error)) (starts, ends, axes, steps []int, err error) {
	names := []string{"", "Slice's starts input", "Slice's ends input", "Slice's axes input", "Slice's steps input"}
	vals := make([][]int, 5)
	for i := 1; i < 5; i++ {
		if i < n {
			if vals[i], err = get(i, names[i]); err != nil {
				return nil, nil, nil, nil, err
			}
		}
	}
	return vals[1], vals[2], vals[3], vals[4], nil
}

// Infer implements Op.
func (*Slice) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 3, 5); err != nil {
		return nil, err
	}
	starts, ends, axes, steps, err := sliceParams(len(in), func(i int, desc string) ([]int, error) {
		if in[i] == nil {
			return nil, nil
		}
		return loadTimeVector(in[i], desc)
	})
	if err != nil {
		return nil, err
	}
	plan, err := slicePlan(in[0].Type.Shape, starts, ends, axes, steps)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: sliceShape(plan)}}, nil
}

// Eval implements Op.
func (*Slice) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	starts, ends, axes, steps, err := sliceParams(len(in), func(i int, desc string) ([]int, error) {
		if in[i] == nil {
			return nil, nil
		}
		return arrayInts(in[i], desc)
	})
	if err != nil {
		return nil, err
	}
	plan, err := slicePlan(x.Shape, starts, ends, axes, steps)
	if err != nil {
		return nil, err
	}
	out := NewArray(x.DType, sliceShape(plan))
	str := Strides(x.Shape)
	base := 0
	step := make([]int, len(plan))
	for d, p := range plan {
		base += p.start * str[d]
		step[d] = p.step * str[d]
	}
	eachCoord(out.Shape, func(k int, c []int) { out.Data[k] = x.Data[base+flatIndex(c, step)] })
	return []*Array{out}, nil
}

// Expand broadcasts its input to the shape its int64 input holds, both
// ways as NumPy does (a 1 in the shape keeps the input's dimension).
type Expand struct{}

// Kind implements Op.
func (*Expand) Kind() string { return "Expand" }

// Infer implements Op.
func (*Expand) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 2); err != nil {
		return nil, err
	}
	spec, err := loadTimeVector(in[1], "Expand's shape input")
	if err != nil {
		return nil, err
	}
	out, err := expandShape(in[0].Type.Shape, spec)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

func expandShape(in tensor.Shape, spec []int) (tensor.Shape, error) {
	s, err := checkDims(spec, "Expand's shape")
	if err != nil {
		return nil, err
	}
	out, err := BroadcastShape(in, s)
	if err != nil {
		return nil, fmt.Errorf("Expand: %w", err)
	}
	return out, nil
}

// Eval implements Op.
func (*Expand) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	spec, err := arrayInts(in[1], "Expand's shape input")
	if err != nil {
		return nil, err
	}
	shape, err := expandShape(x.Shape, spec)
	if err != nil {
		return nil, err
	}
	out := NewArray(x.DType, shape)
	for k, i := range BroadcastIndex(x.Shape, shape) {
		out.Data[k] = x.Data[i]
	}
	return []*Array{out}, nil
}

// Tile repeats its input along each dimension as many times as its int64
// repeats input says.
type Tile struct{}

// Kind implements Op.
func (*Tile) Kind() string { return "Tile" }

func tileShape(in tensor.Shape, reps []int) (tensor.Shape, error) {
	if len(reps) != len(in) {
		return nil, fmt.Errorf("Tile's repeats %v have %d entries for an input %v of rank %d", reps, len(reps), in, len(in))
	}
	out := make(tensor.Shape, len(in))
	for i, r := range reps {
		if r < 0 {
			return nil, fmt.Errorf("Tile's repeats %v have a negative entry", reps)
		}
		out[i] = in[i] * r
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("Tile: %w", err)
	}
	return out, nil
}

// Infer implements Op.
func (*Tile) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 2); err != nil {
		return nil, err
	}
	reps, err := loadTimeVector(in[1], "Tile's repeats input")
	if err != nil {
		return nil, err
	}
	out, err := tileShape(in[0].Type.Shape, reps)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (*Tile) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	reps, err := arrayInts(in[1], "Tile's repeats input")
	if err != nil {
		return nil, err
	}
	shape, err := tileShape(x.Shape, reps)
	if err != nil {
		return nil, err
	}
	out := NewArray(x.DType, shape)
	str := Strides(x.Shape)
	eachCoord(shape, func(k int, c []int) {
		p := 0
		for d, v := range c {
			p += v % x.Shape[d] * str[d]
		}
		out.Data[k] = x.Data[p]
	})
	return []*Array{out}, nil
}

// Pad pads (or, with negative pads, crops) its input. Inputs: data, int64
// pads (the begins of every padded axis, then the ends), optional scalar
// constant_value, optional axes (the padded axes; all when absent). Mode
// is "constant" (the default when empty), "reflect", "edge" or "wrap".
// constant_value is converted to the data's dtype, so an older opset's
// float attribute can arrive as a float32 constant.
type Pad struct{ Mode string }

// Kind implements Op.
func (*Pad) Kind() string { return "Pad" }

func (p *Pad) mode() (string, error) {
	switch p.Mode {
	case "", "constant":
		return "constant", nil
	case "reflect", "edge", "wrap":
		return p.Mode, nil
	}
	return "", fmt.Errorf("Pad's mode %q is not constant, reflect, edge or wrap", p.Mode)
}

// plan returns the begin and end padding of every dimension and the
// output shape.
func (p *Pad) plan(shape tensor.Shape, pads, axes []int) (begin []int, out tensor.Shape, err error) {
	mode, err := p.mode()
	if err != nil {
		return nil, nil, err
	}
	r := len(shape)
	if axes == nil {
		axes = make([]int, r)
		for i := range axes {
			axes[i] = i
		}
	}
	ax, err := axesOf(axes, r, "Pad's axes")
	if err != nil {
		return nil, nil, err
	}
	if len(pads) != 2*len(ax) {
		return nil, nil, fmt.Errorf("Pad's pads %v have %d entries, want %d (begin and end of %d axes)", pads, len(pads), 2*len(ax), len(ax))
	}
	begin = make([]int, r)
	out = shape.Clone()
	for i, a := range ax {
		b, e := pads[i], pads[i+len(ax)]
		begin[a] = b
		out[a] = shape[a] + b + e
		if out[a] < 0 {
			return nil, nil, fmt.Errorf("Pad's pads %v crop dimension %d of %v below zero", pads, a, shape)
		}
		if shape[a] == 0 && out[a] > 0 && mode != "constant" {
			return nil, nil, fmt.Errorf("Pad in %s mode cannot pad the empty dimension %d of %v", mode, a, shape)
		}
	}
	return begin, out, nil
}

// Infer implements Op.
func (p *Pad) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 4); err != nil {
		return nil, err
	}
	pads, err := loadTimeVector(in[1], "Pad's pads input")
	if err != nil {
		return nil, err
	}
	var axes []int
	if len(in) == 4 && in[3] != nil {
		if axes, err = loadTimeVector(in[3], "Pad's axes input"); err != nil {
			return nil, err
		}
	}
	if len(in) >= 3 && in[2] != nil && in[2].Type.Shape.NumElements() != 1 {
		return nil, fmt.Errorf("Pad's constant_value %q is %s, want one element", in[2].Name, in[2].Type)
	}
	_, out, err := p.plan(in[0].Type.Shape, pads, axes)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (p *Pad) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	pads, err := arrayInts(in[1], "Pad's pads input")
	if err != nil {
		return nil, err
	}
	var axes []int
	if len(in) == 4 && in[3] != nil {
		if axes, err = arrayInts(in[3], "Pad's axes input"); err != nil {
			return nil, err
		}
	}
	fill := 0.0
	if len(in) >= 3 && in[2] != nil {
		if len(in[2].Data) != 1 {
			return nil, fmt.Errorf("Pad's constant_value is %s%v, want one element", in[2].DType, in[2].Shape)
		}
		fill = castArray(in[2], x.DType).Data[0]
	}
	begin, shape, err := p.plan(x.Shape, pads, axes)
	if err != nil {
		return nil, err
	}
	mode, _ := p.mode()
	out := NewArray(x.DType, shape)
	str := Strides(x.Shape)
	eachCoord(shape, func(k int, c []int) {
		src := 0
		for d, v := range c {
			n := x.Shape[d]
			i := v - begin[d]
			if i < 0 || i >= n {
				switch mode {
				case "constant":
					out.Data[k] = fill
					return
				case "edge":
					i = min(max(i, 0), n-1)
				case "wrap":
					i = (i%n + n) % n
				case "reflect":
					i = reflectIndex(i, n)
				}
			}
			src += i * str[d]
		}
		out.Data[k] = x.Data[src]
	})
	return []*Array{out}, nil
}

// reflectIndex maps i, outside [0, n), to the element NumPy's reflect
// padding reads: the data mirrored about its first and last elements,
// repeatedly, so a period of 2(n-1).
func reflectIndex(i, n int) int {
	if n == 1 {
		return 0
	}
	period := 2 * (n - 1)
	i %= period
	if i < 0 {
		i += period
	}
	if i >= n {
		i = period - i
	}
	return i
}

// DepthToSpace moves channel blocks of an [N,C,H,W] input into BlockSize
// x BlockSize spatial blocks. Mode "DCR" (the default when empty) takes
// the channel as depth-column-row, "CRD" as column-row-depth.
type DepthToSpace struct {
	BlockSize int
	Mode      string
}

// Kind implements Op.
func (*DepthToSpace) Kind() string { return "DepthToSpace" }

func (d *DepthToSpace) shape(in tensor.Shape) (tensor.Shape, error) {
	b := d.BlockSize
	if d.Mode != "" && d.Mode != "DCR" && d.Mode != "CRD" {
		return nil, fmt.Errorf("DepthToSpace's mode %q is not DCR or CRD", d.Mode)
	}
	if b < 1 {
		return nil, fmt.Errorf("DepthToSpace's blocksize %d is not positive", b)
	}
	if len(in) != 4 {
		return nil, fmt.Errorf("DepthToSpace's input %v is not 4-D [N,C,H,W]", in)
	}
	if in[1]%(b*b) != 0 {
		return nil, fmt.Errorf("DepthToSpace's input %v has %d channels, not a multiple of blocksize² %d", in, in[1], b*b)
	}
	return tensor.Shape{in[0], in[1] / (b * b), in[2] * b, in[3] * b}, nil
}

// Infer implements Op.
func (d *DepthToSpace) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	out, err := d.shape(in[0].Type.Shape)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (d *DepthToSpace) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	shape, err := d.shape(x.Shape)
	if err != nil {
		return nil, err
	}
	b, oc := d.BlockSize, shape[1]
	str := Strides(x.Shape)
	out := NewArray(x.DType, shape)
	eachCoord(shape, func(k int, c []int) {
		i, j := c[2]%b, c[3]%b
		ch := (i*b+j)*oc + c[1]
		if d.Mode == "CRD" {
			ch = c[1]*b*b + i*b + j
		}
		out.Data[k] = x.Data[c[0]*str[0]+ch*str[1]+c[2]/b*str[2]+c[3]/b*str[3]]
	})
	return []*Array{out}, nil
}

// SpaceToDepth is DepthToSpace's inverse: BlockSize x BlockSize spatial
// blocks of an [N,C,H,W] input become channels, ordered as Mode says
// ("DCR", the default when empty, or "CRD", which the latest opset adds).
type SpaceToDepth struct {
	BlockSize int
	Mode      string
}

// Kind implements Op.
func (*SpaceToDepth) Kind() string { return "SpaceToDepth" }

func (s *SpaceToDepth) shape(in tensor.Shape) (tensor.Shape, error) {
	b := s.BlockSize
	if s.Mode != "" && s.Mode != "DCR" && s.Mode != "CRD" {
		return nil, fmt.Errorf("SpaceToDepth's mode %q is not DCR or CRD", s.Mode)
	}
	if b < 1 {
		return nil, fmt.Errorf("SpaceToDepth's blocksize %d is not positive", b)
	}
	if len(in) != 4 {
		return nil, fmt.Errorf("SpaceToDepth's input %v is not 4-D [N,C,H,W]", in)
	}
	if in[2]%b != 0 || in[3]%b != 0 {
		return nil, fmt.Errorf("SpaceToDepth's input %v: height and width are not multiples of blocksize %d", in, b)
	}
	return tensor.Shape{in[0], in[1] * b * b, in[2] / b, in[3] / b}, nil
}

// Infer implements Op.
func (s *SpaceToDepth) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	out, err := s.shape(in[0].Type.Shape)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (s *SpaceToDepth) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	shape, err := s.shape(x.Shape)
	if err != nil {
		return nil, err
	}
	b, ic := s.BlockSize, x.Shape[1]
	str := Strides(x.Shape)
	out := NewArray(x.DType, shape)
	eachCoord(shape, func(k int, c []int) {
		blk, ch := c[1]/ic, c[1]%ic
		if s.Mode == "CRD" {
			blk, ch = c[1]%(b*b), c[1]/(b*b)
		}
		i, j := blk/b, blk%b
		out.Data[k] = x.Data[c[0]*str[0]+ch*str[1]+(c[2]*b+i)*str[2]+(c[3]*b+j)*str[3]]
	})
	return []*Array{out}, nil
}
