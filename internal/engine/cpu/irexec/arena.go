package irexec

// root returns the value whose bytes v's are (following views).
func (p *Plan) root(v int) int {
	for p.vals[v].kind == kindAlias {
		v = p.vals[v].alias
	}
	return v
}

// assignSlots gives every arena value a slot. Lifetimes run from the step
// defining a value to the last step reading it or any view of it (graph
// outputs live to the end, graph inputs from the start); a slot is free
// again once its value's lifetime ends, and the next value to need one
// takes the smallest free slot that fits it, else the largest free slot,
// grown, so that slots stay few and their total small.
func (p *Plan) assignSlots(uses []stepUses) {
	n := len(p.steps)
	last := make([]int, len(p.vals))
	for i := range last {
		last[i] = -2
	}
	for s, u := range uses {
		for _, v := range u.reads {
			last[p.root(v)] = max(last[p.root(v)], s)
		}
		for _, v := range u.defs {
			last[p.root(v)] = max(last[p.root(v)], s)
		}
	}
	for _, v := range p.outputs {
		last[p.root(v)] = n
	}
	// Views of constants read the constant's bytes.
	for i := range p.vals {
		if r := p.root(i); p.vals[i].kind == kindAlias && p.vals[r].kind == kindConst && p.vals[r].cnst != nil {
			p.vals[i].cnst = p.vals[r].cnst[:p.vals[i].nbytes]
		}
	}
	var free []int
	take := func(v int) {
		val := &p.vals[v]
		if val.kind != kindArena || val.slot >= 0 {
			return
		}
		best := -1
		for k, s := range free {
			b := p.slotBytes[s]
			switch {
			case best < 0:
				best = k
			case b >= val.nbytes && (p.slotBytes[free[best]] < val.nbytes || b < p.slotBytes[free[best]]):
				best = k
			case b < val.nbytes && p.slotBytes[free[best]] < val.nbytes && b > p.slotBytes[free[best]]:
				best = k
			}
		}
		if best < 0 {
			p.slotBytes = append(p.slotBytes, val.nbytes)
			val.slot = len(p.slotBytes) - 1
			return
		}
		s := free[best]
		free = append(free[:best], free[best+1:]...)
		p.slotBytes[s] = max(p.slotBytes[s], val.nbytes)
		val.slot = s
	}
	release := func(v int) {
		if val := &p.vals[v]; val.kind == kindArena && val.slot >= 0 {
			free = append(free, val.slot)
		}
	}
	for _, v := range p.inputs {
		take(v)
	}
	for _, v := range p.inputs {
		if last[v] < 0 {
			release(v)
		}
	}
	for s, u := range uses {
		for _, v := range u.defs {
			take(p.root(v))
		}
		done := map[int]bool{}
		for _, vs := range [][]int{u.reads, u.defs} {
			for _, v := range vs {
				r := p.root(v)
				if last[r] == s && !done[r] {
					done[r] = true
					release(r)
				}
			}
		}
	}
}
