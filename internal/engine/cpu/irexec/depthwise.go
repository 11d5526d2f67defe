package irexec

// dwStep is a depthwise convolution (one input channel per group, any
// channel multiplier) computed directly: each output row accumulates, per
// kernel position, a scaled and shifted input row, so the work is a few
// streaming passes over rows that stay in L1, with the padding handled by
// clipping each pass's column range instead of testing every pixel.
type dwStep struct {
	convGeom
	src, res, dst int
	w             []float32 // outC x kh x kw
	bias          []float32
	act           act
}

func newDepthwise(nc *nodeCtx, g convGeom, w, bias []float32, res int, ac act) *dwStep {
	return &dwStep{convGeom: g, src: nc.in[0], res: res, dst: nc.out[0], w: w, bias: bias, act: ac}
}

func (s *dwStep) run(x *Exec) error {
	x.parRange(s, s.n*s.outC, max(1, 4096/(s.oh*s.ow)))
	return nil
}

func (s *dwStep) rng(x *Exec, _, lo, hi int) {
	src, dst := x.f32(s.src), x.f32(s.dst)
	var res []float32
	if s.res >= 0 {
		res = x.f32(s.res)
	}
	ihw, ohw := s.ih*s.iw, s.oh*s.ow
	for p := lo; p < hi; p++ {
		img, m := p/s.outC, p%s.outC
		c := m / s.ocg
		in := src[(img*s.inC+c)*ihw : (img*s.inC+c+1)*ihw]
		out := dst[p*ohw : (p+1)*ohw]
		w := s.w[m*s.kh*s.kw : (m+1)*s.kh*s.kw]
		var b float32
		if s.bias != nil {
			b = s.bias[m]
		}
		for oy := 0; oy < s.oh; oy++ {
			orow := out[oy*s.ow : (oy+1)*s.ow]
			for i := range orow {
				orow[i] = b
			}
			for ky := 0; ky < s.kh; ky++ {
				iy := oy*s.sh - s.pt + ky*s.dh
				if iy < 0 || iy >= s.ih {
					continue
				}
				irow := in[iy*s.iw : (iy+1)*s.iw]
				for kx := 0; kx < s.kw; kx++ {
					wv := w[ky*s.kw+kx]
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
						o := orow[x0:x1]
						r := irow[x0+off : x1+off]
						r = r[:len(o)]
						for i := range o {
							o[i] += wv * r[i]
						}
						continue
					}
					for ox := x0; ox < x1; ox++ {
						orow[ox] += wv * irow[ox*s.sw+off]
					}
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
