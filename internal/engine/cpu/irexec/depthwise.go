package irexec

import "goinfer/internal/engine/cpu/vec"

// dwStep is a convolution computed directly, the kernel of depthwise
// convolutions (one input channel per group, any channel multiplier) and
// of any convolution whose weights or bias are computed at run time
// (which cannot be packed ahead). With one input channel per group it
// runs over zero-padded phase planes, a channel per vec.Taps call
// (dwplanes.go). Otherwise each output row accumulates, per input channel
// of its group and kernel position, a scaled and shifted input row
// (vec.Axpy): streaming passes over rows that stay in L1, the padding
// handled by clipping each pass's column range.
type dwStep struct {
	convGeom
	src, res, dst int
	w             []float32 // outC x icg x kh x kw, when constant
	bias          []float32
	// wv, bv are the weight and bias values read at run time (-1: the
	// constants above).
	wv, bv int
	act    act
	// planes is set when every group has one input channel: the fast
	// path over phase planes (see planesGeom).
	planes *planesGeom
}

func newDirectConv(nc *nodeCtx, g convGeom, w, bias []float32, res int, ac act) *dwStep {
	if g.icg == 1 {
		pg := newPlanesGeom(g)
		nc.needScratch(pg.scratch())
		return &dwStep{convGeom: g, src: nc.in[0], res: res, dst: nc.out[0], w: w, bias: bias, wv: -1, bv: -1, act: ac, planes: pg}
	}
	if g.sw > 1 {
		// Strided: each input row is split into its sw column phases, in
		// which a strided pass is contiguous.
		nc.needScratch(g.sw * ((g.iw + g.sw - 1) / g.sw))
	}
	return &dwStep{convGeom: g, src: nc.in[0], res: res, dst: nc.out[0], w: w, bias: bias, wv: -1, bv: -1, act: ac}
}

func (s *dwStep) run(x *Exec) error {
	x.parRange(s, s.n*s.outC, max(1, 4096/max(1, s.oh*s.ow*s.icg)))
	return nil
}

func (s *dwStep) rng(x *Exec, wk, lo, hi int) {
	if s.planes != nil {
		s.rngPlanes(x, wk, lo, hi)
		return
	}
	pw := (s.iw + s.sw - 1) / s.sw
	var phases []float32
	if s.sw > 1 {
		phases = x.scratch[wk][:s.sw*pw]
	}
	src, dst := x.f32(s.src), x.f32(s.dst)
	weights, bias := s.w, s.bias
	if s.wv >= 0 {
		weights = x.f32(s.wv)
	}
	if s.bv >= 0 {
		bias = x.f32(s.bv)
	}
	var res []float32
	if s.res >= 0 {
		res = x.f32(s.res)
	}
	ihw, ohw, kk := s.ih*s.iw, s.oh*s.ow, s.kh*s.kw
	for p := lo; p < hi; p++ {
		img, m := p/s.outC, p%s.outC
		c0 := (m / s.ocg) * s.icg // the group's first input channel
		out := dst[p*ohw : (p+1)*ohw]
		var b float32
		if bias != nil {
			b = bias[m]
		}
		for oy := 0; oy < s.oh; oy++ {
			orow := out[oy*s.ow : (oy+1)*s.ow]
			for i := range orow {
				orow[i] = b
			}
			for j := 0; j < s.icg; j++ {
				in := src[(img*s.inC+c0+j)*ihw : (img*s.inC+c0+j+1)*ihw]
				w := weights[(m*s.icg+j)*kk : (m*s.icg+j+1)*kk]
				for ky := 0; ky < s.kh; ky++ {
					iy := oy*s.sh - s.pt + ky*s.dh
					if iy < 0 || iy >= s.ih {
						continue
					}
					s.row(orow, in[iy*s.iw:(iy+1)*s.iw], w[ky*s.kw:(ky+1)*s.kw], phases, pw)
				}
			}
			if res != nil {
				r := res[p*ohw+oy*s.ow : p*ohw+(oy+1)*s.ow]
				for i := range orow {
					orow[i] += r[i]
				}
			}
			s.act.apply(orow)
		}
	}
}

// row accumulates one input row under one kernel row into an output row.
func (s *dwStep) row(orow, irow, w, phases []float32, pw int) {
	if phases != nil {
		for px := 0; px < s.sw; px++ {
			ph := phases[px*pw : (px+1)*pw]
			for c := range ph {
				if i := c*s.sw + px; i < s.iw {
					ph[c] = irow[i]
				}
			}
		}
	}
	for kx, wv := range w {
		off := kx*s.dw - s.pl
		// Columns ox with 0 <= ox*sw+off < iw.
		x0 := 0
		if off < 0 {
			x0 = (-off + s.sw - 1) / s.sw
		}
		if s.iw-1-off < 0 {
			continue
		}
		x1 := min(s.ow, (s.iw-1-off)/s.sw+1)
		if x0 >= x1 {
			continue
		}
		if s.sw == 1 {
			vec.Axpy(orow[x0:x1], irow[x0+off:x1+off], wv)
			continue
		}
		// Input column ox*sw+off is phase off mod sw, column
		// ox + floor(off/sw) there.
		px, base := floorDivMod(off, s.sw)
		ph := phases[px*pw : (px+1)*pw]
		vec.Axpy(orow[x0:x1], ph[x0+base:x1+base], wv)
	}
}
