package irexec

// sharePhases marks each strided convolution that reads the same input as
// the convolution right before it, split into the same phase planes, to
// read the planes that one left in the phase buffer rather than split the
// input again: ResNet's downsampling 1x1 right after its block's first 3x3,
// both of stride 2 (one parallel loop fewer for each, which on 16 workers
// costs more than the copy).
func (c *compiler) sharePhases() {
	p := c.p
	for i := 1; i < len(p.steps); i++ {
		cur, ok := p.steps[i].s.(*convStep)
		if !ok || cur.layout != layoutPhases {
			continue
		}
		prev, ok := p.steps[i-1].s.(*convStep)
		if !ok || prev.layout != layoutPhases || p.root(prev.src) != p.root(cur.src) ||
			prev.n != cur.n || prev.inC != cur.inC || prev.sh != cur.sh || prev.sw != cur.sw ||
			prev.ph != cur.ph || prev.pw != cur.pw {
			continue
		}
		covered := true
		for ph, used := range cur.usedPhase {
			covered = covered && (!used || prev.usedPhase[ph])
		}
		cur.phasesShared = covered
	}
}
