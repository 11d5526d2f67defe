package irexec

import "goinfer/internal/engine/cpu/vec"

// planesGeom is the layout of the depthwise fast path. An input channel is
// copied once, zero-padded, into sh*sw phase planes of hq x wq: padded
// pixel (r, c) lands in plane (r mod sh, c mod sw) at (r/sh, c/sw). Output
// (oy, ox) under tap (ky, kx) then reads plane ((ky*dh) mod sh,
// (kx*dw) mod sw) at (oy + ky*dh/sh, ox + kx*dw/sw): for every tap, the
// outputs laid out with row stride wq read one contiguous run of the
// planes at a fixed offset. So the whole channel is one vec.Taps call
// over oh*wq values, strides, padding and dilation included, with no
// per-row overhead even on 7x7 maps; the wq-ow columns past each row's
// end are computed and dropped.
type planesGeom struct {
	hq, wq int
	// n is the outputs computed per channel: oh rows of wq, rounded up
	// to whole vectors.
	n    int
	offs []int // per tap (ky major), its offset in the planes
	// planeLen is the floats of all planes plus the slack the last
	// rows' dropped columns read past them.
	planeLen int
}

func newPlanesGeom(g convGeom) *planesGeom {
	hneed := (g.oh-1)*g.sh + (g.kh-1)*g.dh + 1
	wneed := (g.ow-1)*g.sw + (g.kw-1)*g.dw + 1
	pg := &planesGeom{hq: (hneed + g.sh - 1) / g.sh, wq: (wneed + g.sw - 1) / g.sw}
	plane := pg.hq * pg.wq
	maxOff := 0
	for ky := 0; ky < g.kh; ky++ {
		for kx := 0; kx < g.kw; kx++ {
			r, c := ky*g.dh, kx*g.dw
			o := ((r%g.sh)*g.sw+c%g.sw)*plane + (r/g.sh)*pg.wq + c/g.sw
			pg.offs = append(pg.offs, o)
			maxOff = max(maxOff, o)
		}
	}
	pg.n = roundUp(g.oh*pg.wq, 8)
	pg.planeLen = max(g.sh*g.sw*plane, maxOff+pg.n)
	return pg
}

// scratch is the float32s a worker needs: the planes, then the outputs
// at row stride wq.
func (pg *planesGeom) scratch() int { return pg.planeLen + pg.n }

// rngPlanes computes output planes [lo, hi) (image-major) through the
// phase planes.
func (s *dwStep) rngPlanes(x *Exec, wk, lo, hi int) {
	pg := s.planes
	n := pg.n
	planes := x.scratch[wk][:pg.planeLen]
	flat := x.scratch[wk][pg.planeLen : pg.planeLen+n]
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
	loaded := -1 // the input plane the phase planes hold
	for p := lo; p < hi; p++ {
		img, m := p/s.outC, p%s.outC
		ic := img*s.inC + m/s.ocg
		if ic != loaded {
			s.fillPlanes(planes, src[ic*ihw:(ic+1)*ihw], loaded < 0)
			loaded = ic
		}
		var b float32
		if bias != nil {
			b = bias[m]
		}
		vec.Taps(flat, planes, pg.offs, weights[m*kk:(m+1)*kk], b)
		out := dst[p*ohw : (p+1)*ohw]
		if pg.wq == s.ow {
			copy(out, flat)
		} else {
			for oy := 0; oy < s.oh; oy++ {
				copy(out[oy*s.ow:(oy+1)*s.ow], flat[oy*pg.wq:])
			}
		}
		if res != nil {
			vec.Add(out, out, res[p*ohw:(p+1)*ohw])
		}
		s.act.apply(out)
	}
}

// fillPlanes writes one input channel, zero-padded, into the phase
// planes. Which positions a channel writes depends on the geometry alone,
// so the padding zeroed for the first channel of a range (zero) stays
// zero for the next ones.
func (s *dwStep) fillPlanes(planes, in []float32, zero bool) {
	pg := s.planes
	if zero {
		clear(planes)
	}
	plane := pg.hq * pg.wq
	hneed := pg.hq * s.sh
	// Input columns that land inside the padded width.
	x0 := max(0, -s.pl)
	x1 := min(s.iw, pg.wq*s.sw-s.pl)
	if x0 >= x1 {
		return
	}
	for iy := 0; iy < s.ih; iy++ {
		r := iy + s.pt
		if r < 0 || r >= hneed {
			continue
		}
		row := in[iy*s.iw : (iy+1)*s.iw]
		base := (r % s.sh) * s.sw * plane
		prow := (r / s.sh) * pg.wq
		if s.sw == 1 {
			copy(planes[base+prow+x0+s.pl:], row[x0:x1])
			continue
		}
		if s.sw == 2 {
			c := x0 + s.pl
			ev, od := planes[base+prow:], planes[base+plane+prow:]
			ix := x0
			if c%2 != 0 {
				od[c/2] = row[ix]
				ix++
			}
			np := (x1 - ix) / 2
			c = (ix + s.pl) / 2
			vec.Deinterleave2(ev[c:c+np], od[c:c+np], row[ix:ix+2*np])
			if ix+2*np < x1 {
				ev[c+np] = row[x1-1]
			}
			continue
		}
		// Per column phase, a strided read and a contiguous write (no
		// division per pixel).
		for ph := 0; ph < s.sw; ph++ {
			ix := x0 + ((ph-(x0+s.pl))%s.sw+s.sw)%s.sw // first ix of this phase
			if ix >= x1 {
				continue
			}
			d := planes[base+ph*plane+prow+(ix+s.pl)/s.sw:]
			j := 0
			for ; ix < x1; ix += s.sw {
				d[j] = row[ix]
				j++
			}
		}
	}
}
