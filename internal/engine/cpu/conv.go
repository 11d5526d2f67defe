package cpu

import (
	"fmt"
	"slices"

	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/model"
)

// Blocking of a convolution's GEMM (M = output channels of a group, N =
// output pixels of all the batch's images, K = input channels of the group
// x kernel area). One task computes an (M-range, N-range) block of one
// group: it packs a K-block of B for its N-range (at most KCMax x ncMax
// floats, in L2) and sweeps A's MC-row blocks (mcMax x KCMax floats, also
// L2) over it, one NR-wide B micro-panel (in L1) at a time.
const (
	ncMax = 256
	mcMax = 192 // a multiple of gemm.MR
	// tasksPerThread is how many tasks per worker a parallel op aims for, so
	// that dynamic scheduling evens out uneven task costs.
	tasksPerThread = 4
)

// convStep is a convolution with its weights packed per group.
type convStep struct {
	src, res, dst int // values; res is -1 without a residual input
	inC, outC     int
	k, stride     int
	pad, groups   int
	ih, iw        int
	oh, ow        int
	icg, ocg      int
	bias          []float32 // nil or outC
	relu          bool
	a             []*gemm.PackedA // per group: ocg x icg*k*k
	// layout says where B's values are read from; see convLayout.
	layout convLayout
	// ph, pw are the phase planes' height and width (layoutPhases), and
	// usedPhase says which of the stride x stride phases the kernel reads.
	ph, pw    int
	usedPhase []bool
	// reusePhases says the phase buffer holds this step's input split
	// already, by an earlier step of the pass (plan.sharePhases).
	reusePhases bool
	// kOff and kMask are, per row of B, the offset PackGather adds to
	// each lane and the index of the row's kernel-position mask.
	kOff, kMask []int32
}

// convLayout is how a convolution reads its implicit im2col matrix. Output
// pixel n = oy*OW + ox; in the two contiguous layouts B's row for kernel
// position (ky, kx) is the input read at a constant shift from n, so a
// panel row is NR consecutive values, loaded under a padding mask.
type convLayout uint8

const (
	// layoutShift: stride 1 and the input as wide as the output (a "same"
	// convolution: 3x3 pad 1, 1x1 pad 0), so input pixel
	// (oy+ky-pad, ox+kx-pad) is at flat index n + (ky-pad)*IW + kx-pad.
	layoutShift convLayout = iota
	// layoutPhases: stride S > 1 with ceil(IW/S) == OW. The input is first
	// split into S*S phase planes (rows py::S, columns px::S), where a
	// strided window becomes a shift, as in layoutShift.
	layoutPhases
	// layoutGather: anything else; each lane is gathered.
	layoutGather
)

// maxKernel bounds the kernel size, so that per-panel masks live in fixed
// arrays (ResNets use 1, 3 and 7).
const maxKernel = 11

func newConvStep(nd *model.Node, in, out model.Dims, maxBatch int) (*convStep, error) {
	c := nd.Conv
	if c.K > maxKernel {
		return nil, fmt.Errorf("kernel size %d is larger than the cpu engine's maximum %d", c.K, maxKernel)
	}
	s := &convStep{
		src: int(nd.Inputs[0]), res: -1, dst: int(nd.Output),
		inC: c.InC, outC: c.OutC, k: c.K, stride: c.Stride, pad: c.Pad, groups: c.Groups,
		ih: in.H, iw: in.W, oh: out.H, ow: out.W,
		icg: c.InC / c.Groups, ocg: c.OutC / c.Groups,
		bias: slices.Clone(c.Bias), relu: c.ReLU,
	}
	if c.Residual {
		s.res = int(nd.Inputs[1])
	}
	kdim := s.icg * c.K * c.K
	s.ph, s.pw = (in.H+c.Stride-1)/c.Stride, (in.W+c.Stride-1)/c.Stride
	switch {
	case c.Stride == 1 && in.W == out.W:
		s.layout = layoutShift
	case c.Stride > 1 && s.pw == out.W:
		s.layout = layoutPhases
	default:
		s.layout = layoutGather
	}
	for g := 0; g < c.Groups; g++ {
		w := c.Weight[g*s.ocg*kdim : (g+1)*s.ocg*kdim]
		a, err := gemm.PackA(w, s.ocg, kdim, kdim, gemm.BlockDepth(kdim))
		if err != nil {
			return nil, fmt.Errorf("packing weights of group %d: %w", g, err)
		}
		s.a = append(s.a, a)
	}
	if int64(c.InC)*int64(c.Stride*c.Stride)*int64(s.ph*s.pw)*int64(maxBatch) >= 1<<31 {
		return nil, fmt.Errorf("input of %d images of %d channels of %dx%d is too large", maxBatch, c.InC, in.H, in.W)
	}
	s.kOff, s.kMask = make([]int32, kdim), make([]int32, kdim)
	s.usedPhase = make([]bool, c.Stride*c.Stride)
	for k := 0; k < kdim; k++ {
		ci, r := k/(c.K*c.K), k%(c.K*c.K)
		ky, kx := r/c.K, r%c.K
		s.kMask[k] = int32(r)
		switch s.layout {
		case layoutShift:
			s.kOff[k] = int32(ci*in.H*in.W + (ky-c.Pad)*in.W + kx - c.Pad)
		case layoutPhases:
			py, dy := floorDivMod(ky-c.Pad, c.Stride)
			px, dx := floorDivMod(kx-c.Pad, c.Stride)
			plane := (ci*c.Stride+py)*c.Stride + px
			s.usedPhase[py*c.Stride+px] = true
			s.kOff[k] = int32(plane*s.ph*s.pw + dy*s.pw + dx)
		case layoutGather:
			s.kOff[k] = int32(ci*in.H*in.W + ky*in.W + kx)
		}
	}
	return s, nil
}

func (s *convStep) weightBytes() int64 {
	n := len(s.bias)
	for _, a := range s.a {
		n += len(a.Data)
	}
	return 4 * int64(n)
}

// phaseElems is the floats per image the phase planes of the input take
// (layoutPhases), 0 otherwise.
func (s *convStep) phaseElems() int {
	if s.layout != layoutPhases {
		return 0
	}
	return s.inC * s.stride * s.stride * s.ph * s.pw
}

func (s *convStep) run(in *instance, n int) {
	j := &in.conv
	j.s = s
	j.in, j.out = in.vals[s.src], in.vals[s.dst]
	if s.layout == layoutPhases {
		if !s.reusePhases {
			pj := &in.phase
			pj.s, pj.in, pj.out = s, j.in, in.phaseBuf[:n*s.phaseElems()]
			pj.per = max(1, planeChunk/(s.ih*s.iw))
			pj.planes = n * s.inC
			in.pool.Run(pj, (pj.planes+pj.per-1)/pj.per)
		}
		j.in = in.phaseBuf[:n*s.phaseElems()]
	}
	j.res = nil
	if s.res >= 0 {
		j.res = in.vals[s.res]
	}
	// The GEMM's N runs over the output pixels of all n images, so that
	// small late-stage images (7x7 = 49 pixels) still fill whole NR-wide
	// panels when the batch has several.
	m, ntot := s.ocg, n*s.oh*s.ow
	nch, mch := (ntot+ncMax-1)/ncMax, 1
	target := tasksPerThread * in.pool.Size()
split:
	for s.groups*nch*mch < target {
		switch {
		case ntot/(nch+1) >= 4*gemm.NR:
			nch++
		case m/(mch+1) >= 4*gemm.MR:
			mch++
		default:
			break split // tasks would get too thin
		}
	}
	j.ntot = ntot
	j.nw = roundUp((ntot+nch-1)/nch, gemm.NR)
	j.mw = roundUp((m+mch-1)/mch, gemm.MR)
	j.nch, j.mch = (ntot+j.nw-1)/j.nw, (m+j.mw-1)/j.mw
	j.shared = nil
	kdim := s.icg * s.k * s.k
	if size := s.groups * j.nch * kdim * j.nw; j.mch > 1 && size <= len(in.sharedB) {
		// Several tasks would pack the same columns of B: pack them once,
		// in parallel over K-blocks, and let the tasks share them.
		j.shared = in.sharedB[:size]
		pj := &in.pack
		pj.c, pj.nkb = j, s.a[0].Blocks()
		in.pool.Run(pj, s.groups*j.nch*pj.nkb)
	}
	in.pool.Run(j, s.groups*j.nch*j.mch)
}

// sharedElems is the most floats a shared packing of B can take for a
// batch of n images.
func (s *convStep) sharedElems(n int) int {
	return s.groups * s.icg * s.k * s.k * roundUp(n*s.oh*s.ow, gemm.NR)
}

// sharedBlock returns the packed K-block kb (rows k0...) of group g's N
// chunk jn in the shared packing: NR-wide panels of kc rows, as pack
// writes them.
func (j *convJob) sharedBlock(g, jn, k0 int) []float32 {
	kdim := j.s.icg * j.s.k * j.s.k
	off := ((g*j.nch+jn)*kdim + k0) * j.nw
	return j.shared[off : off+(kdim-k0)*j.nw]
}

// packJob packs B for a convJob's shared mode: one task per group, N chunk
// and K-block.
type packJob struct {
	c   *convJob
	nkb int
}

func (p *packJob) Run(w, t int) {
	j := p.c
	s := j.s
	g, r := t/(j.nch*p.nkb), t%(j.nch*p.nkb)
	jn, kb := r/p.nkb, r%p.nkb
	n0 := jn * j.nw
	n1 := min(j.ntot, n0+j.nw)
	ws := &j.scratch[w]
	s.prepare(ws, n0, n1-n0, true)
	k0, kc := s.a[g].BlockK(kb)
	s.pack(j.sharedBlock(g, jn, k0), j.in[g*s.icg*s.inPlane():], ws, k0, kc, n1-n0)
}

// floorDivMod returns q mod m in [0, m) and floor(q/m).
func floorDivMod(q, m int) (mod, div int) {
	div = q / m
	if q%m < 0 {
		div--
	}
	return q - div*m, div
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// convJob is one call of a convStep, split into tasks of (group, N-range,
// M-range), N running over all images' output pixels.
type convJob struct {
	s            *convStep
	in, res, out []float32
	ntot         int // images x output pixels
	// shared, when set, holds B packed once for all M-ranges.
	shared   []float32
	nw, mw   int       // task width in pixels and channels
	nch, mch int       // tasks per group along N and M
	scratch  []scratch // per worker
}

// scratch is one worker's private memory for GEMM tasks.
type scratch struct {
	packB []float32 // a packed KCMax x ncMax block of B
	tile  [gemm.MR * gemm.NR]float32
	// For a convolution task's panels: the lane offsets and, per kernel
	// position, the padding masks (see gemm.Gather).
	lanes   [ncMax / gemm.NR][gemm.NR]int32
	panels  [ncMax / gemm.NR]gemm.Panel
	masks   []int32 // ncMax/NR panels x maxKK masks x NR lanes
	allOnes []int32 // maxKK masks that read every lane
	maskOf  [ncMax / gemm.NR][]int32
	// contiguous says a panel's lanes are consecutive (see gemm.Gather).
	contiguous [ncMax / gemm.NR]bool
	gather     gemm.Gather
	// cols holds the narrow last panel of a task's pixels, when it
	// has at most gemm.ColsMax columns, expanded for KernelCols.
	cols gemm.ColsCache
}

func newScratch(maxKK int) scratch {
	s := scratch{
		packB:   make([]float32, gemm.KCMax*ncMax),
		cols:    gemm.NewColsCache(),
		masks:   make([]int32, ncMax/gemm.NR*maxKK*gemm.NR),
		allOnes: make([]int32, maxKK*gemm.NR),
	}
	for i := range s.allOnes {
		s.allOnes[i] = -1
	}
	return s
}

// bytes is the memory a scratch holds.
func (s *scratch) bytes() int64 {
	return int64(4 * (len(s.packB) + s.cols.Floats() + len(s.tile) + len(s.lanes)*gemm.NR + len(s.masks) + len(s.allOnes)))
}

func (j *convJob) Run(w, t int) {
	const mr, nr = gemm.MR, gemm.NR
	s := j.s
	per := j.nch * j.mch
	g, r := t/per, t%per
	npix := s.oh * s.ow
	in := j.in[g*s.icg*s.inPlane():]
	var bias []float32
	if s.bias != nil {
		bias = s.bias[g*s.ocg : (g+1)*s.ocg]
	}
	n0 := (r / j.mch) * j.nw
	n1 := min(j.ntot, n0+j.nw)
	m0 := (r % j.mch) * j.mw
	m1 := min(s.ocg, m0+j.mw)
	a := s.a[g]
	ws := &j.scratch[w]
	tile := &ws.tile
	s.prepare(ws, n0, n1-n0, j.shared == nil)
	ws.cols.Reset()
	nb := a.Blocks()
	for kb := 0; kb < nb; kb++ {
		k0, kc := a.BlockK(kb)
		bp := ws.packB
		if j.shared != nil {
			bp = j.sharedBlock(g, n0/j.nw, k0)
		} else {
			s.pack(bp, in, ws, k0, kc, n1-n0)
		}
		last := kb == nb-1
		for ic := m0; ic < m1; ic += mcMax {
			ie := min(m1, ic+mcMax)
			for jp := 0; n0+jp*nr < n1; jp++ {
				pn := &ws.panels[jp]
				if pn.Whole {
					jp += j.runPanels(ws, g, jp, n0, n1, kb, ic, ie, bp) - 1
					continue
				}
				bpan := bp[jp*nr*kc : (jp+1)*nr*kc]
				cols := min(nr, n1-n0-jp*nr)
				// Columns from split on belong to the next image; the
				// kernel stores a panel spanning at most two in place.
				split := min(cols, npix-pn.Pix)
				inPlace := cols-split <= npix
				narrow := cols <= gemm.ColsMax && gemm.ColsFast()
				if narrow {
					// A panel of a few real columns (a 7x7 map's 49th
					// pixel) costs a whole one through the
					// micro-kernel, a few FMAs per column through
					// KernelCols.
					inPlace = false
					ws.cols.For(kb, kc, bpan, cols)
				}
				for ip := ic / mr; ip*mr < ie; {
					rows := min(mr, ie-ip*mr)
					var ep gemm.Epilogue
					if last {
						ep.ReLU = s.relu
						if bias != nil {
							ep.Bias = bias[ip*mr:]
						}
					}
					if inPlace {
						np := min(gemm.WidePanels(), (ie-ip*mr+mr-1)/mr)
						rows := min(np*mr, ie-ip*mr)
						off := (pn.Img*s.outC+g*s.ocg+ip*mr)*npix + pn.Pix
						off2 := ((pn.Img+1)*s.outC + g*s.ocg + ip*mr) * npix
						t := gemm.Tile{C: j.out[off:], Ld: npix, Rows: rows, Cols: cols, Split: split, Load: kb > 0, Bias: ep.Bias, ReLU: ep.ReLU}
						if split < cols {
							t.C2 = j.out[off2:]
						}
						if last && j.res != nil {
							t.Res = j.res[off:]
							if split < cols {
								t.Res2 = j.res[off2:]
							}
						}
						gemm.KernelPanels(np, kc, a.PanelRun(kb, ip), mr*kc, bpan, &t)
						ip += np
						continue
					}
					// A partial tile, or one spanning images: compute it
					// aside and store it image by image.
					if narrow {
						gemm.KernelCols(a.Panel(kb, ip), &ws.cols.ColsPanel, tile[:])
					} else {
						gemm.KernelTile(kc, a.Panel(kb, ip), bpan, tile[:], cols)
					}
					img, pix := pn.Img, pn.Pix
					for l := 0; l < cols; {
						seg := min(cols-l, npix-pix)
						off := (img*s.outC+g*s.ocg+ip*mr)*npix + pix
						gemm.MergeTile(j.out[off:], npix, tile[l:], rows, seg, kb > 0)
						if last {
							if j.res != nil {
								ep.Res, ep.LdRes = j.res[off:], npix
							}
							gemm.ApplyEpilogue(j.out[off:], npix, rows, seg, ep)
						}
						l += seg
						img, pix = img+1, 0
					}
					ip++
				}
			}
		}
	}
}

// runPanels computes the whole panels from jp on that lie in one image
// (consecutive output pixels, stored in place) for rows ic..ie of K-block
// kb from the task's packed block bp, in one gemm.KernelRun call. It
// returns how many panels it computed.
func (j *convJob) runPanels(ws *scratch, g, jp, n0, n1, kb, ic, ie int, bp []float32) int {
	const nr = gemm.NR
	s := j.s
	pn := &ws.panels[jp]
	nb := gemm.WholeRun(ws.panels[jp:], (n1-n0+nr-1)/nr-jp)
	a := s.a[g]
	_, kc := a.BlockK(kb)
	npix := s.oh * s.ow
	off := (pn.Img*s.outC+g*s.ocg+ic)*npix + pn.Pix
	t := gemm.Tile{C: j.out[off:], Ld: npix, Rows: ie - ic, Cols: nb * nr, Load: kb > 0}
	if kb == a.Blocks()-1 {
		t.ReLU = s.relu
		if s.bias != nil {
			t.Bias = s.bias[g*s.ocg+ic:]
		}
		if j.res != nil {
			t.Res = j.res[off:]
		}
	}
	np := (ie - ic + gemm.MR - 1) / gemm.MR
	gemm.KernelRun(np, kc, a.PanelRun(kb, ic/gemm.MR), gemm.MR*kc, bp[jp*nr*kc:], nr, nr*kc, nb, &t)
	return nb
}

// inPlane is the floats per input channel that B is read from: a plane, or
// its phase planes.
func (s *convStep) inPlane() int {
	if s.layout == layoutPhases {
		return s.stride * s.stride * s.ph * s.pw
	}
	return s.ih * s.iw
}

// phaseJob splits a strided convolution's input planes into phase planes:
// phase (py, px) of a plane holds its pixels (py+S*r, px+S*c), zero past
// the edge.
type phaseJob struct {
	s           *convStep
	in, out     []float32
	planes, per int
}

func (j *phaseJob) Run(_, t int) {
	s := j.s
	st, ph, pw := s.stride, s.ph, s.pw
	if st == 2 && s.iw >= 2 {
		j.split2(t)
		return
	}
	for p := t * j.per; p < min(j.planes, (t+1)*j.per); p++ {
		src := j.in[p*s.ih*s.iw : (p+1)*s.ih*s.iw]
		for iy := range ph * st {
			py, r := iy%st, iy/st
			for px := range st {
				if !s.usedPhase[py*st+px] {
					continue // no kernel position reads it
				}
				d := j.out[((p*st+py)*st+px)*ph*pw+r*pw:][:pw]
				if iy >= s.ih {
					clear(d)
					continue
				}
				row := src[iy*s.iw+px : (iy+1)*s.iw]
				cnt := (len(row) + st - 1) / st
				if st == 2 {
					for c := range d[:cnt] {
						d[c] = row[2*c]
					}
				} else {
					for c := range d[:cnt] {
						d[c] = row[c*st]
					}
				}
				clear(d[cnt:])
			}
		}
	}
}

// split2 is Run for stride 2: a plane's rows of one parity split into
// both column phases in one call (a call per row had cost as much as the
// split on a 63-value row), then the odd phase's column past an odd
// width and the rows past the plane zeroed.
func (j *phaseJob) split2(t int) {
	s := j.s
	ph, pw := s.ph, s.pw
	for p := t * j.per; p < min(j.planes, (t+1)*j.per); p++ {
		src := j.in[p*s.ih*s.iw : (p+1)*s.ih*s.iw]
		for py := range 2 {
			if !s.usedPhase[py*2] && !s.usedPhase[py*2+1] {
				continue // no kernel position reads these rows
			}
			rows := (s.ih - py + 1) / 2
			d0 := j.out[((p*2+py)*2)*ph*pw:][:ph*pw]
			d1 := j.out[((p*2+py)*2+1)*ph*pw:][:ph*pw]
			if rows > 0 {
				gemm.Deinterleave2Rows(d0, d1, src[py*s.iw:], s.iw, rows, 2*s.iw, pw)
			}
			if s.iw%2 == 1 {
				for r := range rows {
					d1[r*pw+pw-1] = 0
				}
			}
			clear(d0[rows*pw:])
			clear(d1[rows*pw:])
		}
	}
}

// prepare computes, for the nw output columns from n0 on (column q is pixel
// q%npix of image q/npix), where each NR-wide panel starts and, when
// packing, its lane offsets and padding masks (one per kernel position:
// lane l reads input pixel (iy0+ky, ix0+kx) if it lies inside the image
// and l is a real column), which every K-block of the task then reuses.
func (s *convStep) prepare(ws *scratch, n0, nw int, packing bool) {
	const nr = gemm.NR
	kk := s.k * s.k
	npix := s.oh * s.ow
	imgStride := s.inC * s.inPlane()
	for p := 0; p*nr < nw; p++ {
		c0 := n0 + p*nr
		w := min(nr, nw-p*nr)
		pn := &ws.panels[p]
		*pn = gemm.PanelAt(c0, w, npix)
		img, pix := pn.Img, pn.Pix
		if !packing {
			continue // the caller only stores tiles
		}
		oy0, ox0 := pix/s.ow, pix%s.ow
		lanes := &ws.lanes[p]
		interior := w == nr
		oy, ox := oy0, ox0
		for l := range nr {
			iy0, ix0 := oy*s.stride-s.pad, ox*s.stride-s.pad
			interior = interior && iy0 >= 0 && iy0+s.k <= s.ih && ix0 >= 0 && ix0+s.k <= s.iw
			if s.layout == layoutGather {
				lanes[l] = int32(img*imgStride + iy0*s.iw + ix0)
			} else {
				lanes[l] = int32(img*imgStride + oy*s.ow + ox)
			}
			var wrapped bool
			if oy, ox, wrapped = s.next(oy, ox); wrapped {
				img++
			}
		}
		ws.contiguous[p] = s.layout != layoutGather && pn.Whole
		if interior {
			// Every lane reads the image at every kernel position.
			ws.maskOf[p] = ws.allOnes[:kk*nr]
			continue
		}
		// rowOK[ky][l] and colOK[kx][l] are -1 where lane l's input row
		// (column) at kernel offset ky (kx) is inside the image: worked
		// out for border panels only, most of a large map's are interior.
		var rowOK, colOK [maxKernel][nr]int32
		oy, ox = oy0, ox0
		for l := range nr {
			iy0, ix0 := oy*s.stride-s.pad, ox*s.stride-s.pad
			for ky := range s.k {
				if l < w && uint(iy0+ky) < uint(s.ih) {
					rowOK[ky][l] = -1
				}
			}
			for kx := range s.k {
				if uint(ix0+kx) < uint(s.iw) {
					colOK[kx][l] = -1
				}
			}
			oy, ox, _ = s.next(oy, ox)
		}
		masks := ws.masks[p*kk*nr : (p+1)*kk*nr]
		ws.maskOf[p] = masks
		for ky := range s.k {
			for kx := range s.k {
				m := masks[(ky*s.k+kx)*nr : (ky*s.k+kx+1)*nr]
				r, c := &rowOK[ky], &colOK[kx]
				for l := range m {
					m[l] = r[l] & c[l]
				}
			}
		}
	}
}

// next is the output pixel after (oy, ox) in raster order, and whether it
// is the next image's first.
func (s *convStep) next(oy, ox int) (int, int, bool) {
	if ox++; ox < s.ow {
		return oy, ox, false
	}
	if oy++; oy < s.oh {
		return oy, 0, false
	}
	return 0, 0, true
}

// pack writes rows [k0, k0+kc) of the task's implicit im2col matrix (nw
// columns, prepared by prepare) into NR-wide panels (the layout of
// gemm.PackB): row k is input channel k/(K*K) at kernel offset
// ((k%(K*K))/K, k%K), column n is output pixel n. src holds the group's
// input planes, or their phase planes (layoutPhases).
func (s *convStep) pack(dst, src []float32, ws *scratch, k0, kc, nw int) {
	const nr = gemm.NR
	g := &ws.gather
	g.Offs, g.Mask = s.kOff[k0:k0+kc], s.kMask[k0:k0+kc]
	for p := 0; p*nr < nw; p++ {
		g.Contiguous = ws.contiguous[p]
		g.Lanes = ws.lanes[p]
		g.Masks = ws.maskOf[p]
		gemm.PackGather(dst[p*nr*kc:(p+1)*nr*kc], src, g)
	}
}
