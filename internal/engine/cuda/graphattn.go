package cuda

import (
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// Scaled dot-product attention as one step: the planner finds
// MatMul(q, kT) -> [scalar Mul/Div] -> Softmax(last axis) -> MatMul(., v),
// with scalar Mul/Div on q or kT folded in too (the forms torchvision's
// ViT and its ONNX exports take), and lowers it to graph.cu's fused
// kernel, so that the [batch, heads, tokens, tokens] scores never go
// through memory.

// attnMaxHead bounds the query, key and value sizes per head the kernels
// take (graph.cu's AMAX).
const attnMaxHead = 128

// attnMatch is one recognized attention: the unscaled operands, the
// product of the scalar factors, and the nodes the fused step replaces.
type attnMatch struct {
	q, kT, v *ir.Value
	scale    float64
	skip     []*ir.Node // every matched node but the final MatMul
}

// attnGeom is a fused attention's problem: b1 x b2 independent (S x D)
// queries against (L x D) keys and (L x DV) values.
type attnGeom struct {
	b1, b2, s, l, d, dv int
	// Element strides (b1, b2, row, column) of q, k (as [L, D]), v, out.
	q, k, v, o [4]int64
}

// scalarFactor returns x when n is x*c, c*x or x/c for a constant scalar c,
// with the factor it applies.
func scalarFactor(n *ir.Node) (*ir.Value, float64, bool) {
	b, ok := n.Op.(*ir.Binary)
	if !ok || len(n.Inputs) != 2 {
		return nil, 0, false
	}
	scalar := func(v *ir.Value) (float64, bool) {
		if v == nil || v.Const == nil || v.Type.Shape.NumElements() != 1 {
			return 0, false
		}
		f, err := v.Const.ToFloat32()
		if err != nil || len(f) != 1 || f[0] == 0 {
			return 0, false
		}
		return float64(f[0]), true
	}
	switch b.Fn {
	case ir.OpMul:
		if c, ok := scalar(n.Inputs[1]); ok {
			return n.Inputs[0], c, true
		}
		if c, ok := scalar(n.Inputs[0]); ok {
			return n.Inputs[1], c, true
		}
	case ir.OpDiv:
		if c, ok := scalar(n.Inputs[1]); ok {
			return n.Inputs[0], 1 / c, true
		}
	}
	return nil, 0, false
}

// plainMatMul reports whether n is a MatMul of two inputs and no epilogue.
func plainMatMul(n *ir.Node) bool {
	m, ok := n.Op.(*ir.MatMul)
	return ok && m.Epilogue == (ir.Epilogue{}) && len(n.Inputs) == 2 && len(n.Outputs) == 1
}

// findAttention returns the attentions of g by their final MatMul.
func (pl *planner) findAttention(g *ir.Graph) map[*ir.Node]*attnMatch {
	found := map[*ir.Node]*attnMatch{}
	// private: a value only the matched chain reads.
	private := func(v *ir.Value) bool { return v != nil && v.Producer != nil && pl.uses[v] == 1 && !pl.outs[v] }
	for _, n := range g.Nodes {
		if !plainMatMul(n) || !private(n.Inputs[0]) {
			continue
		}
		sm := n.Inputs[0].Producer
		op, ok := sm.Op.(*ir.Softmax)
		if !ok || op.Log || op.Hard || len(sm.Inputs) != 1 {
			continue
		}
		ps := n.Inputs[0].Type.Shape
		if normAxis(op.Axis, len(ps)) != len(ps)-1 {
			continue
		}
		m := &attnMatch{scale: 1, v: n.Inputs[1], skip: []*ir.Node{sm}}
		x := sm.Inputs[0]
		if !private(x) {
			continue
		}
		if y, c, ok := scalarFactor(x.Producer); ok {
			if !private(y) {
				continue
			}
			m.scale *= c
			m.skip = append(m.skip, x.Producer)
			x = y
		}
		if !plainMatMul(x.Producer) {
			continue
		}
		mm := x.Producer
		m.skip = append(m.skip, mm)
		m.q, m.kT = mm.Inputs[0], mm.Inputs[1]
		for _, p := range []**ir.Value{&m.q, &m.kT} {
			if private(*p) {
				if y, c, ok := scalarFactor((*p).Producer); ok {
					m.scale *= c
					m.skip = append(m.skip, (*p).Producer)
					*p = y
				}
			}
		}
		if attnShapesOK(m.q.Type.Shape, m.kT.Type.Shape, m.v.Type.Shape, n.Outputs[0].Type.Shape) {
			found[n] = m
		}
	}
	return found
}

// attnShapesOK checks q [..., S, D], kT [..., D, L], v [..., L, DV] and out
// [..., S, DV] with the same one or two batch dimensions (or none) and head
// sizes the kernels take.
func attnShapesOK(q, kT, v, o tensor.Shape) bool {
	r := len(o)
	if r < 2 || r > 4 || len(q) != r || len(kT) != r || len(v) != r {
		return false
	}
	for d := 0; d < r-2; d++ {
		if q[d] != o[d] || kT[d] != o[d] || v[d] != o[d] {
			return false
		}
	}
	s, d, l, dv := q[r-2], q[r-1], kT[r-1], v[r-1]
	return kT[r-2] == d && v[r-2] == l && o[r-2] == s && o[r-1] == dv &&
		d >= 1 && d <= attnMaxHead && dv >= 1 && dv <= attnMaxHead && s >= 1 && l >= 1
}

// attention lowers a matched attention into one step writing the final
// MatMul's output. When that output's one reader is a Transpose (the
// heads merged back into tokens), the step writes it in the transposed
// order, so that the transpose and the reshape after it are views.
func (nc *nodeCtx) attention(m *attnMatch) error {
	q, k, v := nc.pl.index[m.q], nc.pl.index[m.kT], nc.pl.index[m.v]
	out := nc.out[0]
	os := nc.val(out).shape
	r := len(os)
	if rd := nc.n.Outputs[0]; nc.oneReader(0) {
		if t, ok := nc.pl.reader[rd].Op.(*ir.Transpose); ok && len(t.Perm) == r {
			ys := make(tensor.Shape, r)
			for d, p := range t.Perm {
				ys[d] = os[p]
			}
			cs := contiguous(ys)
			st := make([]int64, r)
			for d, p := range t.Perm {
				st[p] = cs[d]
			}
			nc.val(out).strides = st
		}
	}
	g := &attnGeom{b1: 1, b2: 1, s: os[r-2], dv: os[r-1]}
	ks := nc.val(k).shape
	g.d, g.l = ks[r-2], ks[r-1]
	// Batch strides: (b1, b2) from the last two batch dimensions.
	four := func(v int, swap bool) [4]int64 {
		st := nc.st(v)
		var f [4]int64
		for i := 0; i < r-2; i++ {
			f[2-(r-2)+i] = st[i]
		}
		f[2], f[3] = st[r-2], st[r-1]
		if swap {
			f[2], f[3] = f[3], f[2]
		}
		return f
	}
	if r >= 3 {
		g.b2 = os[r-3]
	}
	if r == 4 {
		g.b1 = os[0]
	}
	g.q, g.k, g.v, g.o = four(q, false), four(k, true), four(v, false), four(out, false)
	s := &gstep{kind: stAttn, out: out, a: q, b: k, res: v, attn: g, p0: float32(m.scale)}
	for i, x := range []int{g.b1, g.b2, g.s, g.l, g.d, g.dv} {
		s.meta[i] = int32(x)
	}
	for j, st := range [][4]int64{g.q, g.k, g.v, g.o} {
		for i, x := range st {
			if x > 1<<31-1 || x < 0 {
				return refuse("an attention operand stride beyond 2^31")
			}
			s.meta[6+4*j+i] = int32(x)
		}
	}
	nc.add(s)
	return nil
}
