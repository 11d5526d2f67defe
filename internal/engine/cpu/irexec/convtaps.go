package irexec

import "goinfer/internal/engine/cpu/vec"

// tapsConvStep is a convolution with few input channels and taps (a
// network's stem: 3 channels, 3x3, stride 2), computed directly with
// vec.TapsN instead of through the GEMM, whose K (channels x taps = 27)
// is too short to amortise packing and a micro-kernel call. The input
// rows a task needs are copied, zero-padded, into column-phase planes
// (padded column c lands in plane c mod sw at c/sw), so every tap of an
// output row reads one contiguous run; TapsN then computes 16 output
// channels per pass from each input load, straight into their planes.
type tapsConvStep struct {
	convGeom
	src, dst int
	// w and bias are per group of vec.DWLanes output channels: per tap
	// (input channel, ky, kx) DWLanes weights, then DWLanes biases.
	w, bias []float32
	act     act
	offs    []int // per tap, its offset in a task's planes
	wq      int   // a phase plane's width
	// strip is the output rows of a task, nstrip the strips of a map,
	// hq the plane rows of a full strip.
	strip, nstrip, hq int
	ngrp              int
}

// maxTapsConv bounds input channels x taps for the direct kernel: a 7x7
// stem (147) runs at about 1.2x the GEMM's speed there, whose im2col of
// 147 rows costs as much as its micro-kernel. Past 3x3 kernels it is
// taken for column strides up to 2, whose phase split is vectorised.
const (
	maxTapsConv      = 160
	maxTapsConvSmall = 32
)

// newTapsConvStep returns the direct step for g, or nil where the GEMM
// path is the better one.
func newTapsConvStep(nc *nodeCtx, g convGeom, w, bias []float32, res int, ac act) *tapsConvStep {
	kk := g.kh * g.kw
	if g.groups != 1 || res >= 0 || kk == 1 || g.inC*kk > maxTapsConv || g.inC*kk > maxTapsConvSmall && g.sw > 2 || g.oh*g.ow < 64 || !vec.TapsNFast() {
		return nil
	}
	const L = vec.DWLanes
	s := &tapsConvStep{convGeom: g, src: nc.in[0], dst: nc.out[0], act: ac, ngrp: (g.outC + L - 1) / L}
	wneed := (g.ow-1)*g.sw + (g.kw-1)*g.dw + 1
	s.wq = (wneed + g.sw - 1) / g.sw
	rowFloats := g.inC * g.sw * g.sh * s.wq
	halo := (g.kh-1)*g.dh + 1
	s.strip = max(1, min(g.oh, (dwStripFloats-g.inC*g.sw*halo*s.wq)/max(1, rowFloats)))
	s.nstrip = (g.oh + s.strip - 1) / s.strip
	s.hq = (s.strip-1)*g.sh + halo
	for ic := 0; ic < g.inC; ic++ {
		for ky := 0; ky < g.kh; ky++ {
			for kx := 0; kx < g.kw; kx++ {
				c := kx * g.dw
				s.offs = append(s.offs, ((ic*g.sw+c%g.sw)*s.hq+ky*g.dh)*s.wq+c/g.sw)
			}
		}
	}
	s.w, s.bias = laneWeights(w, bias, g.outC, g.inC*kk, s.ngrp)
	nc.needScratch(s.planesLen() + s.wq*g.sw)
	return s
}

func (s *tapsConvStep) planesLen() int { return s.inC * s.sw * s.hq * s.wq }

func (s *tapsConvStep) run(x *Exec) error {
	_, nstrip := s.strips(x.pool.Size(), s.n)
	x.parRange(s, s.n*nstrip, 1)
	return nil
}

// strips is the output rows of a task and the tasks per image when
// workers workers share n images: the strip that fits the cache, or,
// from 4 workers on where that makes too few tasks to balance, thinner
// strips for a whole number of rounds (a 224x224 stem at batch 1 made 14
// tasks for 16 workers).
func (s *tapsConvStep) strips(workers, n int) (strip, nstrip int) {
	strip, nstrip = s.strip, s.nstrip
	if tasks := n * nstrip; workers >= 4 && tasks < tasksPerThread*workers && tasks%workers != 0 {
		per := ((tasks+workers-1)/workers*workers + n - 1) / n
		strip = (s.oh + per - 1) / per
		nstrip = (s.oh + strip - 1) / strip
	}
	return strip, nstrip
}

// rng computes tasks [lo, hi): strips of output rows, image-major.
func (s *tapsConvStep) rng(x *Exec, wk, lo, hi int) {
	strip, nstrip := s.strips(x.pool.Size(), s.n)
	for task := lo; task < hi; task++ {
		img := task / nstrip
		s.rows(x, wk, img, img, task%nstrip*strip, strip)
	}
}

// rows computes the strip of image img's output rows from r0 on (at most
// strip <= s.strip of them) into image dimg's place of the output.
func (s *tapsConvStep) rows(x *Exec, wk, img, dimg, r0, strip int) {
	const L = vec.DWLanes
	pl := s.planesLen()
	planes := x.scratch[wk][:pl]
	row := x.scratch[wk][pl : pl+s.wq*s.sw]
	src, dst := x.f32(s.src), x.f32(s.dst)
	ihw, ohw, taps := s.ih*s.iw, s.oh*s.ow, s.inC*s.kh*s.kw
	rows := min(s.oh, r0+strip) - r0
	s.fill(planes, row, src[img*s.inC*ihw:(img+1)*s.inC*ihw], r0*s.sh-s.pt, (rows-1)*s.sh+(s.kh-1)*s.dh+1)
	out := dst[dimg*s.outC*ohw : (dimg+1)*s.outC*ohw]
	for grp := 0; grp < s.ngrp; grp++ {
		m0 := grp * L
		no := min(L, s.outC-m0)
		w, b := s.w[grp*taps*L:(grp+1)*taps*L], s.bias[grp*L:(grp+1)*L]
		// A ReLU goes into TapsN's stores, saving a pass over the
		// strip's outputs; other activations follow it.
		for oy := 0; oy < rows; oy++ {
			at := m0*ohw + (r0+oy)*s.ow
			vec.TapsN(out[at:], ohw, planes[oy*s.sh*s.wq:], s.offs, w, b, no, s.ow, s.act.relu())
		}
		for m := m0; s.act.post() && m < m0+no; m++ {
			s.act.apply(out[m*ohw+r0*s.ow : m*ohw+(r0+rows)*s.ow])
		}
	}
}

// fill writes padded input rows [top, top+hs) (rows outside the input
// are padding) of every input channel into the column-phase planes, each
// row zero-padded in row first.
func (s *tapsConvStep) fill(planes, row, src []float32, top, hs int) {
	ihw := s.ih * s.iw
	x0, x1 := max(0, -s.pl), min(s.iw, len(row)-s.pl)
	for ic := 0; ic < s.inC; ic++ {
		for j := 0; j < hs; j++ {
			clear(row)
			if iy := top + j; iy >= 0 && iy < s.ih && x0 < x1 {
				in := src[ic*ihw+iy*s.iw : ic*ihw+(iy+1)*s.iw]
				copy(row[x0+s.pl:], in[x0:x1])
			}
			at := (ic*s.sw*s.hq + j) * s.wq
			switch s.sw {
			case 1:
				copy(planes[at:at+s.wq], row)
			case 2:
				vec.Deinterleave2(planes[at:at+s.wq], planes[at+s.hq*s.wq:at+s.hq*s.wq+s.wq], row)
			default:
				for c, v := range row {
					planes[at+(c%s.sw)*s.hq*s.wq+c/s.sw] = v
				}
			}
		}
	}
}
