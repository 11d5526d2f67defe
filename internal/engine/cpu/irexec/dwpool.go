package irexec

import "goinfer/internal/engine/cpu/vec"

// fuseDWPool lets a blocked depthwise convolution also average its output
// planes when a global average pooling reads them next (a
// squeeze-and-excitation block's squeeze): each task sums its strip of
// each channel right after writing it, while it is in cache, and the step
// adds the strips' sums, so the pooling's pass over the whole output (and
// its hand-off to the workers) is gone.
func (c *compiler) fuseDWPool() {
	p := c.p
	for i := 0; i+1 < len(p.steps); i++ {
		dw, ok := p.steps[i].s.(*dwBlockStep)
		if !ok || dw.poolDst >= 0 {
			continue
		}
		gp, ok := p.steps[i+1].s.(*globalPoolStep)
		if !ok || gp.max || gp.p != 0 || p.root(gp.src) != p.root(dw.dst) || gp.planes != dw.n*dw.outC || gp.hw != dw.oh*dw.ow {
			continue
		}
		dw.poolDst = gp.dst
		p.shared = max(p.shared, dw.n*dw.outC*dw.nstrip)
		p.steps[i].node += " + " + p.steps[i+1].node
		p.steps = append(p.steps[:i+1], p.steps[i+2:]...)
		c.uses[i].defs = append(c.uses[i].defs, c.uses[i+1].defs...)
		c.uses = append(c.uses[:i+1], c.uses[i+2:]...)
	}
}

// poolStrip records the sums of output rows [r0, r0+rows) of channels
// c0... (nc of them) of image img, just written to dst, for the fused
// pooling: strip st of the nst of each plane.
func (s *dwBlockStep) poolStrip(x *Exec, dst []float32, img, c0, nc, st, nst, r0, rows int) {
	ohw := s.oh * s.ow
	sums := x.shared[(img*s.outC+c0)*nst:]
	for c := range nc {
		base := (img*s.outC+c0+c)*ohw + r0*s.ow
		sums[c*nst+st] = vec.Sum(dst[base : base+rows*s.ow])
	}
}

// finishPool averages the sums of each plane's nst strips into the
// pooling's output.
func (s *dwBlockStep) finishPool(x *Exec, nst int) {
	out := x.f32(s.poolDst)
	inv := 1 / float32(s.oh*s.ow)
	for pl := range s.n * s.outC {
		var sum float32
		for _, v := range x.shared[pl*nst : (pl+1)*nst] {
			sum += v
		}
		out[pl] = sum * inv
	}
}
