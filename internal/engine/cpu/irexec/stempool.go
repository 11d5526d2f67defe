package irexec

// stemPoolStep is a direct convolution (a network's stem) and the max
// pooling that alone reads its output, run image by image: each image's
// convolution output is written to image 0's place and pooled from there
// at once, so that it stays in cache instead of a whole batch's (103 MB
// for ResNet-18 at batch 32) going to memory and coming back.
type stemPoolStep struct {
	conv *tapsConvStep
	pool *poolStep
}

// stemConvPart and stemPoolPart are the two halves of one image of a
// stemPoolStep (Exec.fuseImg) as rangers.
type (
	stemConvPart stemPoolStep
	stemPoolPart stemPoolStep
)

func (s *stemPoolStep) run(x *Exec) error {
	p := s.pool
	for img := range s.conv.n {
		x.fuseImg = img
		_, nstrip := s.conv.strips(x.pool.Size(), 1)
		x.parRange((*stemConvPart)(s), nstrip, 1)
		x.parRange((*stemPoolPart)(s), p.inC, max(1, 4096/(p.oh*p.ow)))
	}
	return nil
}

func (s *stemConvPart) rng(x *Exec, wk, lo, hi int) {
	strip, _ := s.conv.strips(x.pool.Size(), 1)
	for st := lo; st < hi; st++ {
		s.conv.rows(x, wk, x.fuseImg, 0, st*strip, strip)
	}
}

func (s *stemPoolPart) rng(x *Exec, wk, lo, hi int) {
	p := s.pool
	c, ohw := p.inC, p.oh*p.ow
	p.planes(x, wk, x.f32(p.src), x.f32(p.dst)[x.fuseImg*c*ohw:(x.fuseImg+1)*c*ohw], lo, hi)
}

// fuseStemPool replaces each direct convolution of a batch of several
// images whose output only a max pooling reads, right after it, by a
// stemPoolStep.
func (c *compiler) fuseStemPool() {
	p := c.p
	for i := 0; i+1 < len(p.steps); i++ {
		conv, ok := p.steps[i].s.(*tapsConvStep)
		if !ok || conv.n < 2 {
			continue
		}
		pool, ok := p.steps[i+1].s.(*poolStep)
		if !ok || !pool.max || pool.src != conv.dst || pool.n != conv.n || c.readElsewhere(conv.dst, i+1) {
			continue
		}
		p.steps[i] = planStep{node: p.steps[i].node + " + " + p.steps[i+1].node, s: &stemPoolStep{conv: conv, pool: pool}}
		p.steps = append(p.steps[:i+1], p.steps[i+2:]...)
		// The convolution's output lives for the fused step only: it
		// is defined there and read by no later step.
		u := &c.uses[i]
		u.defs = append(u.defs, c.uses[i+1].defs...)
		for _, r := range c.uses[i+1].reads {
			if p.root(r) != conv.dst {
				u.reads = append(u.reads, r)
			}
		}
		c.uses = append(c.uses[:i+1], c.uses[i+2:]...)
	}
}

// readElsewhere reports whether v (or a view of it) is a graph output or
// is read by a step other than step only.
func (c *compiler) readElsewhere(v, only int) bool {
	p := c.p
	for i := range p.vals {
		if p.vals[i].isOut && p.root(i) == v {
			return true
		}
	}
	for i, u := range c.uses {
		if i == only {
			continue
		}
		for _, r := range u.reads {
			if p.root(r) == v {
				return true
			}
		}
	}
	return false
}
