package ir

import (
	"fmt"
	"slices"
)

// BatchIndependent returns nil when g computes every image of a batch from
// that image alone, so that a batch may run as separate chunks with the
// same result, and otherwise an error naming the first node that may mix
// images.
//
// It binds g at batch 1 and at batch 2 and follows where the images lie in
// every value computed from the inputs' data (a batchLayout): the batch
// may move to another dimension (a transpose) or share one with other
// indices (a reshape that merges it with heads or tokens), as exports of
// attention do. Each op must have a rule that maps its inputs' layouts to
// its outputs' and shows that no output element reads another image's
// elements: elementwise ops need their data inputs' images in the same
// place, ops that work along dimensions (reductions, softmax, norms,
// concatenation, slicing, gathers, matrix products' contraction,
// convolutions' channels) must not work along the batch's, and reshapes
// must keep the batch a contiguous digit of one dimension's index. An op
// without a rule is refused. The layouts found are checked against how
// the shapes scale between the two bindings.
func BatchIndependent(g *Graph) error {
	g1, err := Bind(g, 1)
	if err != nil {
		return err
	}
	g2, err := Bind(g, 2)
	if err != nil {
		return err
	}
	if len(g1.Nodes) != len(g2.Nodes) || len(g1.Inputs) != len(g2.Inputs) {
		return fmt.Errorf("ir: graph %q binds to %d nodes at batch 1 and %d at batch 2", g.Name, len(g1.Nodes), len(g2.Nodes))
	}
	c := batchCheck{layout: map[*Value]batchLayout{}, at2: map[*Value]*Value{}}
	for i, v := range g1.Inputs {
		c.at2[v] = g2.Inputs[i]
		ax, err := c.scaledAxis(v)
		if err != nil {
			return err
		}
		if ax < 0 {
			// An input whose shape does not depend on the batch is the same
			// for every image.
			continue
		}
		if ax != 0 {
			return fmt.Errorf("ir: input %q has its images along dimension %d, not 0", v.Name, ax)
		}
		c.layout[v] = batchLayout{axis: 0, inner: 1}
	}
	for i, n := range g1.Nodes {
		m := g2.Nodes[i]
		if n.Op.Kind() != m.Op.Kind() || len(n.Inputs) != len(m.Inputs) || len(n.Outputs) != len(m.Outputs) {
			return fmt.Errorf("ir: %s binds to %s at batch 2", n, m)
		}
		for j, v := range n.Inputs {
			if v != nil {
				c.at2[v] = m.Inputs[j]
			}
		}
		for j, v := range n.Outputs {
			if v != nil {
				c.at2[v] = m.Outputs[j]
			}
		}
		if err := c.node(n); err != nil {
			return err
		}
	}
	// Chunks are cut from and joined along the outputs' first dimension.
	for _, v := range g1.Outputs {
		if l, ok := c.layout[v]; !ok || l != (batchLayout{axis: 0, inner: 1}) || v.Type.Shape[0] != 1 {
			return fmt.Errorf("ir: output %q does not hold one image per index of its first dimension", v.Name)
		}
	}
	return nil
}

// batchLayout says where the images lie in a value of a batch of B: along
// dimension axis, whose index is (hi*B + b)*inner + lo for image b, with
// lo < inner. hi and inner do not depend on B.
type batchLayout struct{ axis, inner int }

// batchCheck holds BatchIndependent's state: the layout of each value of
// the batch-1 binding computed from the inputs' data, and each batch-1
// value's batch-2 twin.
type batchCheck struct {
	layout map[*Value]batchLayout
	at2    map[*Value]*Value
}

// scaledAxis returns the dimension of v that doubles from batch 1 to
// batch 2, -1 when v's shape does not depend on the batch, and an error
// when it changes in any other way.
func (c *batchCheck) scaledAxis(v *Value) (int, error) {
	s1, s2 := v.Type.Shape, c.at2[v].Type.Shape
	if slices.Equal(s1, s2) {
		return -1, nil
	}
	ax := -1
	if len(s1) == len(s2) {
		for i := range s1 {
			if s1[i] == s2[i] {
				continue
			}
			if ax >= 0 || s2[i] != 2*s1[i] {
				ax = -1
				break
			}
			ax = i
		}
	}
	if ax < 0 {
		return -1, fmt.Errorf("ir: %q has shape %v at batch 1 and %v at batch 2: its images are not along one dimension", v.Name, s1, s2)
	}
	return ax, nil
}

// node finds the layouts of n's outputs from its inputs', or says why n
// may mix images.
func (c *batchCheck) node(n *Node) error {
	data := false
	for _, v := range n.Inputs {
		if v == nil {
			continue
		}
		if _, ok := c.layout[v]; ok {
			data = true
			continue
		}
		if _, err := c.uniform(v); err != nil {
			return fmt.Errorf("ir: %s: %w", n, err)
		}
	}
	// A tensor's shape or size is not its data.
	if !data || n.Op.Kind() == "Shape" || n.Op.Kind() == "Size" {
		for _, v := range n.Outputs {
			if v == nil {
				continue
			}
			if ax, err := c.scaledAxis(v); err != nil || ax >= 0 {
				// Computed from the batch size, not from the images: it
				// may differ between a chunk and the whole batch.
				c.poison(v)
			}
		}
		return nil
	}
	outs, err := c.rule(n)
	if err != nil {
		return fmt.Errorf("ir: %s: %w", n, err)
	}
	for j, v := range n.Outputs {
		if v == nil {
			continue
		}
		ax, err := c.scaledAxis(v)
		if err != nil {
			return fmt.Errorf("ir: %s: %w", n, err)
		}
		if ax != outs[j].axis {
			return fmt.Errorf("ir: %s: output %q scales with the batch along dimension %d, not %d where its images are", n, v.Name, ax, outs[j].axis)
		}
		c.layout[v] = outs[j]
	}
	return nil
}

// poisoned marks values whose shape follows the batch size though they are
// not computed from the images (a Range or Expand over a batch-sized shape
// too big to fold): any data op that reads one is refused.
var poisoned = batchLayout{axis: -1}

func (c *batchCheck) poison(v *Value) { c.layout[v] = poisoned }

// uniform checks that v, an input that does not carry images, is the same
// for every image: a constant whose shape does not depend on the batch, or
// one folded from a batch-sized shape (an Expand of a class token) whose
// values do not vary along the dimension that scales.
func (c *batchCheck) uniform(v *Value) (bool, error) {
	ax, err := c.scaledAxis(v)
	if err != nil {
		return false, err
	}
	if ax < 0 {
		return true, nil
	}
	a := c.at2[v].Const
	if a == nil {
		return false, fmt.Errorf("%q depends on the batch size but is not computed from the images", v.Name)
	}
	// Compare each run of the dimensions after ax (bytes) with the first
	// of its group of shape[ax].
	shape := a.Shape
	run := len(a.Data)
	for _, d := range shape[:ax+1] {
		if d == 0 {
			return true, nil
		}
		run /= d
	}
	n := shape[ax]
	for i := 0; i+run <= len(a.Data); i += run {
		k := (i / run) % n
		if k != 0 && string(a.Data[i:i+run]) != string(a.Data[i-k*run:i-(k-1)*run]) {
			return false, fmt.Errorf("constant %q of shape %v differs along its batch-sized dimension %d", v.Name, shape, ax)
		}
	}
	return true, nil
}

// in returns the layout of n's input i and whether it carries images.
func (c *batchCheck) in(n *Node, i int) (batchLayout, bool) {
	v := n.Input(i)
	if v == nil {
		return batchLayout{}, false
	}
	l, ok := c.layout[v]
	return l, ok
}

// rank is the rank of n's input i in the batch-1 binding.
func rank(n *Node, i int) int { return len(n.Input(i).Type.Shape) }

// rule returns the layouts of n's outputs, or why n may mix images.
func (c *batchCheck) rule(n *Node) ([]batchLayout, error) {
	for i := range n.Inputs {
		if l, ok := c.in(n, i); ok && l == poisoned {
			return nil, fmt.Errorf("input %q follows the batch size but is not computed from the images", n.Inputs[i].Name)
		}
	}
	same := func(l batchLayout) []batchLayout {
		out := make([]batchLayout, len(n.Outputs))
		for i := range out {
			out[i] = l
		}
		return out
	}
	switch op := n.Op.(type) {
	case *Unary, *Binary, *Variadic, *Clip, *LeakyRelu, *Elu, *Selu, *Celu, *HardSigmoid,
		*Gelu, *ThresholdedRelu, *Shrink, *Cast, *CastLike, *Dropout, *IsInf, *Where:
		l, err := c.aligned(n, len(n.Outputs[0].Type.Shape))
		return same(l), err
	case *Transpose:
		l, _ := c.in(n, 0)
		perm := op.Perm
		if len(perm) == 0 {
			// ONNX's default reverses the dimensions.
			r := rank(n, 0)
			return same(batchLayout{axis: r - 1 - l.axis, inner: l.inner}), nil
		}
		j := slices.Index(perm, l.axis)
		if j < 0 {
			return nil, fmt.Errorf("perm %v does not place dimension %d", perm, l.axis)
		}
		return same(batchLayout{axis: j, inner: l.inner}), nil
	case *Reshape, *Flatten, *Squeeze, *Unsqueeze:
		l, err := c.reshaped(n)
		return same(l), err
	case *Conv, *ConvTranspose:
		return c.imagesFirst(n, 3)
	case *Pool, *GlobalPool, *LpPool, *GlobalLpPool, *DepthToSpace, *SpaceToDepth:
		return c.imagesFirst(n, 1)
	case *BatchNorm, *InstanceNorm, *LRN:
		// Inference statistics are inputs (a BatchNorm over the batch's
		// own statistics is a reduction over dimension 0, refused there);
		// InstanceNorm's are over one image's spatial dimensions.
		return c.imagesFirst(n, len(n.Inputs))
	case *Softmax:
		r := rank(n, 0)
		a, err := axisOf(op.Axis, r, "Softmax's axis")
		if err != nil {
			return nil, err
		}
		if op.Coerce2D {
			return c.along(n, span(a, r), 1)
		}
		return c.along(n, []int{a}, 1)
	case *LayerNorm:
		r := rank(n, 0)
		a, err := axisOf(op.Axis, r, "LayerNorm's axis")
		if err != nil {
			return nil, err
		}
		return c.along(n, span(a, r), 1)
	case *Reduce:
		r := rank(n, 0)
		axes := op.Axes
		if len(n.Inputs) > 1 && n.Inputs[1] != nil {
			var err error
			if axes, err = loadTimeVector(n.Inputs[1], "the reduction's axes"); err != nil {
				return nil, err
			}
		}
		if len(axes) == 0 && op.NoopWithEmptyAxes {
			return c.along(n, nil, 1)
		}
		return c.reduceAlong(n, axes, r)
	case *ArgReduce:
		a, err := axisOf(op.Axis, rank(n, 0), "the arg-reduction's axis")
		if err != nil {
			return nil, err
		}
		return c.along(n, []int{a}, 1)
	case *TopK:
		a, err := axisOf(op.Axis, rank(n, 0), "TopK's axis")
		if err != nil {
			return nil, err
		}
		return c.along(n, []int{a}, 1)
	case *Split:
		a, err := axisOf(op.Axis, rank(n, 0), "Split's axis")
		if err != nil {
			return nil, err
		}
		return c.along(n, []int{a}, 1)
	case *Concat:
		a, err := axisOf(op.Axis, rank(n, 0), "Concat's axis")
		if err != nil {
			return nil, err
		}
		return c.along(n, []int{a}, len(n.Inputs))
	case *Gather:
		// Only the data is gathered from; indices computed from the
		// images would be another image's choice.
		a, err := axisOf(op.Axis, rank(n, 0), "Gather's axis")
		if err != nil {
			return nil, err
		}
		return c.along(n, []int{a}, 1)
	case *Slice:
		return c.sliced(n)
	case *Pad:
		return c.padded(n)
	case *Tile:
		// Repeating the batch's dimension repeats its hi digit, not b.
		l, ok := c.in(n, 0)
		if _, reps := c.in(n, 1); !ok || reps {
			return nil, fmt.Errorf("it repeats by counts computed from the images")
		}
		return same(l), nil
	case *Expand:
		l, _ := c.in(n, 0)
		r := len(n.Outputs[0].Type.Shape)
		ax := l.axis + r - rank(n, 0)
		if n.Outputs[0].Type.Shape[ax] != n.Input(0).Type.Shape[l.axis] {
			return nil, fmt.Errorf("it broadcasts dimension %d, where the images are", l.axis)
		}
		return c.along(n, nil, 1)
	case *Resize:
		l, _ := c.in(n, 0)
		if op.CoordinateTransformMode == "tf_crop_and_resize" || n.Outputs[0].Type.Shape[l.axis] != n.Input(0).Type.Shape[l.axis] {
			return nil, fmt.Errorf("it resizes dimension %d, where the images are", l.axis)
		}
		return c.along(n, nil, 1)
	case *MatMul:
		return c.matmul(n)
	case *Gemm:
		return c.gemm(n, op)
	}
	return nil, fmt.Errorf("no rule says %s keeps images apart", n.Op.Kind())
}

// span is the dimensions from a to r-1.
func span(a, r int) []int {
	s := make([]int, 0, r-a)
	for i := a; i < r; i++ {
		s = append(s, i)
	}
	return s
}

// aligned checks an elementwise op: the inputs that carry images must,
// aligned to the output's rank r from the right as broadcasting does, hold
// them in the same place, which becomes the output's.
func (c *batchCheck) aligned(n *Node, r int) (batchLayout, error) {
	out := batchLayout{axis: -1}
	for i := range n.Inputs {
		l, ok := c.in(n, i)
		if !ok {
			continue
		}
		a := batchLayout{axis: l.axis + r - rank(n, i), inner: l.inner}
		if out.axis >= 0 && a != out {
			return out, fmt.Errorf("its inputs hold their images in different places (dimension %d in steps of %d, dimension %d in steps of %d)", out.axis, out.inner, a.axis, a.inner)
		}
		out = a
	}
	return out, nil
}

// along checks an op that works along the dimensions axes of its inputs
// before index nData (of one rank) and keeps the other dimensions in
// order: those inputs that carry images must hold them alike (a
// concatenation's) and not along a worked dimension; inputs from nData on
// must not carry images. The output's images are in the dimension that
// scales, with the inputs' step.
func (c *batchCheck) along(n *Node, axes []int, nData int) ([]batchLayout, error) {
	l, ref := batchLayout{axis: -1}, -1
	for i := range n.Inputs {
		m, ok := c.in(n, i)
		if !ok {
			continue
		}
		if i >= nData {
			return nil, fmt.Errorf("its input %d (%q) is computed from the images", i, n.Inputs[i].Name)
		}
		if ref >= 0 && m != l {
			return nil, fmt.Errorf("its inputs hold their images in different places")
		}
		l, ref = m, i
	}
	if ref < 0 {
		return nil, fmt.Errorf("its images come from an input other than those it works on")
	}
	if slices.Contains(axes, l.axis) {
		return nil, fmt.Errorf("it works along dimension %d, where the images are", l.axis)
	}
	outs := make([]batchLayout, len(n.Outputs))
	for j, v := range n.Outputs {
		if v == nil {
			continue
		}
		ax, err := c.scaledAxis(v)
		if err != nil {
			return nil, err
		}
		if d := n.Input(ref).Type.Shape[l.axis]; ax < 0 || v.Type.Shape[ax] != d {
			return nil, fmt.Errorf("output %q does not keep dimension %d's %d entries", v.Name, l.axis, d)
		}
		outs[j] = batchLayout{axis: ax, inner: l.inner}
	}
	return outs, nil
}

// reduceAlong is along for a reduction over axes (all when empty).
func (c *batchCheck) reduceAlong(n *Node, axes []int, r int) ([]batchLayout, error) {
	if len(axes) == 0 {
		return c.along(n, span(0, r), 1)
	}
	ax, err := axesOf(axes, r, "the reduction's axes")
	if err != nil {
		return nil, err
	}
	return c.along(n, ax, 1)
}

// imagesFirst checks an op over [N, C, spatial...] tensors that treats
// each index of dimension 0 alone: the images must lie along dimension 0,
// inputs 1 to params-1 (weights, statistics) must not carry images, and
// later inputs (a fused residual) must hold them as the output does.
func (c *batchCheck) imagesFirst(n *Node, params int) ([]batchLayout, error) {
	l, ok := c.in(n, 0)
	if !ok || l.axis != 0 {
		return nil, fmt.Errorf("its images are not along dimension 0")
	}
	for i := 1; i < params && i < len(n.Inputs); i++ {
		if _, ok := c.in(n, i); ok {
			return nil, fmt.Errorf("its input %d (%q) is computed from the images", i, n.Inputs[i].Name)
		}
	}
	if n.Outputs[0].Type.Shape[0] != n.Input(0).Type.Shape[0] {
		return nil, fmt.Errorf("it changes dimension 0, where the images are")
	}
	for _, v := range n.Outputs[1:] {
		if v != nil {
			// MaxPool's indices count across the whole batch.
			return nil, fmt.Errorf("its output %q indexes the whole batch", v.Name)
		}
	}
	for i := params; i < len(n.Inputs); i++ {
		if m, ok := c.in(n, i); ok && (m != l || rank(n, i) != rank(n, 0)) {
			return nil, fmt.Errorf("its input %d (%q) holds its images elsewhere", i, n.Inputs[i].Name)
		}
	}
	return []batchLayout{l}, nil
}

// reshaped follows the images through an op that keeps the elements in
// order and changes only the shape. The images are the digit of the flat
// index in steps of inner times the size of the dimensions after theirs;
// the output dimension that scales must hold that digit whole.
func (c *batchCheck) reshaped(n *Node) (batchLayout, error) {
	l, _ := c.in(n, 0)
	step := l.inner
	for _, d := range n.Input(0).Type.Shape[l.axis+1:] {
		step *= d
	}
	v := n.Outputs[0]
	ax, err := c.scaledAxis(v)
	if err != nil {
		return l, err
	}
	if ax < 0 {
		return l, fmt.Errorf("output %q does not scale with the batch", v.Name)
	}
	after := 1
	for _, d := range v.Type.Shape[ax+1:] {
		after *= d
	}
	if step%after != 0 || v.Type.Shape[ax]%(step/after) != 0 {
		return l, fmt.Errorf("it splits the images' index (steps of %d) across dimensions of %v", step, v.Type.Shape)
	}
	return batchLayout{axis: ax, inner: step / after}, nil
}

// sliced checks a Slice: it must take dimension l.axis whole and in order.
func (c *batchCheck) sliced(n *Node) ([]batchLayout, error) {
	l, _ := c.in(n, 0)
	starts, ends, axes, steps, err := sliceParams(len(n.Inputs), func(i int, desc string) ([]int, error) {
		if n.Inputs[i] == nil {
			return nil, nil
		}
		return loadTimeVector(n.Inputs[i], desc)
	})
	if err != nil {
		return nil, err
	}
	in := n.Input(0).Type.Shape
	plan, err := slicePlan(in, starts, ends, axes, steps)
	if err != nil {
		return nil, err
	}
	if p := plan[l.axis]; p.start != 0 || p.step != 1 || p.count != in[l.axis] {
		return nil, fmt.Errorf("it slices dimension %d, where the images are", l.axis)
	}
	return c.along(n, nil, 1)
}

// padded checks a Pad: it must leave dimension l.axis alone.
func (c *batchCheck) padded(n *Node) ([]batchLayout, error) {
	l, _ := c.in(n, 0)
	pads, err := loadTimeVector(n.Inputs[1], "Pad's pads input")
	if err != nil {
		return nil, err
	}
	var axes []int
	if len(n.Inputs) == 4 && n.Inputs[3] != nil {
		if axes, err = loadTimeVector(n.Inputs[3], "Pad's axes input"); err != nil {
			return nil, err
		}
	}
	in := n.Input(0).Type.Shape
	begin, out, err := n.Op.(*Pad).plan(in, pads, axes)
	if err != nil {
		return nil, err
	}
	if begin[l.axis] != 0 || out[l.axis] != in[l.axis] {
		return nil, fmt.Errorf("it pads dimension %d, where the images are", l.axis)
	}
	return c.along(n, nil, 1)
}

// matmul checks a MatMul: each operand that carries images must hold them
// in its broadcast (leading) dimensions or in its own free dimension (A's
// rows, B's columns), never in the contracted one; fused bias and residual
// inputs must hold them as the output does.
func (c *batchCheck) matmul(n *Node) ([]batchLayout, error) {
	r := len(n.Outputs[0].Type.Shape)
	out := batchLayout{axis: -1}
	for i, free := range [2]int{2, 1} {
		l, ok := c.in(n, i)
		if !ok {
			continue
		}
		ri := rank(n, i)
		if ri < 2 {
			return nil, fmt.Errorf("its operand %d is a vector computed from the images", i)
		}
		var a batchLayout
		switch {
		case l.axis == ri-free:
			a = batchLayout{axis: r - free, inner: l.inner}
		case l.axis >= ri-2:
			return nil, fmt.Errorf("it contracts operand %d's dimension %d, where the images are", i, l.axis)
		default:
			a = batchLayout{axis: l.axis + r - ri, inner: l.inner}
		}
		if out.axis >= 0 && a != out {
			return nil, fmt.Errorf("its operands hold their images in different places")
		}
		out = a
	}
	if _, err := c.extras(n, 2, out, r); err != nil {
		return nil, err
	}
	return []batchLayout{out}, nil
}

// gemm checks a Gemm: the images must be A's rows or B's columns, not
// both, never the contracted dimension.
func (c *batchCheck) gemm(n *Node, op *Gemm) ([]batchLayout, error) {
	rows, cols := 0, 1 // A's rows and B's columns
	if op.TransA {
		rows = 1
	}
	if op.TransB {
		cols = 0
	}
	out := batchLayout{axis: -1}
	if l, ok := c.in(n, 0); ok {
		if l.axis != rows {
			return nil, fmt.Errorf("it contracts A's dimension %d, where the images are", l.axis)
		}
		out = batchLayout{axis: 0, inner: l.inner}
	}
	if l, ok := c.in(n, 1); ok {
		if out.axis >= 0 {
			return nil, fmt.Errorf("both A and B are computed from the images")
		}
		if l.axis != cols {
			return nil, fmt.Errorf("it contracts B's dimension %d, where the images are", l.axis)
		}
		out = batchLayout{axis: 1, inner: l.inner}
	}
	if _, err := c.extras(n, 2, out, 2); err != nil {
		return nil, err
	}
	return []batchLayout{out}, nil
}

// extras checks the inputs from index from on (bias, residual) of an op
// whose output holds its images as out: those carrying images must hold
// them alike.
func (c *batchCheck) extras(n *Node, from int, out batchLayout, r int) (batchLayout, error) {
	for i := from; i < len(n.Inputs); i++ {
		l, ok := c.in(n, i)
		if !ok {
			continue
		}
		if a := (batchLayout{axis: l.axis + r - rank(n, i), inner: l.inner}); out.axis < 0 || a != out {
			return out, fmt.Errorf("its input %d (%q) holds its images elsewhere", i, n.Inputs[i].Name)
		}
	}
	return out, nil
}
