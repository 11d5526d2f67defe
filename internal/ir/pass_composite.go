package ir

import (
	"math"

	"goinfer/internal/tensor"
)

// FuseComposites recognises the primitive spellings exporters emit for
// composite ops and replaces each with the op itself, so that engines see
// one node they may implement directly (Decompose undoes it for those that
// do not): x*Sigmoid(x) as SiLU, x*HardSigmoid(x; 1/6, 1/2) as HardSwish,
// x/2*(1+erf(x/sqrt 2)) and its tanh approximation as Gelu, and the
// ReduceMean-Sub-Pow-ReduceMean-Add-Sqrt-Div(-Mul-Add) chain as
// LayerNormalization. Intermediate values must feed only the pattern.
// g must be bound; it returns how many composites it formed.
func FuseComposites(g *Graph) int {
	n := fuseGatedActivations(g)
	n += fuseGelu(g)
	n += fuseLayerNorm(g)
	return n
}

// fuseGatedActivations rewrites Mul(x, Sigmoid(x)) as SiLU(x) and
// Mul(x, HardSigmoid(x)) with alpha 1/6 and beta 1/2 as HardSwish(x).
func fuseGatedActivations(g *Graph) int {
	cons := g.Consumers()
	outs := graphOutputs(g)
	drop := map[*Node]bool{}
	formed := 0
	for _, m := range g.Nodes {
		if b, ok := m.Op.(*Binary); !ok || b.Fn != OpMul || len(m.Inputs) != 2 {
			continue
		}
		for side := 0; side < 2; side++ {
			gate, x := m.Inputs[side], m.Inputs[1-side]
			p := gate.Producer
			if p == nil || drop[p] || len(p.Inputs) != 1 || p.Inputs[0] != x || !soleUse(gate, cons, outs) {
				continue
			}
			var kind UnaryKind
			switch op := p.Op.(type) {
			case *Unary:
				if op.Fn == OpSigmoid {
					kind = OpSiLU
				}
			case *HardSigmoid:
				if near(op.Alpha, 1.0/6) && op.Beta == 0.5 {
					kind = OpHardSwish
				}
			}
			if kind == "" {
				continue
			}
			m.Op = &Unary{Fn: kind}
			m.Inputs = []*Value{x}
			drop[p] = true
			formed++
			break
		}
	}
	dropNodes(g, drop)
	return formed
}

// near compares a float32-stored constant with its exact value.
func near(v, want float64) bool { return math.Abs(v-want) <= 1e-6*math.Max(1, math.Abs(want)) }

// matcher finds single-use producers and constant operands.
type matcher struct {
	cons map[*Value][]*Node
	outs map[*Value]bool
	drop map[*Node]bool
}

func newMatcher(g *Graph) *matcher {
	return &matcher{cons: g.Consumers(), outs: graphOutputs(g), drop: map[*Node]bool{}}
}

// sole returns the only consumer of v when v is no graph output.
func (m *matcher) sole(v *Value) *Node {
	if v == nil || !soleUse(v, m.cons, m.outs) {
		return nil
	}
	c := m.cons[v][0]
	if m.drop[c] {
		return nil
	}
	return c
}

// binOperands reports whether n is Binary fn and returns its operands.
func binOperands(n *Node, fn BinaryKind) (a, b *Value, ok bool) {
	if n == nil {
		return nil, nil, false
	}
	op, isBin := n.Op.(*Binary)
	if !isBin || op.Fn != fn || len(n.Inputs) != 2 {
		return nil, nil, false
	}
	return n.Inputs[0], n.Inputs[1], true
}

// scalarOf returns the value of a one-element constant.
func scalarOf(v *Value) (float64, bool) {
	a := constArray(v)
	if a == nil || len(a.Data) != 1 {
		return 0, false
	}
	return a.Data[0], true
}

// withConst reports whether n is Binary fn of v and a constant near want
// (in either order).
func withConst(n *Node, fn BinaryKind, v *Value, want float64) bool {
	a, b, ok := binOperands(n, fn)
	if !ok {
		return false
	}
	if a != v {
		a, b = b, a
	}
	c, isConst := scalarOf(b)
	return a == v && isConst && near(c, want)
}

// other returns n's operand that is not v (nil when both or neither are).
func other(n *Node, v *Value) *Value {
	switch {
	case n.Inputs[0] == v && n.Inputs[1] != v:
		return n.Inputs[1]
	case n.Inputs[1] == v && n.Inputs[0] != v:
		return n.Inputs[0]
	}
	return nil
}

// geluTail matches 1 + inner, times x, times 1/2 (in either order of the
// two products) from inner's value and returns the final node and the
// nodes in between.
func (m *matcher) geluTail(inner, x *Value) (last *Node, mid []*Node) {
	add := m.sole(inner)
	if !withConst(add, OpAdd, inner, 1) {
		return nil, nil
	}
	mul := m.sole(add.Outputs[0])
	if _, _, ok := binOperands(mul, OpMul); !ok {
		return nil, nil
	}
	o := other(mul, add.Outputs[0])
	switch {
	case o == x:
		// (x * (1+inner)) * 0.5
		half := m.sole(mul.Outputs[0])
		if !withConst(half, OpMul, mul.Outputs[0], 0.5) {
			return nil, nil
		}
		return half, []*Node{add, mul}
	case o != nil && o.Producer != nil && withConst(o.Producer, OpMul, x, 0.5) && m.sole(o) == mul:
		// (x * 0.5) * (1+inner)
		return mul, []*Node{add, o.Producer}
	}
	return nil, nil
}

// fuseGelu finds erf and tanh GELUs by their Erf or Tanh node.
func fuseGelu(g *Graph) int {
	m := newMatcher(g)
	formed := 0
	for _, n := range g.Nodes {
		u, ok := n.Op.(*Unary)
		if !ok || m.drop[n] || len(n.Inputs) != 1 || (u.Fn != OpErf && u.Fn != OpTanh) {
			continue
		}
		scaled := n.Inputs[0]
		sp := scaled.Producer
		if sp == nil || m.sole(scaled) != n {
			continue
		}
		var x *Value
		var head []*Node
		if u.Fn == OpErf {
			// x / sqrt(2) or x * (1/sqrt(2))
			a, b, isDiv := binOperands(sp, OpDiv)
			if c, isConst := scalarOf(b); isDiv && isConst && near(c, math.Sqrt2) {
				x = a
			} else if a, b, isMul := binOperands(sp, OpMul); isMul {
				for _, pair := range [][2]*Value{{a, b}, {b, a}} {
					if c, isConst := scalarOf(pair[1]); isConst && near(c, 1/math.Sqrt2) {
						x = pair[0]
					}
				}
			}
			head = []*Node{sp}
		} else {
			x, head = m.geluTanhHead(sp)
		}
		if x == nil || x.IsConst() {
			continue
		}
		last, mid := m.geluTail(n.Outputs[0], x)
		if last == nil {
			continue
		}
		for _, d := range append(append(head, n), mid...) {
			m.drop[d] = true
		}
		last.Op = &Gelu{Tanh: u.Fn == OpTanh}
		last.Inputs = []*Value{x}
		formed++
	}
	dropNodes(g, m.drop)
	return formed
}

// geluTanhHead matches sqrt(2/pi) * (x + 0.044715 * x^3) from the product
// node and returns x and the nodes computing it.
func (m *matcher) geluTanhHead(prod *Node) (*Value, []*Node) {
	a, b, ok := binOperands(prod, OpMul)
	if !ok {
		return nil, nil
	}
	if _, isConst := scalarOf(a); isConst {
		a, b = b, a
	}
	if c, isConst := scalarOf(b); !isConst || !near(c, math.Sqrt(2/math.Pi)) {
		return nil, nil
	}
	sum := a.Producer
	if m.sole(a) != prod {
		return nil, nil
	}
	p, q, ok := binOperands(sum, OpAdd)
	if !ok {
		return nil, nil
	}
	for _, pair := range [][2]*Value{{p, q}, {q, p}} {
		x, cubeTerm := pair[0], pair[1]
		t := cubeTerm.Producer
		if t == nil || m.sole(cubeTerm) != sum {
			continue
		}
		s, k, isMul := binOperands(t, OpMul)
		if !isMul {
			continue
		}
		if _, isConst := scalarOf(s); isConst {
			s, k = k, s
		}
		if c, isConst := scalarOf(k); !isConst || !near(c, 0.044715) {
			continue
		}
		cube := m.cube(s, x)
		if cube == nil {
			continue
		}
		return x, append(cube, t, sum, prod)
	}
	return nil, nil
}

// cube returns the nodes computing v = x^3 (Pow(x, 3), x*(x*x) or
// (x*x)*x), each used only there.
func (m *matcher) cube(v, x *Value) []*Node {
	n := v.Producer
	if n == nil {
		return nil
	}
	if withConst(n, OpPow, x, 3) {
		return []*Node{n}
	}
	a, b, ok := binOperands(n, OpMul)
	if !ok {
		return nil
	}
	for _, pair := range [][2]*Value{{a, b}, {b, a}} {
		if pair[0] != x || pair[1].Producer == nil || m.sole(pair[1]) != n {
			continue
		}
		if s1, s2, isSq := binOperands(pair[1].Producer, OpMul); isSq && s1 == x && s2 == x {
			return []*Node{pair[1].Producer, n}
		}
	}
	return nil
}

// fuseLayerNorm finds LayerNormalization spelled out, from its first
// ReduceMean.
func fuseLayerNorm(g *Graph) int {
	m := newMatcher(g)
	formed := 0
	var added []*Value
	for _, n := range g.Nodes {
		mean, ok := n.Op.(*Reduce)
		if !ok || m.drop[n] || mean.Fn != ReduceMean || !mean.KeepDims || n.Inputs[0] == nil {
			continue
		}
		x := n.Inputs[0]
		axis, ok := trailingAxes(n, len(x.Type.Shape))
		if !ok {
			continue
		}
		mv := n.Outputs[0]
		sub := m.sole(mv)
		if a, b, isSub := binOperands(sub, OpSub); !isSub || a != x || b != mv {
			continue
		}
		d := sub.Outputs[0]
		var sq, div *Node
		for _, c := range m.cons[d] {
			switch {
			case withConst(c, OpPow, d, 2):
				sq = c
			case c.Inputs[0] == d && c.Inputs[1] == d:
				if _, _, isMul := binOperands(c, OpMul); isMul {
					sq = c
				}
			default:
				if a, _, isDiv := binOperands(c, OpDiv); isDiv && a == d {
					div = c
				}
			}
		}
		if sq == nil || div == nil || m.outs[d] || len(distinct(m.cons[d])) != 2 {
			continue
		}
		vr := m.sole(sq.Outputs[0])
		if vm, isMean := opOf[*Reduce](vr); !isMean || vm.Fn != ReduceMean || !vm.KeepDims || vr.Inputs[0] != sq.Outputs[0] {
			continue
		} else if a2, ok2 := trailingAxes(vr, len(x.Type.Shape)); !ok2 || a2 != axis {
			continue
		}
		addEps := m.sole(vr.Outputs[0])
		a, b, isAdd := binOperands(addEps, OpAdd)
		if !isAdd {
			continue
		}
		if a != vr.Outputs[0] {
			a, b = b, a
		}
		eps, isConst := scalarOf(b)
		if !isConst || a != vr.Outputs[0] {
			continue
		}
		sqrt := m.sole(addEps.Outputs[0])
		if u, isU := opOf[*Unary](sqrt); !isU || u.Fn != OpSqrt || m.sole(sqrt.Outputs[0]) != div || div.Inputs[1] != sqrt.Outputs[0] {
			continue
		}
		last := div
		body := []*Node{n, sub, sq, vr, addEps, sqrt}
		norm := x.Type.Shape[axis:]
		var scale, bias *Value
		if mul := m.sole(div.Outputs[0]); mul != nil {
			if _, _, isMul := binOperands(mul, OpMul); isMul {
				if s := other(mul, div.Outputs[0]); s != nil && s.IsConst() && broadcastsTo(s.Type.Shape, norm) {
					scale = s
					body = append(body, div)
					last = mul
					if add := m.sole(mul.Outputs[0]); add != nil {
						if _, _, isAdd := binOperands(add, OpAdd); isAdd {
							if bv := other(add, mul.Outputs[0]); bv != nil && bv.IsConst() && broadcastsTo(bv.Type.Shape, norm) {
								bias = bv
								body = append(body, mul)
								last = add
							}
						}
					}
				}
			}
		}
		if scale == nil {
			one := NewArray(x.Type.DType, tensor.Shape{norm[len(norm)-1]})
			for i := range one.Data {
				one.Data[i] = 1
			}
			v, err := constValue(n.Name+"/ones", one)
			if err != nil {
				continue
			}
			scale = v
			added = append(added, v)
		}
		in := []*Value{x, scale}
		if bias != nil {
			in = append(in, bias)
		}
		ln := &LayerNorm{Axis: axis, Epsilon: eps}
		if _, err := ln.Infer(in); err != nil {
			continue
		}
		for _, d := range body {
			m.drop[d] = true
		}
		last.Op = ln
		last.Inputs = in
		formed++
	}
	dropNodes(g, m.drop)
	return formed
}

// distinct drops repeats (a node reading a value twice).
func distinct(ns []*Node) []*Node {
	var out []*Node
	for _, n := range ns {
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return out
}

// opOf returns n's op as T.
func opOf[T Op](n *Node) (T, bool) {
	var zero T
	if n == nil {
		return zero, false
	}
	op, ok := n.Op.(T)
	return op, ok
}

// broadcastsTo reports whether s broadcasts to target unchanged.
func broadcastsTo(s, target tensor.Shape) bool {
	b, err := BroadcastShape(target, s)
	return err == nil && b.Equal(target)
}

// trailingAxes returns the first axis when a ReduceMean node reduces
// exactly the last axes of a rank-r input.
func trailingAxes(n *Node, r int) (int, bool) {
	op := n.Op.(*Reduce)
	axes := op.Axes
	if v := n.Input(1); v != nil {
		a := constArray(v)
		if a == nil {
			return 0, false
		}
		axes = a.Ints()
	}
	if len(axes) == 0 {
		return 0, false
	}
	ax, err := axesOf(axes, r, "axes")
	if err != nil {
		return 0, false
	}
	first := r - len(ax)
	seen := make([]bool, r)
	for _, a := range ax {
		if a < first {
			return 0, false
		}
		seen[a] = true
	}
	for a := first; a < r; a++ {
		if !seen[a] {
			return 0, false
		}
	}
	return first, true
}
