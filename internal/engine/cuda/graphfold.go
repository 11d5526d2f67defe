package cuda

// Folding broadcast ops into affine steps. The affine kernel computes
// act(x*scale[c] + shift[c] + res): a Mul or Add by a per-channel constant
// (ConvNeXt's layer scale) or an Add of a residual of the same layout that
// follows an affine step without activation (a GEMM's bias epilogue) is
// one more term of that step, not a pass over memory of its own. Unlike
// elementwise chains it needs no new kernel, so it is always on.

// foldIntoAffine folds the binary node (op code) into the affine step
// computing its running input, through views that only relabel memory
// (ConvNeXt's transpose back to NCHW), when that input has no other
// consumer.
func (nc *nodeCtx) foldIntoAffine(code int) bool {
	if code != ewMul && code != ewAdd {
		return false
	}
	pl, p := nc.pl, nc.pl.p
	z := nc.out[0]
	if z < 0 || p.isView(z) {
		return false
	}
	for k := 0; k < 2; k++ {
		x, b := nc.in[k], nc.in[1-k]
		if x < 0 || b < 0 || p.isView(x) || !nc.val(x).shape.Equal(nc.val(z).shape) {
			continue
		}
		r := p.root(x)
		if p.vals[r].kind != gArena || p.offset(x) != 0 || p.vals[r].elems != nc.val(x).elems || !pl.singleUse(x) {
			continue
		}
		s := pl.defs[r]
		// A product with its epilogue fused (gemmEpilogue) is a product
		// and an affine step in place on its output: its epilogue takes
		// the terms as well (cuBLASLt only while it needs no scale).
		lt := s != nil && s.kind == stGemm && s.fused && s.gemm.batch == 1
		if s == nil || (s.kind != stAffine && !lt) || s.rowLen != 0 || s.op != ewCopy || s.out != r || s.outOff != 0 || s.n != p.vals[r].elems {
			continue
		}
		zv := nc.val(z)
		zv.nhwc = nc.val(x).nhwc
		if !sameLayout(zv.shape, p.st(z), p.st(x)) {
			zv.nhwc = false
			continue
		}
		var scale, shift []float32
		res := s.res
		if bc := nc.n.Inputs[1-k].Const; bc != nil {
			g, ok := nc.perChannel(x, b, s)
			if !ok {
				zv.nhwc = false
				continue
			}
			if code == ewMul {
				if s.res >= 0 {
					zv.nhwc = false
					continue // the residual would need scaling too
				}
				scale = make([]float32, len(g))
				for c := range g {
					scale[c] = g[c]
					if s.scale != nil {
						scale[c] *= s.scale[c]
					}
				}
				if s.shift != nil {
					shift = make([]float32, len(g))
					for c := range g {
						shift[c] = s.shift[c] * g[c]
					}
				}
			} else {
				scale = s.scale
				shift = make([]float32, len(g))
				for c := range g {
					shift[c] = g[c]
					if s.shift != nil {
						shift[c] += s.shift[c]
					}
				}
			}
		} else {
			// A residual: read as the affine step reads its input.
			if code != ewAdd || s.res >= 0 || p.isView(b) || p.root(b) == r || !nc.val(b).shape.Equal(zv.shape) ||
				!sameLayout(zv.shape, p.st(b), p.st(z)) || (lt && !nc.aligned(b)) {
				zv.nhwc = false
				continue
			}
			scale, shift, res = s.scale, s.shift, b
		}
		s.scale, s.shift, s.res, s.out = scale, shift, res, z
		delete(pl.defs, r)
		// Moved here: a residual may be computed after it.
		nc.moveHere(s)
		return true
	}
	return false
}

// perChannel returns constant b, broadcast to x's shape, as one value per
// channel of affine step s (the logical dimension of x whose stride is the
// step's inner count and whose size is its channel count); false when b
// varies along any other dimension.
func (nc *nodeCtx) perChannel(x, b int, s *gstep) ([]float32, bool) {
	xs, bs := nc.val(x).shape, nc.val(b).shape
	bst, err := broadcastStrides(bs, contiguous(bs), xs)
	if err != nil {
		return nil, false
	}
	f, err := nc.val(b).cnst.ToFloat32()
	if err != nil || len(f) == 0 {
		return nil, false
	}
	st := nc.st(x)
	ch := -1
	for d := range xs {
		if xs[d] > 1 && xs[d] == s.channels && st[d] == int64(s.inner) {
			ch = d
		}
	}
	for d := range xs {
		if d != ch && xs[d] > 1 && bst[d] != 0 {
			return nil, false
		}
	}
	g := make([]float32, s.channels)
	for c := range g {
		i := int64(0)
		if ch >= 0 {
			i = int64(c) * bst[ch]
		}
		g[c] = f[i]
	}
	return g, true
}

// singleUse reports whether v and every value it is a view of have one
// consumer each (so that a step defining them may change what it writes).
func (pl *planner) singleUse(v int) bool {
	p := pl.p
	for {
		iv := pl.irv[v]
		if iv == nil || pl.uses[iv] != 1 {
			return false
		}
		if p.vals[v].kind != gAlias {
			return true
		}
		v = p.vals[v].alias
	}
}
