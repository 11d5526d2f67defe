package ir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"goinfer/internal/tensor"
)

// This file holds the data ops (Gather, Cast, Constant, Where, ...) and the
// helpers the shape, data and reduction ops share.

// ErrNotConstant is matched (errors.Is) by Infer's error when an input
// that the op's output shape depends on (Reshape's shape, Slice's starts,
// ...) is not a constant at load time. Callers holding such inputs as
// data, ONNX's test cases for one, can make them constants and bind again.
var ErrNotConstant = errors.New("input not known at load time")

// ErrUnsupported is matched by errors about valid ONNX semantics that the
// IR does not implement (random training-mode Dropout), as opposed to
// inputs that are wrong.
var ErrUnsupported = errors.New("not supported by goinfer's IR")

// notConstantError is a message matching ErrNotConstant.
type notConstantError struct{ msg string }

func (e *notConstantError) Error() string        { return e.msg }
func (e *notConstantError) Is(target error) bool { return target == ErrNotConstant }

// notConstant reports input name of the op, described by desc ("Reshape's
// shape input"), as not known at load time.
func notConstant(desc, name string) error {
	return &notConstantError{msg: fmt.Sprintf("%s %q is not known at load time (it is computed from the graph's inputs)", desc, name)}
}

// axisOf resolves axis, negative from the back, against rank; what names
// the attribute or input in the error.
func axisOf(axis, rank int, what string) (int, error) {
	if axis < -rank || axis >= rank {
		return 0, fmt.Errorf("%s %d is out of range for rank %d", what, axis, rank)
	}
	if axis < 0 {
		axis += rank
	}
	return axis, nil
}

// axesOf resolves each axis as axisOf does and rejects repeats.
func axesOf(axes []int, rank int, what string) ([]int, error) {
	out := make([]int, len(axes))
	seen := make([]bool, rank)
	for i, a := range axes {
		ax, err := axisOf(a, rank, what)
		if err != nil {
			return nil, err
		}
		if seen[ax] {
			return nil, fmt.Errorf("%s %v names axis %d twice", what, axes, ax)
		}
		seen[ax] = true
		out[i] = ax
	}
	return out, nil
}

// isIndexType reports whether dt may hold indices, shapes or axes (ONNX
// allows int32 or int64 for most of them).
func isIndexType(dt tensor.DType) bool { return dt == tensor.Int64 || dt == tensor.Int32 }

// isFloatType reports whether dt is a floating-point dtype.
func isFloatType(dt tensor.DType) bool {
	switch dt {
	case tensor.Float32, tensor.Float64, tensor.Float16, tensor.BFloat16:
		return true
	}
	return false
}

// loadTimeInts returns the integers held by v, an input the op's output
// shape depends on; desc names it ("Reshape's shape input"). Ints are read
// from the tensor's bytes, not through float64, so that the INT64_MAX that
// exports write for "to the end" survives.
func loadTimeInts(v *Value, desc string) ([]int, error) {
	if v == nil {
		return nil, fmt.Errorf("%s is absent", desc)
	}
	if !isIndexType(v.Type.DType) {
		return nil, fmt.Errorf("%s %q is %s, want int64 or int32", desc, v.Name, v.Type)
	}
	if v.Const == nil {
		return nil, notConstant(desc, v.Name)
	}
	t := v.Const
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%s %q: %w", desc, v.Name, err)
	}
	out := make([]int, t.NumElements())
	le := binary.LittleEndian
	for i := range out {
		if t.DType == tensor.Int64 {
			out[i] = int(int64(le.Uint64(t.Data[8*i:])))
		} else {
			out[i] = int(int32(le.Uint32(t.Data[4*i:])))
		}
	}
	return out, nil
}

// loadTimeVector is loadTimeInts for a 1-D input.
func loadTimeVector(v *Value, desc string) ([]int, error) {
	if v != nil && len(v.Type.Shape) != 1 {
		return nil, fmt.Errorf("%s %q is %s, want a 1-D tensor", desc, v.Name, v.Type)
	}
	return loadTimeInts(v, desc)
}

// arrayInts converts an index array's values to ints, saturating at the
// int range: float64 rounds INT64_MAX up to 2^63, which int() would wrap.
func arrayInts(a *Array, desc string) ([]int, error) {
	if a == nil {
		return nil, fmt.Errorf("%s is absent", desc)
	}
	if !isIndexType(a.DType) {
		return nil, fmt.Errorf("%s is %s%v, want int64 or int32", desc, a.DType, a.Shape)
	}
	out := make([]int, len(a.Data))
	for i, v := range a.Data {
		out[i] = satInt(v)
	}
	return out, nil
}

// satInt converts v to int, saturating at the int64 range.
func satInt(v float64) int {
	switch {
	case v >= math.MaxInt64:
		return math.MaxInt64
	case v <= math.MinInt64:
		return math.MinInt64
	case math.IsNaN(v):
		return 0
	}
	return int(v)
}

// eachCoord calls f with every coordinate of shape in row-major order, k
// being the flat index. c is reused between calls.
func eachCoord(shape tensor.Shape, f func(k int, c []int)) {
	n := shape.NumElements()
	c := make([]int, len(shape))
	for k := 0; k < n; k++ {
		f(k, c)
		for d := len(shape) - 1; d >= 0; d-- {
			c[d]++
			if c[d] < shape[d] {
				break
			}
			c[d] = 0
		}
	}
}

// flatIndex is the row-major offset of coordinate c in an array of the
// given strides.
func flatIndex(c, strides []int) int {
	p := 0
	for i, v := range c {
		p += v * strides[i]
	}
	return p
}

// sameDTypes checks that every present input has the first one's dtype.
func sameDTypes(in []*Value, what string) error {
	for i, v := range in[1:] {
		if v != nil && v.Type.DType != in[0].Type.DType {
			return fmt.Errorf("%s: input %d is %s, input 0 is %s", what, i+1, v.Type, in[0].Type)
		}
	}
	return nil
}

// Gather takes slices of its data input along Axis at the positions its
// indices input holds (negative ones count from the end): the output's
// shape is data's with dimension Axis replaced by the indices' shape.
type Gather struct{ Axis int }

// Kind implements Op.
func (*Gather) Kind() string { return "Gather" }

func (g *Gather) plan(data, idx tensor.Shape) (axis int, out tensor.Shape, err error) {
	if len(data) == 0 {
		return 0, nil, fmt.Errorf("data is a scalar, Gather needs rank 1 or more")
	}
	if axis, err = axisOf(g.Axis, len(data), "Gather's axis"); err != nil {
		return 0, nil, err
	}
	out = append(out, data[:axis]...)
	out = append(out, idx...)
	out = append(out, data[axis+1:]...)
	return axis, out, nil
}

// Infer implements Op.
func (g *Gather) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 2); err != nil {
		return nil, err
	}
	if !isIndexType(in[1].Type.DType) {
		return nil, fmt.Errorf("Gather's indices are %s, want int64 or int32", in[1].Type)
	}
	axis, out, err := g.plan(in[0].Type.Shape, in[1].Type.Shape)
	if err != nil {
		return nil, err
	}
	// Known indices are checked now so that a bad export fails at load.
	if in[1].IsConst() {
		idx, err := loadTimeInts(in[1], "Gather's indices")
		if err != nil {
			return nil, err
		}
		n := in[0].Type.Shape[axis]
		for _, i := range idx {
			if i < -n || i >= n {
				return nil, fmt.Errorf("Gather's index %d is out of range for dimension %d of size %d", i, axis, n)
			}
		}
	}
	return []Type{{DType: in[0].Type.DType, Shape: out}}, nil
}

// Eval implements Op.
func (g *Gather) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	axis, shape, err := g.plan(x.Shape, in[1].Shape)
	if err != nil {
		return nil, err
	}
	idx, err := arrayInts(in[1], "Gather's indices")
	if err != nil {
		return nil, err
	}
	outer := x.Shape[:axis].NumElements()
	inner := x.Shape[axis+1:].NumElements()
	n := x.Shape[axis]
	out := NewArray(x.DType, shape)
	p := 0
	for o := 0; o < outer; o++ {
		for _, i := range idx {
			if i < -n || i >= n {
				return nil, fmt.Errorf("Gather's index %d is out of range for dimension %d of size %d", i, axis, n)
			}
			if i < 0 {
				i += n
			}
			src := (o*n + i) * inner
			copy(out.Data[p:p+inner], x.Data[src:src+inner])
			p += inner
		}
	}
	return []*Array{out}, nil
}

// GatherElements reads data at the indices' positions along Axis, the
// other coordinates being the indices' own (PyTorch's gather): the output
// has the indices' shape.
type GatherElements struct{ Axis int }

// Kind implements Op.
func (*GatherElements) Kind() string { return "GatherElements" }

func (g *GatherElements) plan(data, idx tensor.Shape) (int, error) {
	if len(data) == 0 {
		return 0, fmt.Errorf("data is a scalar, GatherElements needs rank 1 or more")
	}
	if len(idx) != len(data) {
		return 0, fmt.Errorf("GatherElements' indices %v and data %v differ in rank", idx, data)
	}
	axis, err := axisOf(g.Axis, len(data), "GatherElements' axis")
	if err != nil {
		return 0, err
	}
	for d := range data {
		if d != axis && idx[d] > data[d] {
			return 0, fmt.Errorf("GatherElements' indices %v exceed data %v in dimension %d", idx, data, d)
		}
	}
	return axis, nil
}

// Infer implements Op.
func (g *GatherElements) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 2); err != nil {
		return nil, err
	}
	if !isIndexType(in[1].Type.DType) {
		return nil, fmt.Errorf("GatherElements' indices are %s, want int64 or int32", in[1].Type)
	}
	if _, err := g.plan(in[0].Type.Shape, in[1].Type.Shape); err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: in[1].Type.Shape.Clone()}}, nil
}

// Eval implements Op.
func (g *GatherElements) Eval(in []*Array) ([]*Array, error) {
	x := in[0]
	axis, err := g.plan(x.Shape, in[1].Shape)
	if err != nil {
		return nil, err
	}
	idx, err := arrayInts(in[1], "GatherElements' indices")
	if err != nil {
		return nil, err
	}
	out := NewArray(x.DType, in[1].Shape)
	str := Strides(x.Shape)
	n := x.Shape[axis]
	eachCoord(out.Shape, func(k int, c []int) {
		if err != nil {
			return
		}
		i := idx[k]
		if i < -n || i >= n {
			err = fmt.Errorf("GatherElements' index %d is out of range for dimension %d of size %d", i, axis, n)
			return
		}
		if i < 0 {
			i += n
		}
		out.Data[k] = x.Data[flatIndex(c, str)+(i-c[axis])*str[axis]]
	})
	if err != nil {
		return nil, err
	}
	return []*Array{out}, nil
}

// Cast converts its input to dtype To: floats round to nearest, integers
// truncate toward zero and wrap around their width, booleans are v != 0.
type Cast struct{ To tensor.DType }

// Kind implements Op.
func (*Cast) Kind() string { return "Cast" }

// Infer implements Op.
func (c *Cast) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if c.To.Size() == 0 {
		return nil, fmt.Errorf("Cast's target dtype %s is not a dtype", c.To)
	}
	return []Type{{DType: c.To, Shape: in[0].Type.Shape.Clone()}}, nil
}

// Eval implements Op.
func (c *Cast) Eval(in []*Array) ([]*Array, error) {
	return []*Array{castArray(in[0], c.To)}, nil
}

// castArray returns a converted to dt.
func castArray(a *Array, dt tensor.DType) *Array {
	out := a.Clone()
	out.DType = dt
	switch dt {
	case tensor.Int64, tensor.Int32, tensor.Int8, tensor.Uint8:
		for i, v := range out.Data {
			out.Data[i] = wrapInt(v, dt)
		}
	default:
		out.RoundTo()
	}
	return out
}

// wrapInt truncates v toward zero and wraps it into dt's range as a C
// conversion through int64 does (NumPy's astype); NaN, for which the
// result is undefined, gives 0.
func wrapInt(v float64, dt tensor.DType) float64 {
	if math.IsNaN(v) {
		return 0
	}
	i := int64(satInt(math.Trunc(v)))
	switch dt {
	case tensor.Int32:
		return float64(int32(i))
	case tensor.Int8:
		return float64(int8(i))
	case tensor.Uint8:
		return float64(uint8(i))
	}
	return float64(i)
}

// CastLike is Cast to the dtype of its second input.
type CastLike struct{}

// Kind implements Op.
func (*CastLike) Kind() string { return "CastLike" }

// Infer implements Op.
func (*CastLike) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 2, 2); err != nil {
		return nil, err
	}
	return []Type{{DType: in[1].Type.DType, Shape: in[0].Type.Shape.Clone()}}, nil
}

// Eval implements Op.
func (*CastLike) Eval(in []*Array) ([]*Array, error) {
	return []*Array{castArray(in[0], in[1].DType)}, nil
}

// Constant outputs Value. It takes no inputs, so Bind folds it.
type Constant struct{ Value *tensor.Tensor }

// Kind implements Op.
func (*Constant) Kind() string { return "Constant" }

// IsSource implements Source.
func (*Constant) IsSource() {}

// Infer implements Op.
func (c *Constant) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 0, 0); err != nil {
		return nil, err
	}
	if c.Value == nil {
		return nil, fmt.Errorf("Constant has no value")
	}
	if err := c.Value.Validate(); err != nil {
		return nil, fmt.Errorf("Constant's value: %w", err)
	}
	return []Type{{DType: c.Value.DType, Shape: c.Value.Shape.Clone()}}, nil
}

// Eval implements Op.
func (c *Constant) Eval([]*Array) ([]*Array, error) {
	if c.Value == nil {
		return nil, fmt.Errorf("Constant has no value")
	}
	a, err := ArrayFromTensor(c.Value)
	if err != nil {
		return nil, fmt.Errorf("Constant's value: %w", err)
	}
	return []*Array{a}, nil
}

// ConstantOfShape outputs a tensor of the shape its int64 input holds,
// every element Value; DType Invalid means float32, ONNX's default.
type ConstantOfShape struct {
	DType tensor.DType
	Value float64
}

// Kind implements Op.
func (*ConstantOfShape) Kind() string { return "ConstantOfShape" }

func (c *ConstantOfShape) dtype() tensor.DType {
	if c.DType == tensor.Invalid {
		return tensor.Float32
	}
	return c.DType
}

func checkDims(dims []int, desc string) (tensor.Shape, error) {
	for _, d := range dims {
		if d < 0 {
			return nil, fmt.Errorf("%s %v has a negative dimension", desc, dims)
		}
	}
	s := tensor.Shape(dims)
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", desc, err)
	}
	return s, nil
}

// Infer implements Op.
func (c *ConstantOfShape) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	dims, err := loadTimeVector(in[0], "ConstantOfShape's shape input")
	if err != nil {
		return nil, err
	}
	s, err := checkDims(dims, "ConstantOfShape's shape")
	if err != nil {
		return nil, err
	}
	return []Type{{DType: c.dtype(), Shape: s}}, nil
}

// Eval implements Op.
func (c *ConstantOfShape) Eval(in []*Array) ([]*Array, error) {
	dims, err := arrayInts(in[0], "ConstantOfShape's shape input")
	if err != nil {
		return nil, err
	}
	s, err := checkDims(dims, "ConstantOfShape's shape")
	if err != nil {
		return nil, err
	}
	out := NewArray(c.dtype(), s)
	for i := range out.Data {
		out.Data[i] = c.Value
	}
	out.RoundTo()
	return []*Array{out}, nil
}

// Dropout at inference is the identity. Inputs: data, optional ratio,
// optional training_mode; outputs: the data and an optional all-true bool
// mask. Training mode is accepted only with a constant ratio of 0, where
// it is the identity too: any other ratio drops at random.
type Dropout struct{}

// Kind implements Op.
func (*Dropout) Kind() string { return "Dropout" }

// constScalar returns the value of v, a one-element load-time input.
func constScalar(v *Value, desc string) (float64, error) {
	if !v.IsConst() {
		return 0, notConstant(desc, v.Name)
	}
	a, err := ArrayFromTensor(v.Const)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", desc, v.Name, err)
	}
	if len(a.Data) != 1 {
		return 0, fmt.Errorf("%s %q is %s, want a scalar", desc, v.Name, v.Type)
	}
	return a.Data[0], nil
}

// Infer implements Op.
func (*Dropout) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 3); err != nil {
		return nil, err
	}
	if len(in) == 3 && in[2] != nil {
		training, err := constScalar(in[2], "Dropout's training_mode input")
		if err != nil {
			return nil, err
		}
		if training != 0 {
			ratio := 0.5 // ONNX's default
			if in[1] != nil {
				if ratio, err = constScalar(in[1], "Dropout's ratio input (in training mode)"); err != nil {
					return nil, err
				}
			}
			if ratio != 0 {
				return nil, fmt.Errorf("Dropout's training_mode input %q is true with ratio %v: random training-mode dropout: %w", in[2].Name, ratio, ErrUnsupported)
			}
		}
	}
	t := Type{DType: in[0].Type.DType, Shape: in[0].Type.Shape.Clone()}
	return []Type{t, {DType: tensor.Bool, Shape: t.Shape.Clone()}}, nil
}

// Eval implements Op.
func (*Dropout) Eval(in []*Array) ([]*Array, error) {
	mask := NewArray(tensor.Bool, in[0].Shape)
	for i := range mask.Data {
		mask.Data[i] = 1
	}
	return []*Array{in[0].Clone(), mask}, nil
}

// Range outputs start, start+delta, ... up to but excluding limit; its
// three inputs are scalars of one dtype.
type Range struct{}

// Kind implements Op.
func (*Range) Kind() string { return "Range" }

// rangeLen is ONNX's max(ceil((limit - start) / delta), 0).
func rangeLen(dt tensor.DType, start, limit, delta float64) (int, error) {
	if delta == 0 {
		return 0, fmt.Errorf("Range's delta is 0")
	}
	if math.IsNaN(start) || math.IsNaN(limit) || math.IsNaN(delta) || math.IsInf(start, 0) || math.IsInf(limit, 0) {
		return 0, fmt.Errorf("Range's bounds start=%v limit=%v delta=%v are not finite", start, limit, delta)
	}
	n := math.Ceil((limit - start) / delta)
	if isInt(dt) {
		// Exact integer ceiling division: float64 division may round.
		s, l, d := int64(start), int64(limit), int64(delta)
		num := l - s
		q := num / d
		if num%d != 0 && (num < 0) == (d < 0) {
			q++
		}
		n = float64(q)
	}
	if n <= 0 {
		return 0, nil
	}
	if n > maxOutElements {
		return 0, fmt.Errorf("Range from %v to %v by %v has %v elements", start, limit, delta, n)
	}
	return int(n), nil
}

// maxOutElements bounds the element count of a data-dependent output
// (ConstantOfShape, Range) that Infer accepts.
const maxOutElements = 1 << 40

func (*Range) scalars(in []*Array) (start, limit, delta float64, err error) {
	for i, a := range in {
		if len(a.Data) != 1 {
			return 0, 0, 0, fmt.Errorf("Range's input %d is %s%v, want a scalar", i, a.DType, a.Shape)
		}
	}
	return in[0].Data[0], in[1].Data[0], in[2].Data[0], nil
}

// Infer implements Op.
func (r *Range) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 3, 3); err != nil {
		return nil, err
	}
	if err := sameDTypes(in, "Range's start, limit and delta"); err != nil {
		return nil, err
	}
	dt := in[0].Type.DType
	if dt == tensor.Bool {
		return nil, fmt.Errorf("Range of %s is not defined", dt)
	}
	arrs := make([]*Array, 3)
	for i, name := range []string{"start", "limit", "delta"} {
		v := in[i]
		if !v.IsConst() {
			return nil, notConstant("Range's "+name+" input", v.Name)
		}
		a, err := ArrayFromTensor(v.Const)
		if err != nil {
			return nil, fmt.Errorf("Range's %s input %q: %w", name, v.Name, err)
		}
		arrs[i] = a
	}
	start, limit, delta, err := r.scalars(arrs)
	if err != nil {
		return nil, err
	}
	n, err := rangeLen(dt, start, limit, delta)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: dt, Shape: tensor.Shape{n}}}, nil
}

// Eval implements Op.
func (r *Range) Eval(in []*Array) ([]*Array, error) {
	start, limit, delta, err := r.scalars(in)
	if err != nil {
		return nil, err
	}
	n, err := rangeLen(in[0].DType, start, limit, delta)
	if err != nil {
		return nil, err
	}
	out := NewArray(in[0].DType, tensor.Shape{n})
	for i := range out.Data {
		out.Data[i] = start + float64(i)*delta
	}
	out.RoundTo()
	return []*Array{out}, nil
}

// Where selects x where its bool condition is true and y elsewhere, all
// three broadcast together.
type Where struct{}

// Kind implements Op.
func (*Where) Kind() string { return "Where" }

// Infer implements Op.
func (*Where) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 3, 3); err != nil {
		return nil, err
	}
	if in[0].Type.DType != tensor.Bool {
		return nil, fmt.Errorf("Where's condition is %s, want bool", in[0].Type)
	}
	if in[1].Type.DType != in[2].Type.DType {
		return nil, fmt.Errorf("Where's x %s and y %s differ in dtype", in[1].Type, in[2].Type)
	}
	shape, err := BroadcastShape(in[0].Type.Shape, in[1].Type.Shape, in[2].Type.Shape)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[1].Type.DType, Shape: shape}}, nil
}

// Eval implements Op.
func (*Where) Eval(in []*Array) ([]*Array, error) {
	c, x, y := in[0], in[1], in[2]
	shape, err := BroadcastShape(c.Shape, x.Shape, y.Shape)
	if err != nil {
		return nil, err
	}
	out := NewArray(x.DType, shape)
	ci, xi, yi := BroadcastIndex(c.Shape, shape), BroadcastIndex(x.Shape, shape), BroadcastIndex(y.Shape, shape)
	for k := range out.Data {
		if c.Data[ci[k]] != 0 {
			out.Data[k] = x.Data[xi[k]]
		} else {
			out.Data[k] = y.Data[yi[k]]
		}
	}
	return []*Array{out}, nil
}

// VariadicKind names an elementwise function of any number of broadcast
// inputs.
type VariadicKind string

// The variadic elementwise ops (ONNX names).
const (
	OpSum  VariadicKind = "Sum"
	OpMax  VariadicKind = "Max"
	OpMin  VariadicKind = "Min"
	OpMean VariadicKind = "Mean"
)

// Variadic folds one or more inputs of one dtype, NumPy-broadcast
// together, with Sum, Max, Min or Mean. Max and Min propagate NaN, as
// NumPy's maximum and minimum do.
type Variadic struct{ Fn VariadicKind }

// Kind implements Op.
func (v *Variadic) Kind() string { return string(v.Fn) }

func (v *Variadic) check() error {
	switch v.Fn {
	case OpSum, OpMax, OpMin, OpMean:
		return nil
	}
	return fmt.Errorf("unknown variadic op %q", v.Fn)
}

// Infer implements Op.
func (v *Variadic) Infer(in []*Value) ([]Type, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	if len(in) == 0 {
		return nil, fmt.Errorf("%s takes at least one input", v.Fn)
	}
	shapes := make([]tensor.Shape, len(in))
	for i, x := range in {
		if x == nil {
			return nil, fmt.Errorf("%s's input %d is absent", v.Fn, i)
		}
		shapes[i] = x.Type.Shape
	}
	if err := sameDTypes(in, string(v.Fn)); err != nil {
		return nil, err
	}
	if in[0].Type.DType == tensor.Bool {
		return nil, fmt.Errorf("%s of bool is not defined", v.Fn)
	}
	shape, err := BroadcastShape(shapes...)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: in[0].Type.DType, Shape: shape}}, nil
}

// Eval implements Op.
func (v *Variadic) Eval(in []*Array) ([]*Array, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	if len(in) == 0 {
		return nil, fmt.Errorf("%s takes at least one input", v.Fn)
	}
	shapes := make([]tensor.Shape, len(in))
	for i, x := range in {
		shapes[i] = x.Shape
	}
	shape, err := BroadcastShape(shapes...)
	if err != nil {
		return nil, err
	}
	out := NewArray(in[0].DType, shape)
	for j, x := range in {
		idx := BroadcastIndex(x.Shape, shape)
		for k := range out.Data {
			a := x.Data[idx[k]]
			if j == 0 {
				out.Data[k] = a
				continue
			}
			o := out.Data[k]
			switch {
			case v.Fn == OpSum || v.Fn == OpMean:
				out.Data[k] = o + a
			case math.IsNaN(o) || math.IsNaN(a):
				out.Data[k] = math.NaN()
			case v.Fn == OpMax:
				out.Data[k] = math.Max(o, a)
			default:
				out.Data[k] = math.Min(o, a)
			}
		}
	}
	if v.Fn == OpMean {
		for k := range out.Data {
			out.Data[k] /= float64(len(in))
		}
	}
	out.RoundTo()
	return []*Array{out}, nil
}

// IsInf is ONNX's IsInf with one of its sides switched off (with both on,
// importers use Unary IsInf).
type IsInf struct{ DetectNegative, DetectPositive bool }

// Kind implements Op.
func (*IsInf) Kind() string { return "IsInf" }

// Infer implements Op.
func (*IsInf) Infer(in []*Value) ([]Type, error) {
	if err := wantInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if !isFloatType(in[0].Type.DType) {
		return nil, fmt.Errorf("IsInf's input is %s, want a float dtype", in[0].Type)
	}
	return []Type{{DType: tensor.Bool, Shape: in[0].Type.Shape.Clone()}}, nil
}

// Eval implements Op.
func (f *IsInf) Eval(in []*Array) ([]*Array, error) {
	out := NewArray(tensor.Bool, in[0].Shape)
	for i, v := range in[0].Data {
		out.Data[i] = b2f(f.DetectPositive && math.IsInf(v, 1) || f.DetectNegative && math.IsInf(v, -1))
	}
	return []*Array{out}, nil
}
