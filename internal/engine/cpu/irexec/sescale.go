package irexec

import (
	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/engine/cpu/vec"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// fuseSEScale folds a squeeze-and-excitation block's channel scaling into
// the pointwise convolution that reads it: Mul(x, s), s one value per
// channel, followed by W*(s*x), so that the scaled activations are never
// written and read back. Where the convolution packs B (maps whose pixels
// are not a whole number of panels: 7x7, 14x14), B's rows are scaled as
// they are packed; where it reads B in place, it computes (W diag(s))*x,
// the packed weights' columns scaled per forward into the Exec's shared
// buffer, when the weights are smaller than x (28x28 and larger maps in
// MobileNetV3 and EfficientNet). It applies to single images: s differs
// per image, and a panel of B may span two.
func (c *compiler) fuseSEScale() {
	p := c.p
	for i := 0; i+1 < len(p.steps); i++ {
		mul, ok := p.steps[i].s.(*binaryStep)
		if !ok || mul.fn != ir.OpMul || mul.dt != tensor.Float32 {
			continue
		}
		conv, ok := p.steps[i+1].s.(*convStep)
		if !ok || conv.scale >= 0 || !conv.pointwise() || conv.groups != 1 || conv.n != 1 || conv.layout != layoutShift ||
			p.root(conv.src) != p.root(mul.dst) || c.readElsewhere(p.root(mul.dst), i+1) {
			continue
		}
		xv, sv := mul.a, mul.b
		if p.vals[xv].elems < p.vals[sv].elems {
			xv, sv = sv, xv
		}
		if !p.vals[xv].shape.Equal(p.vals[mul.dst].shape) || !perChannel(p.vals[sv].shape, conv.inC) ||
			p.vals[p.root(sv)].kind == kindConst {
			continue
		}
		if !c.seScale {
			continue
		}
		// B read in place (direct) can only be scaled through the
		// weights; packed B is scaled as it is packed, for a multiply
		// per packed value, in cache.
		a := conv.a[0]
		if conv.direct && len(a.Data) >= p.vals[xv].elems {
			continue
		}
		conv.src, conv.scale, conv.scaleB = xv, sv, !conv.direct
		if conv.direct {
			p.shared = max(p.shared, len(a.Data)+a.KC*gemm.MR)
		} else {
			p.shared = max(p.shared, conv.inC*gemm.NR)
		}
		p.steps[i+1].node = p.steps[i].node + " + " + p.steps[i+1].node
		p.steps = append(p.steps[:i], p.steps[i+1:]...)
		u := &c.uses[i+1]
		reads := []int{xv, sv}
		for _, r := range u.reads {
			if p.root(r) != p.root(mul.dst) {
				reads = append(reads, r)
			}
		}
		u.reads = reads
		c.uses = append(c.uses[:i], c.uses[i+1:]...)
	}
}

// perChannel reports a shape of c values, one per channel of an NCHW
// tensor: [1 c 1 1], [c 1 1] or the like.
func perChannel(s tensor.Shape, c int) bool {
	if len(s) < 3 || len(s) > 4 || s[len(s)-3] != c || s[len(s)-2] != 1 || s[len(s)-1] != 1 {
		return false
	}
	return len(s) == 3 || s[0] == 1
}

// scaledA returns s's packed weights with column k multiplied by channel
// k's runtime scale, in x's shared buffer.
func (s *convStep) scaledA(x *Exec) []*gemm.PackedA {
	const mr = gemm.MR
	a := s.a[0]
	sc := x.f32(s.scale)
	pa := &x.seA
	*pa = *a
	pa.Data = x.shared[:len(a.Data):len(a.Data)]
	e := x.shared[len(a.Data) : len(a.Data)+a.KC*mr]
	for kb := range a.Blocks() {
		k0, kc := a.BlockK(kb)
		// Each column of a panel is MR consecutive values.
		for kk := range kc {
			v := sc[k0+kk]
			for i := range mr {
				e[kk*mr+i] = v
			}
		}
		for ip := range a.Panels {
			vec.Mul(pa.Panel(kb, ip), a.Panel(kb, ip), e)
		}
	}
	x.seAs[0] = pa
	return x.seAs[:]
}
