package irexec

import "goinfer/internal/engine/cpu/vec"

// dwBlockStep is a depthwise convolution (one input channel per group,
// channel multiplier 1, constant weights, no residual) computed
// vec.DWLanes channels at a time. A block's input channels are
// interleaved into one zero-padded tile, pixel by pixel; vec.DWTile
// convolves all of them together (strides and dilation native, no
// dropped columns), the activation runs over the output tile in one pass
// and the channels are written back to their planes. On small maps this
// replaces per-channel fixed costs (a plane fill, a kernel call, a copy
// out and an activation call per channel) with per-block ones. Large maps
// run in strips of output rows, so that a tile stays in L1/L2 and the
// strips of one block are tasks of their own.
type dwBlockStep struct {
	convGeom
	src, dst int
	// w and bias are per block of vec.DWLanes channels: kh*kw taps of
	// DWLanes weights, then DWLanes biases; lanes past the last channel
	// are zero.
	w, bias []float32
	act     act
	wp      int   // the padded tile's width: the input columns outputs read
	offs    []int // per tap, its pixel offset in the tile
	nblk    int
	// strip is the output rows of a task, nstrip the strips of a map,
	// tileLen the floats of the largest strip's input tile.
	strip, nstrip, tileLen int
	// poolDst, when not -1, is the global average pooling of the output
	// that the step also computes (fuseDWPool).
	poolDst int
}

// dwStripFloats bounds a strip's input and output tiles together (in
// float32s): 64 KiB, about an L1 and well inside L2.
const dwStripFloats = 16 << 10

// newDWBlockStep returns the blocked step for g, or nil where it does not
// apply.
func newDWBlockStep(nc *nodeCtx, g convGeom, w, bias []float32, res int, ac act) *dwBlockStep {
	if !nc.c.dwBlocks || g.icg != 1 || g.ocg != 1 || res >= 0 || w == nil {
		return nil
	}
	const L = vec.DWLanes
	s := &dwBlockStep{convGeom: g, src: nc.in[0], dst: nc.out[0], act: ac, nblk: (g.outC + L - 1) / L, poolDst: -1}
	s.wp = (g.ow-1)*g.sw + (g.kw-1)*g.dw + 1
	for ky := 0; ky < g.kh; ky++ {
		for kx := 0; kx < g.kw; kx++ {
			s.offs = append(s.offs, ky*g.dh*s.wp+kx*g.dw)
		}
	}
	halo := (g.kh-1)*g.dh + 1
	s.strip = max(1, min(g.oh, (dwStripFloats/L-halo*s.wp)/(g.sh*s.wp+g.ow)))
	s.nstrip = (g.oh + s.strip - 1) / s.strip
	s.tileLen = s.tileRows(s.strip) * s.wp * L
	s.w, s.bias = laneWeights(w, bias, g.outC, g.kh*g.kw, s.nblk)
	nc.needScratch(s.tileLen + s.strip*g.ow*L)
	return s
}

// tileRows is the padded input rows that rows output rows read.
func (s *dwBlockStep) tileRows(rows int) int { return (rows-1)*s.sh + (s.kh-1)*s.dh + 1 }

func (s *dwBlockStep) run(x *Exec) error {
	x.parRange(s, s.n*s.nblk*s.nstrip, 1)
	if s.poolDst >= 0 {
		s.finishPool(x, s.nstrip)
	}
	return nil
}

// rng computes tasks [lo, hi): strips of blocks of images, strip fastest.
func (s *dwBlockStep) rng(x *Exec, wk, lo, hi int) {
	// Padding columns stay zero: packing writes only the input's columns.
	// Lanes past the last channel hold stale values no output reads.
	clear(x.scratch[wk][:s.tileLen])
	src := x.f32(s.src)
	ihw := s.ih * s.iw
	for task := lo; task < hi; task++ {
		st := task % s.nstrip
		img, blk := task/s.nstrip/s.nblk, task/s.nstrip%s.nblk
		r0 := st * s.strip
		rows := min(s.oh, r0+s.strip) - r0
		s.rows(x, wk, src[(img*s.inC+blk*vec.DWLanes)*ihw:], ihw, 0, img, blk, r0, rows, st, s.nstrip)
	}
}

// rows computes output rows [r0, r0+rows) (at most s.strip) of channel
// block blk of image img from src, which holds the block's input planes
// plane floats apart, each from input row base on (a whole plane, or the
// rows a fused expansion left in a band buffer: pwdwStep). st is the
// strip's index among the nst of a plane for the fused pooling. The
// worker's tile must have been cleared once before its first call.
func (s *dwBlockStep) rows(x *Exec, wk int, src []float32, plane, base, img, blk, r0, rows, st, nst int) {
	const L = vec.DWLanes
	tile := x.scratch[wk][:s.tileLen:s.tileLen]
	out := x.scratch[wk][s.tileLen:][:s.strip*s.ow*L]
	kk, ohw := s.kh*s.kw, s.oh*s.ow
	c0 := blk * L
	nc := min(L, s.outC-c0)
	s.pack(tile, src, plane, base, nc, r0*s.sh-s.pt, s.tileRows(rows))
	o := out[:rows*s.ow*L]
	vec.DWTile(o, tile, s.w[blk*kk*L:(blk+1)*kk*L], s.bias[blk*L:(blk+1)*L], s.offs, rows, s.ow, s.sh*s.wp, s.sw)
	s.act.apply(o)
	dst := x.f32(s.dst)
	base0 := (img*s.outC + c0) * ohw
	vec.Deinterleave(dst[base0+r0*s.ow:base0+(nc-1)*ohw+(r0+rows)*s.ow], o, nc, ohw, rows*s.ow)
	if s.poolDst >= 0 {
		s.poolStrip(x, dst, img, c0, nc, st, nst, r0, rows)
	}
}

// pack interleaves nc input planes' rows [top, top+hs) (negative and
// past the end: padding) into the tile's first hs rows, one
// vec.Interleave for all of them; src holds the planes plane floats
// apart, each from input row base on. Padding rows are zeroed, since a
// previous strip may have left input there.
func (s *dwBlockStep) pack(tile, src []float32, plane, base, nc, top, hs int) {
	const L = vec.DWLanes
	x0, x1 := max(0, -s.pl), min(s.iw, s.wp-s.pl)
	y0, y1 := max(0, top), min(s.ih, top+hs)
	row := s.wp * L
	if y0 >= y1 || x0 >= x1 {
		clear(tile[:hs*row])
		return
	}
	clear(tile[:(y0-top)*row])
	clear(tile[(y1-top)*row : hs*row])
	at := ((y0-top)*s.wp + x0 + s.pl) * L
	vec.Interleave(tile[at:], src[(y0-base)*s.iw+x0:], nc, plane, y1-y0, x1-x0, s.iw, s.wp)
}

// laneWeights lays out outC output channels' weights (taps each, channel
// by channel in w) and biases for kernels with one output channel per
// vector lane: blocks of vec.DWLanes channels, tap by tap, one lane per
// channel, the lanes past outC zero; bias nil gives zeros.
func laneWeights(w, bias []float32, outC, taps, blocks int) (lw, lb []float32) {
	const L = vec.DWLanes
	lw = make([]float32, blocks*taps*L)
	lb = make([]float32, blocks*L)
	for m := range outC {
		blk, lane := m/L, m%L
		for t := range taps {
			lw[(blk*taps+t)*L+lane] = w[m*taps+t]
		}
		if bias != nil {
			lb[blk*L+lane] = bias[m]
		}
	}
	return lw, lb
}
