package torchvision

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"goinfer/internal/checkpoint"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// ParamSpec is one tensor a state dict of an architecture holds: its key
// and shape. Optional tensors (BatchNorm's num_batches_tracked) may be
// absent.
type ParamSpec struct {
	Key      string
	Shape    tensor.Shape
	Optional bool
	// Int marks integer buffers (num_batches_tracked), which are not
	// parameters.
	Int bool
	// Ignored marks tensors inference does not read (auxiliary training
	// classifiers that the published weights hold).
	Ignored bool
	// IntValues is the content of an integer buffer the architecture
	// fixes (Swin's relative position index).
	IntValues []int64
	// Buffer marks a float buffer whose content the architecture fixes
	// (Swin V2's relative coordinates, FloatValues): not a parameter.
	Buffer      bool
	FloatValues []float32
}

// builder emits an architecture's graph while checking each state-dict
// tensor it reads against the shape the architecture needs. With no state
// dict it only records the specs (parameter tensors then carry no data),
// which is how ParamSpecs and RandomStateDict learn an architecture's
// tensors without allocating its weights.
type builder struct {
	g        *ir.Graph
	sd       *checkpoint.StateDict
	specs    []ParamSpec
	used     map[string]bool
	problems []string
	names    map[string]int
}

func newBuilder(sd *checkpoint.StateDict) *builder {
	return &builder{g: &ir.Graph{}, sd: sd, used: map[string]bool{}, names: map[string]int{}}
}

func (b *builder) problem(format string, args ...any) {
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
}

// param returns the state-dict tensor key as a float32 constant of the
// given shape. A missing key, a wrong shape or a non-float dtype is
// recorded (every problem is reported at the end, not just the first) and
// a data-less value stands in so that the build can go on.
func (b *builder) param(key string, shape ...int) *ir.Value {
	s := tensor.Shape(shape).Clone()
	b.specs = append(b.specs, ParamSpec{Key: key, Shape: s})
	v := &ir.Value{Name: key, Type: ir.Type{DType: tensor.Float32, Shape: s}}
	if b.sd == nil {
		return v
	}
	if b.used[key] {
		b.problem("key %q is read twice (an architecture bug)", key)
		return v
	}
	b.used[key] = true
	t, ok := b.sd.Get(key)
	if !ok {
		b.problem("missing key %q (want shape %v)", key, s)
		return v
	}
	if !t.Shape.Equal(s) {
		b.problem("key %q has shape %v, the architecture needs %v", key, t.Shape, s)
		return v
	}
	switch t.DType {
	case tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Float64:
	default:
		b.problem("key %q is %s, want a float tensor", key, t.DType)
		return v
	}
	f, err := t.ToFloat32()
	if err != nil {
		b.problem("key %q: %v", key, err)
		return v
	}
	if t.DType == tensor.Float32 {
		// ToFloat32 may alias the state dict's memory mapping, which the
		// caller closes after Build; the graph owns its weights.
		f = append([]float32(nil), f...)
	}
	v.Const, _ = tensor.FromFloat32(s, f)
	return v
}

// buffer marks an integer buffer that torchvision's state dicts carry but
// inference does not read (num_batches_tracked).
func (b *builder) buffer(key string) {
	b.specs = append(b.specs, ParamSpec{Key: key, Shape: tensor.Shape{}, Optional: true, Int: true})
	if b.sd != nil {
		b.used[key] = true
	}
}

// name returns a node name unique in the graph, based on want.
func (b *builder) name(want string) string {
	n := b.names[want]
	b.names[want] = n + 1
	if n == 0 {
		return want
	}
	return fmt.Sprintf("%s_%d", want, n)
}

// node appends a node applying op to in and returns its output.
func (b *builder) node(name string, op ir.Op, in ...*ir.Value) *ir.Value {
	name = b.name(name)
	n := &ir.Node{Name: name, Op: op, Inputs: in}
	out := &ir.Value{Name: name, Producer: n}
	n.Outputs = []*ir.Value{out}
	b.g.Nodes = append(b.g.Nodes, n)
	return out
}

// ints is an int64 constant (shapes, axes, indices).
func (b *builder) ints(name string, v ...int) *ir.Value {
	t := tensor.New(tensor.Int64, len(v))
	for i, x := range v {
		putInt64(t.Data[8*i:], int64(x))
	}
	return &ir.Value{Name: b.name(name), Type: ir.Type{DType: tensor.Int64, Shape: tensor.Shape{len(v)}}, Const: t}
}

// scalarInt is a rank-0 int64 constant.
func (b *builder) scalarInt(name string, v int) *ir.Value {
	t := tensor.New(tensor.Int64)
	putInt64(t.Data, int64(v))
	return &ir.Value{Name: b.name(name), Type: ir.Type{DType: tensor.Int64, Shape: tensor.Shape{}}, Const: t}
}

// scalar is a rank-0 float32 constant.
func (b *builder) scalar(name string, v float32) *ir.Value {
	t, _ := tensor.FromFloat32(tensor.Shape{}, []float32{v})
	return &ir.Value{Name: b.name(name), Type: ir.Type{DType: tensor.Float32, Shape: tensor.Shape{}}, Const: t}
}

func putInt64(b []byte, v int64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

// finish names the problems the build recorded, adding the state dict's
// keys that no part of the architecture read.
func (b *builder) finish(arch string) error {
	if b.sd != nil {
		var extra []string
		for _, k := range b.sd.Names() {
			if !b.used[k] {
				extra = append(extra, k)
			}
		}
		sort.Strings(extra)
		for _, k := range extra {
			t, _ := b.sd.Get(k)
			b.problem("unexpected key %q (shape %v)", k, t.Shape)
		}
	}
	if len(b.problems) == 0 {
		return nil
	}
	const show = 20
	p := b.problems
	more := ""
	if len(p) > show {
		more = fmt.Sprintf("\n  ... and %d more", len(p)-show)
		p = p[:show]
	}
	return fmt.Errorf("torchvision: the state dict does not fit %s (%d problems):\n  %s%s", arch, len(b.problems), strings.Join(p, "\n  "), more)
}

// makeDivisible is torchvision's _make_divisible: v rounded to the nearest
// multiple of divisor, at least minValue (divisor when 0), and never more
// than 10% below v.
func makeDivisible(v float64, divisor, minValue int) int {
	if minValue == 0 {
		minValue = divisor
	}
	n := max(minValue, int(v+float64(divisor)/2)/divisor*divisor)
	if float64(n) < 0.9*v {
		n += divisor
	}
	return n
}

// convOut is a convolution's or pooling's output size.
func convOut(in, k, stride, pad, dil int, ceil bool) int {
	span := in + 2*pad - dil*(k-1) - 1
	if ceil {
		o := int(math.Ceil(float64(span)/float64(stride))) + 1
		// PyTorch drops a last window that would start in the padding.
		if (o-1)*stride >= in+pad {
			o--
		}
		return o
	}
	return span/stride + 1
}
