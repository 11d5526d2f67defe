package cuda

import (
	"slices"
	"sort"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// Concatenation in place. A DenseNet block concatenates all earlier
// features anew in every layer, so copying each concatenation costs the
// square of the block's depth. Instead, the concatenations along channels
// whose inputs are prefixes of one longest concatenation (the root) share
// the root's output as one buffer: each input is written once into its
// channel slice (by its producer where the producer writes strided
// outputs, else by one copy of only its channels) and each concatenation's
// output is a view of the buffer's channel prefix. Consumers that read
// strided views in place (copies, elementwise kernels, batch norm as the
// row-strided affine kernel) do; the others get a packed copy.

// concatGroup is one shared concatenation buffer.
type concatGroup struct {
	buf  int    // the root concatenation's output: the buffer
	in   []int  // the root's inputs
	offs []int  // each input's first channel
	done []bool // input k is in the buffer
}

// planConcats finds the concatenation groups of g and makes their outputs
// and the inputs that can be written in place views of the buffers.
func (pl *planner) planConcats(g *ir.Graph) error {
	var cands []*ir.Node
	concatOut := map[*ir.Value]bool{}
	for _, n := range g.Nodes {
		if channelConcat(n) {
			cands = append(cands, n)
			concatOut[n.Outputs[0]] = true
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return len(cands[i].Inputs) > len(cands[j].Inputs) })
	type group struct {
		root    *ir.Node
		members []*ir.Node
	}
	var groups []*group
next:
	for _, n := range cands {
		for _, gr := range groups {
			if isPrefix(n.Inputs, gr.root.Inputs) {
				gr.members = append(gr.members, n)
				continue next
			}
		}
		groups = append(groups, &group{root: n})
	}
	// A value concatenated more than once is written in place once at most:
	// into none, for simplicity.
	count := map[*ir.Value]int{}
	for _, gr := range groups {
		for _, v := range gr.root.Inputs {
			count[v]++
		}
	}
	p := pl.p
	for _, gr := range groups {
		buf, err := pl.value(gr.root.Outputs[0])
		if err != nil {
			return err
		}
		bv := &p.vals[buf]
		bv.nhwc = p.cl
		bst := p.st(buf)
		cg := &concatGroup{buf: buf}
		off := 0
		for _, v := range gr.root.Inputs {
			i, err := pl.value(v)
			if err != nil {
				return err
			}
			cg.in, cg.offs, cg.done = append(cg.in, i), append(cg.offs, off), append(cg.done, false)
			if v.Producer != nil && v.Const == nil && v != g.Inputs[0] && !pl.outs[v] && count[v] == 1 && !concatOut[v] {
				val := &p.vals[i]
				val.kind, val.alias, val.off, val.strides, val.nhwc = gAlias, buf, int64(off)*bst[1], slices.Clone(bst), p.cl
			}
			off += v.Type.Shape[1]
		}
		pl.groups[gr.root] = cg
		for _, m := range gr.members {
			o, err := pl.value(m.Outputs[0])
			if err != nil {
				return err
			}
			val := &p.vals[o]
			val.kind, val.alias, val.strides, val.nhwc = gAlias, buf, slices.Clone(bst), p.cl
			pl.groups[m] = cg
		}
	}
	return nil
}

// countUses counts each value's consumers, graph outputs included, and
// records a reader of each value and the graph's outputs.
func (pl *planner) countUses(g *ir.Graph) {
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v != nil {
				pl.uses[v]++
				pl.reader[v] = n
			}
		}
	}
	for _, v := range g.Outputs {
		pl.uses[v]++
		pl.outs[v] = true
	}
}

// channelConcat reports whether n concatenates 4-d values along channels.
func channelConcat(n *ir.Node) bool {
	c, ok := n.Op.(*ir.Concat)
	if !ok || len(n.Outputs) != 1 || n.Outputs[0] == nil || len(n.Inputs) == 0 {
		return false
	}
	ys := n.Outputs[0].Type.Shape
	if len(ys) != 4 || normAxis(c.Axis, 4) != 1 || ys.NumElements() == 0 {
		return false
	}
	for _, v := range n.Inputs {
		if v == nil || len(v.Type.Shape) != 4 {
			return false
		}
	}
	return true
}

// isPrefix reports whether a is a prefix of b.
func isPrefix(a, b []*ir.Value) bool {
	return len(a) <= len(b) && slices.Equal(a, b[:len(a)])
}

// concatInPlace lowers a concatenation of a group: the inputs not yet in
// the buffer (not written there by their producers) are copied into their
// slices; the output is already a view of the buffer.
func (nc *nodeCtx) concatInPlace(cg *concatGroup) error {
	p := nc.pl.p
	bst := p.st(cg.buf)
	for k, in := range nc.in {
		if cg.done[k] {
			continue
		}
		cg.done[k] = true
		if v := &p.vals[in]; v.kind == gAlias && v.alias == cg.buf {
			continue // its producer wrote it in place
		}
		if err := nc.copyInto(cg.buf, int64(cg.offs[k])*bst[1], bst, in, nc.inShape(k)); err != nil {
			return err
		}
	}
	return nil
}

// viewsIn reports whether op's lowering reads strided views in place.
func viewsIn(op ir.Op) bool {
	switch o := op.(type) {
	case *ir.Concat, *ir.BatchNorm, *ir.Binary, *ir.LeakyRelu, *ir.HardSigmoid, *ir.Gelu, *ir.Clip:
		return true
	case *ir.Unary:
		return o.Fn != ir.OpIdentity
	}
	return false
}

// viewsOut reports whether op's lowering writes strided views in place.
func viewsOut(op ir.Op) bool { return viewsIn(op) }

// lowerViews lowers the node, giving ops that cannot read or write strided
// views in place packed copies of their view inputs and packed outputs
// copied into the views afterwards. The inputs packed are the views whose
// nhwc flag is set (channels-last concatenation buffers' views): the other
// views (row-major ones: Split pieces, slices, transposes, reshapes, a
// float32 plan's concatenation prefixes) every lowering reads through
// their strides or copies itself, as products and attention read them in
// place.
func (nc *nodeCtx) lowerViews() error {
	p := nc.pl.p
	op := nc.n.Op
	if !viewsIn(op) {
		for k, v := range nc.in {
			if v >= 0 && nc.val(v).nhwc {
				var err error
				if nc.in[k], err = nc.packed(v); err != nil {
					return err
				}
			}
		}
	}
	var pending [][2]int
	if !viewsOut(op) {
		for k, o := range nc.out {
			if !p.isView(o) {
				continue
			}
			t := nc.temp(nc.val(o).shape)
			nc.out[k] = t
			pending = append(pending, [2]int{t, o})
		}
	}
	if err := lowerNode(nc); err != nil {
		return err
	}
	for _, tv := range pending {
		t, o := tv[0], tv[1]
		if err := nc.copyInto(o, 0, nc.st(o), t, nc.val(o).shape); err != nil {
			return err
		}
	}
	return nil
}

// copyInto copies value a into a strided view of out (at element offset
// outOff and strides os, of a's shape): as the row-strided affine kernel
// with no scale or shift where both are rows of one length (16-byte
// vectors where aligned, which the strided copy kernel does not use),
// else as a strided copy.
func (nc *nodeCtx) copyInto(out int, outOff int64, os []int64, a int, shape tensor.Shape) error {
	as := nc.st(a)
	nhwc := nc.pl.p.cl && len(shape) == 4
	n := int64(shape.NumElements())
	lo, so, oko := rowLayoutOf(shape, os, nhwc)
	la, sa, oka := rowLayoutOf(shape, as, nhwc)
	if oko && oka && n > 0 {
		l := min(lo, la)
		if lo%l == 0 && la%l == 0 && (lo == n || lo == l) && (la == n || la == l) {
			if lo == n {
				so = l
			}
			if la == n {
				sa = l
			}
			nc.add(&gstep{kind: stAffine, out: out, outOff: outOff, a: a, b: -1, res: -1, n: n, channels: int(l), inner: 1,
				op: ewCopy, rowLen: int(l), aRow: sa, oRow: so})
			return nil
		}
	}
	return nc.copyStep(ewCopy, out, outOff, os, a, 0, as, shape)
}

// packed returns v, or a packed copy of a strided view (channels-last
// when the plan is and v is 4-d).
func (nc *nodeCtx) packed(v int) (int, error) {
	p := nc.pl.p
	if !p.isView(v) {
		return v, nil
	}
	s := nc.val(v).shape
	t := nc.temp(s)
	nc.val(t).nhwc = p.cl && len(s) == 4
	return t, nc.copyStep(ewCopy, t, 0, nc.st(t), v, 0, nc.st(v), s)
}

// rowLayout describes v, in the element order of a packed value of its
// shape (channels-last when nhwc), as rows of rowLen contiguous elements
// stride elements apart; packed values are one row.
func (p *gplan) rowLayout(v int, nhwc bool) (rowLen, stride int64, ok bool) {
	return rowLayoutOf(p.vals[v].shape, p.st(v), nhwc)
}

// rowLayoutOf is rowLayout for a shape at strides st.
func rowLayoutOf(shape tensor.Shape, st []int64, nhwc bool) (rowLen, stride int64, ok bool) {
	order := make([]int, len(shape))
	for d := range order {
		order[d] = d
	}
	if nhwc && len(shape) == 4 {
		order = []int{0, 2, 3, 1}
	}
	e, i := int64(1), len(order)-1
	for ; i >= 0; i-- {
		d := order[i]
		if shape[d] == 1 {
			continue
		}
		if st[d] != e {
			break
		}
		e *= int64(shape[d])
	}
	if i < 0 {
		return e, e, true
	}
	rs := st[order[i]]
	acc := rs
	for ; i >= 0; i-- {
		d := order[i]
		if shape[d] == 1 {
			continue
		}
		if st[d] != acc {
			return 0, 0, false
		}
		acc *= int64(shape[d])
	}
	return e, rs, true
}

// affineRows is affineStep for a strided view input or output: the
// elements as rows (rowLayout) of a common length.
func (nc *nodeCtx) affineRows(y, x int, scale, shift []float32, channels, inner int, act int, p0, p1 float32) bool {
	p := nc.pl.p
	nhwc := nc.val(y).nhwc
	if nc.val(x).nhwc != nhwc && len(nc.val(x).shape) == 4 {
		return false
	}
	lx, sx, okx := p.rowLayout(x, nhwc)
	ly, sy, oky := p.rowLayout(y, nhwc)
	if !okx || !oky {
		return false
	}
	l := min(lx, ly)
	if lx%l != 0 || ly%l != 0 || (p.isView(x) && lx != l) || (p.isView(y) && ly != l) {
		return false
	}
	if !p.isView(x) {
		sx = l
	}
	if !p.isView(y) {
		sy = l
	}
	if nhwc {
		inner = 1
	}
	nc.add(&gstep{kind: stAffine, out: y, a: x, b: -1, res: -1, n: nc.val(y).elems, scale: scale, shift: shift,
		channels: max(channels, 1), inner: max(inner, 1), op: act, p0: p0, p1: p1, rowLen: int(l), aRow: sx, oRow: sy})
	return true
}

// fuseActivation folds a unary op into the affine step (batch norm) that
// computes its only input: one pass over memory instead of two.
func (nc *nodeCtx) fuseActivation(code int, p0, p1 float32) bool {
	p := nc.pl.p
	x, y := nc.in[0], nc.out[0]
	if x < 0 || y < 0 || p.isView(x) || p.isView(y) || !nc.val(x).shape.Equal(nc.val(y).shape) || nc.pl.uses[nc.n.Inputs[0]] != 1 {
		return false
	}
	s := nc.pl.defs[x]
	if s == nil || s.kind != stAffine || s.op != ewCopy || s.out != x || s.a == x || s.res >= 0 || s.outOff != 0 || s.n != nc.val(x).elems {
		return false
	}
	nc.val(y).nhwc = nc.val(x).nhwc
	s.out, s.defs = y, []int{y}
	s.op, s.p0, s.p1 = code, p0, p1
	s.node += "+" + nc.n.Name
	delete(nc.pl.defs, x)
	nc.pl.defs[y] = s
	return true
}

// copiedBytes is the bytes a plan's copy steps move (read and write), for
// tests and reports.
func (p *gplan) copiedBytes() int64 {
	var b int64
	for _, s := range p.steps {
		if s.isCopy() {
			b += 2 * s.n * int64(p.elem)
		}
	}
	return b
}

// isCopy reports whether s only moves elements: a strided copy, or an
// affine step over rows with no scale, shift or activation (copyInto).
func (s *gstep) isCopy() bool {
	switch s.kind {
	case stEW:
		return s.op == ewCopy
	case stAffine:
		return s.op == ewCopy && s.scale == nil && s.shift == nil && s.res < 0
	}
	return false
}
