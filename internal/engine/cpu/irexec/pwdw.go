package irexec

import (
	"fmt"

	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/engine/cpu/vec"
)

// pwdwStep is an inverted residual block's expansion (a pointwise
// convolution) and the blocked depthwise convolution that alone reads its
// output, computed band by band: a task expands the input rows that a
// band of depthwise output rows reads into a buffer of its own, then runs
// the depthwise convolution over them. The expanded map (MobileNetV3's
// 64 channels of 112x112, 3.2 MB) is never written whole and read back:
// a band's rows stay in L2 between the two. A task runs consecutive
// bands and keeps the rows two bands share (the depthwise kernel's halo),
// so that only its first band computes them again.
type pwdwStep struct {
	pw *convStep
	dw *dwBlockStep
	// band is the depthwise output rows of a band, nband the bands of an
	// image, inRows the most expanded rows a band reads.
	band, nband, inRows int
	// ld is a band buffer's plane stride: inRows rows and room for the
	// last panel's columns past them.
	ld int
	// spb is the depthwise strips of a band: the fused pooling's sums
	// are kept per strip, nband*spb of them per plane.
	spb int
}

// pwdwBandFloats bounds a band's expanded rows (all channels, in
// float32s): 128 KiB, within L2 beside the depthwise tile.
const pwdwBandFloats = 32 << 10

// pwdwMinMap is the smallest expanded map (per image, in float32s) that
// is fused: smaller maps stay in L2 between the two steps anyway.
const pwdwMinMap = 64 << 10

// pwdwMinBands is the bands an image is cut into at least, where its
// rows allow: a band is a unit of the step's parallel work.
const pwdwMinBands = 4

// newPWDW returns the fused step for a pointwise convolution pw whose
// output only the depthwise dw reads, or nil where it does not apply or
// does not pay.
func newPWDW(pw *convStep, dw *dwBlockStep) *pwdwStep {
	if !pw.pointwise() || pw.groups != 1 || pw.scale >= 0 || pw.res >= 0 || len(pw.a) != 1 || pw.a[0].Blocks() != 1 ||
		dw.n != pw.n || dw.inC != pw.outC || dw.ih != pw.oh || dw.iw != pw.ow || pw.outC*pw.oh*pw.ow < pwdwMinMap {
		return nil
	}
	s := &pwdwStep{pw: pw, dw: dw}
	// The widest band of whole depthwise strips whose input rows fit
	// the budget and that leaves an image pwdwMinBands bands, else (the
	// depthwise step's strips are whole small maps: 28x28) a part of a
	// strip that does.
	per := pw.outC * pw.ow
	s.spb = 1
	for k := 2; (dw.oh+k*dw.strip-1)/(k*dw.strip) >= pwdwMinBands && dw.tileRows(k*dw.strip)*per <= pwdwBandFloats; k++ {
		s.spb = k
	}
	s.band = s.spb * dw.strip
	if (dw.oh+s.band-1)/s.band < pwdwMinBands {
		s.band = max(1, (dw.oh+pwdwMinBands-1)/pwdwMinBands)
	}
	s.nband = (dw.oh + s.band - 1) / s.band
	if s.nband < 2 {
		return nil // one band is the unfused order, without the parallel channel blocks
	}
	s.inRows = min(dw.tileRows(s.band), dw.ih)
	s.ld = roundUp(s.inRows*pw.ow+gemm.NR, gemm.NR)
	return s
}

// scratchFloats is a worker's scratch: the depthwise tiles, the band
// buffer and a packed panel of B for a band's last columns.
func (s *pwdwStep) scratchFloats() int {
	return s.dw.tileLen + s.dw.strip*s.dw.ow*vec.DWLanes + s.pw.outC*s.ld + s.pw.inC*gemm.NR
}

func (s *pwdwStep) run(x *Exec) error {
	units := s.dw.n * s.nband
	// About three tasks per worker: each task's first band computes its
	// halo rows again, later ones copy them; fewer tasks left a worker
	// idle long enough at the step's end to park.
	grain := max(1, units/(3*x.pool.Size()))
	x.parRange(s, units, grain)
	if s.dw.poolDst >= 0 {
		s.dw.finishPool(x, s.nband*s.spb)
	}
	return nil
}

// rng computes bands [lo, hi) (image-major) of the block.
func (s *pwdwStep) rng(x *Exec, wk, lo, hi int) {
	pw, dw := s.pw, s.dw
	ws := x.scratch[wk]
	clear(ws[:dw.tileLen])
	off := dw.tileLen + dw.strip*dw.ow*vec.DWLanes
	buf := ws[off : off+pw.outC*s.ld]
	tail := ws[off+pw.outC*s.ld : off+pw.outC*s.ld+pw.inC*gemm.NR]
	in := x.f32(pw.src)
	ihw := pw.ih * pw.iw
	// Input rows [a, b) of image img are in buf, row a at row 0.
	img, a, b := -1, 0, 0
	for u := lo; u < hi; u++ {
		im, bd := u/s.nband, u%s.nband
		r0 := bd * s.band
		rows := min(dw.oh, r0+s.band) - r0
		na := max(0, r0*dw.sh-dw.pt)
		nb := min(dw.ih, (r0+rows-1)*dw.sh-dw.pt+(dw.kh-1)*dw.dh+1)
		keep := 0
		if im == img && na < b && na >= a {
			// Rows [na, b) were expanded for the band before: move them
			// to the top.
			keep = b - na
			if na > a {
				for c := range pw.outC {
					p := buf[c*s.ld:]
					copy(p[:keep*pw.iw], p[(na-a)*pw.iw:(b-a)*pw.iw])
				}
			}
		}
		if from := na + keep; from < nb {
			s.expand(buf[keep*pw.iw:], tail, in[im*pw.inC*ihw+from*pw.iw:], (nb-from)*pw.iw)
		}
		img, a, b = im, na, nb
		for blk := range dw.nblk {
			src := buf[blk*vec.DWLanes*s.ld:]
			for j := 0; j < s.spb && r0+j*dw.strip < r0+rows; j++ {
				sr := r0 + j*dw.strip
				dw.rows(x, wk, src, s.ld, a, im, blk, sr, min(dw.strip, r0+rows-sr), bd*s.spb+j, s.nband*s.spb)
			}
		}
	}
}

// expand computes the expansion's n output pixels from in (each input
// channel's first pixel, planes ih*iw apart) into dst (planes s.ld
// apart), with its bias and activation; tail is a packed panel's room for
// the columns past the last whole panel.
func (s *pwdwStep) expand(dst, tail, in []float32, n int) {
	const nr = gemm.NR
	pw := s.pw
	a := pw.a[0]
	kc, ihw := pw.inC, pw.ih*pw.iw
	np := (pw.outC + gemm.MR - 1) / gemm.MR
	t := gemm.Tile{C: dst, Ld: s.ld, Rows: pw.outC, ReLU: pw.act.relu(), Bias: pw.bias}
	whole := n / nr
	if whole > 0 {
		t.Cols = whole * nr
		gemm.KernelRun(np, kc, a.PanelRun(0, 0), gemm.MR*kc, in, ihw, nr, whole, &t)
	}
	if rem := n - whole*nr; rem > 0 {
		// The last columns through a packed panel: read in place, the
		// panel would run past the input's last plane.
		for k := range kc {
			row := tail[k*nr : (k+1)*nr]
			copy(row, in[k*ihw+whole*nr:k*ihw+n])
			clear(row[rem:])
		}
		t.C, t.Cols = dst[whole*nr:], nr
		gemm.KernelRun(np, kc, a.PanelRun(0, 0), gemm.MR*kc, tail, nr, nr*kc, 1, &t)
	}
	if pw.act.post() {
		for c := range pw.outC {
			pw.act.apply(dst[c*s.ld : c*s.ld+n])
		}
	}
}

// fusePWDW replaces each pointwise expansion whose output only the
// blocked depthwise convolution right after it reads by a pwdwStep.
func (c *compiler) fusePWDW() {
	p := c.p
	if p.expandMode == ExpandOff {
		return
	}
	for i := 0; i+1 < len(p.steps); i++ {
		pw, ok := p.steps[i].s.(*convStep)
		if !ok {
			continue
		}
		dw, ok := p.steps[i+1].s.(*dwBlockStep)
		if !ok || p.root(dw.src) != p.root(pw.dst) || c.readElsewhere(p.root(pw.dst), i+1) {
			continue
		}
		if p.expandMode == ExpandAuto && pw.n < 2 {
			continue
		}
		s := newPWDW(pw, dw)
		if s == nil {
			continue
		}
		p.scratch = max(p.scratch, s.scratchFloats())
		if dw.poolDst >= 0 {
			p.shared = max(p.shared, dw.n*dw.outC*s.nband*s.spb)
		}
		p.steps[i] = planStep{node: p.steps[i].node + " + " + p.steps[i+1].node, s: s}
		p.steps = append(p.steps[:i+1], p.steps[i+2:]...)
		// The expansion's output lives for the fused step only.
		u := &c.uses[i]
		u.defs = append(u.defs, c.uses[i+1].defs...)
		for _, r := range c.uses[i+1].reads {
			if p.root(r) != p.root(pw.dst) {
				u.reads = append(u.reads, r)
			}
		}
		c.uses = append(c.uses[:i+1], c.uses[i+2:]...)
	}
}

// ExpandMode says where Compile fuses a pointwise expansion with the
// depthwise convolution after it (fusePWDW).
type ExpandMode uint8

const (
	// ExpandOff never fuses: the default. On the 16-core Xeon host
	// (AVX-512, 2 MiB of L2 a core) MobileNetV3-L at 2 threads ran batch
	// 32 in 134-135 ms unfused against 147-176 fused in chunks, and batch
	// 1 fused was slower everywhere (results/cpu/session15-h200-host).
	ExpandOff ExpandMode = iota
	// ExpandAuto fuses in plans of several images (a split batch's
	// chunks): on the 2-core AVX2 VM the fused step measured faster there
	// and slower at batch 1, where one image's expanded map stays in its
	// large L3 between the two steps (notes/cpu-front.md).
	ExpandAuto
	// ExpandOn fuses at every batch size.
	ExpandOn
)

// ParseExpandMode reads "off" (or ""), "auto" or "on".
func ParseExpandMode(s string) (ExpandMode, error) {
	switch s {
	case "auto":
		return ExpandAuto, nil
	case "on":
		return ExpandOn, nil
	case "", "off":
		return ExpandOff, nil
	}
	return 0, fmt.Errorf("expansion fusion %q: want off, auto or on", s)
}
