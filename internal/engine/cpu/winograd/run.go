package winograd

import (
	"fmt"
	"unsafe"

	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/engine/cpu/parallel"
	"goinfer/internal/hugepage"
)

// Layer is a convolution prepared for Winograd: geometry, transformed
// weights and the epilogue (bias, residual, ReLU).
type Layer struct {
	Conv
	W    *Weights
	Bias []float32 // K values, or nil
	ReLU bool
	// phased keeps the layer off the fused mode, and blockFloats, where
	// set, replaces defaultBlockFloats: tests cover the phased mode's
	// several blocks with them.
	phased      bool
	blockFloats int
}

// NewLayer prepares the convolution g with weights u (TransformWeights of
// its K x C x 3 x 3 weights; layers of one model at several batch sizes
// share them).
func NewLayer(g Conv, u *Weights, bias []float32, relu bool) (*Layer, error) {
	if g.N < 1 || g.C < 1 || g.K < 1 || g.IH < 1 || g.IW < 1 || g.OH < 1 || g.OW < 1 {
		return nil, fmt.Errorf("winograd: bad geometry %+v", g)
	}
	if bias != nil && len(bias) != g.K {
		return nil, fmt.Errorf("winograd: %d biases for %d channels", len(bias), g.K)
	}
	if int64(g.N)*int64(max(g.C*g.IH*g.IW, g.K*g.OH*g.OW)) >= 1<<31 {
		return nil, fmt.Errorf("winograd: %d images of %+v overflow 32-bit offsets", g.N, g)
	}
	if u.K != g.K || u.C != g.C {
		return nil, fmt.Errorf("winograd: weights of %d x %d channels for a %d x %d convolution", u.K, u.C, g.K, g.C)
	}
	return &Layer{Conv: g, W: u, Bias: bias, ReLU: relu}, nil
}

// defaultBlockFloats bounds the transformed input and GEMM output of one
// block of tiles (16 MiB) when a layer runs phase by phase (see Run).
const defaultBlockFloats = 4 << 20

// fusedMaxCK bounds the channel product of the layers that run fused:
// every task reads all of the transformed weights (36*C*K floats), which
// must stay in cache for the fused mode to pay (past 128 x 128 channels
// they are 9 MiB and the phased mode, whose GEMMs sweep many panels per
// weight block, is faster).
const fusedMaxCK = 128 * 128

// fusedPanels is the panels one task of the fused mode computes from input
// to output.
const fusedPanels = 1

// blockTiles is the tiles per block at batch n, a multiple of a panel.
func (l *Layer) blockTiles(n int) int {
	_, _, t := l.tiles(n)
	bf := defaultBlockFloats
	if l.blockFloats > 0 {
		bf = l.blockFloats
	}
	nb := max(lanes, bf/l.perTile()/lanes*lanes)
	return min(nb, (t+lanes-1)/lanes*lanes)
}

// perTile is the workspace floats per tile: the transformed input (later
// the column-transformed output), and the GEMM's output (which first holds
// the row-transformed input).
func (l *Layer) perTile() int { return l.vTile() + Points*max(l.C, l.K) }

// vTile is the floats per tile of the transformed input's region.
func (l *Layer) vTile() int { return max(Points*l.C, Out*Out*l.K) }

// pointPad is the floats between consecutive transform points' matrices
// in a block's transformed input and GEMM output (past their C or K rows of
// ld floats): without it the 36 points' lines of a tile panel lie a
// multiple of 4 KiB apart, all in one L1 cache set.
const pointPad = 16

// padFloats is the workspace the two padded regions add to a block.
const padFloats = 2 * Points * pointPad

// BufferFloats is the shared workspace Run needs for batches of up to n
// images.
func (l *Layer) BufferFloats(n int) int { return l.perTile()*l.blockTiles(n) + padFloats }

// WorkerFloats is the private workspace per worker Run needs in the fused
// mode (0 for a layer that never runs fused).
func (l *Layer) WorkerFloats() int {
	if l.C*l.K > fusedMaxCK {
		return 0
	}
	return l.perTile()*fusedPanels*lanes + padFloats
}

// Scratch is one instance's Winograd state: a panel and a private
// workspace per worker, the jobs and the shared workspace. It serves every
// layer of the instance in turn.
type Scratch struct {
	panels  []Panel
	buf     []float32
	private [][]float32
	fused   fusedJob
	inT     inTransformJob
	in      inputJob
	mul     gemmJob
	out     outputJob
	outT    outTransformJob
}

// NewScratch makes the state for a pool of workers, with buf (at least the
// largest BufferFloats of the layers it runs) as shared workspace and
// private floats (the largest WorkerFloats) per worker.
func NewScratch(workers int, buf []float32, private int) *Scratch {
	s := &Scratch{panels: make([]Panel, workers), buf: buf, private: make([][]float32, workers)}
	for w := range s.private {
		s.private[w] = hugepage.Float32s(private)
	}
	return s
}

// Bytes is the memory s holds besides its shared workspace.
func (s *Scratch) Bytes() int64 {
	n := int64(len(s.panels)) * int64(unsafe.Sizeof(Panel{}))
	for _, p := range s.private {
		n += 4 * int64(len(p))
	}
	return n
}

// block is a range of tiles [t0, t1) of a batch of n images in flight: np
// panels, whose transformed input v and GEMM output m hold ld = np*16
// floats per row, their transform points vs and ms floats apart.
type block struct {
	t0, t1, n, np, ld, vs, ms int
	v, m                      []float32
	// y (over v) holds the column-transformed output: per output channel
	// 16 rows (tile row r, column q) of ld floats.
	y []float32
}

func (l *Layer) newBlock(buf []float32, t0, t1, n int) block {
	np := (t1 - t0 + lanes - 1) / lanes
	ld := np * lanes
	vs, ms := l.C*ld+pointPad, l.K*ld+pointPad
	mOff := l.vTile()*ld + Points*pointPad
	return block{t0: t0, t1: t1, n: n, np: np, ld: ld, vs: vs, ms: ms,
		v: buf[:Points*vs], y: buf[:Out*Out*l.K*ld], m: buf[mOff : mOff+Points*(max(l.C, l.K)*ld+pointPad)]}
}

// Run computes the convolution of the n images of in (N x C x IH x IW,
// n <= N) into out (n x K x OH x OW), adding the bias and res (laid out as
// out, or nil) and applying ReLU, on pool's workers.
//
// With enough panels for every worker, each task takes a panel from input
// to output in its private workspace, which stays in its core's cache
// (fused mode). Otherwise blocks of tiles run phase by phase, each phase
// spread over the workers: input transform by rows, then by columns, the
// 36 GEMMs, the output transform.
func (l *Layer) Run(pool *parallel.Pool, s *Scratch, in, res, out []float32, n int) {
	if n < 1 || n > l.N || len(in) < n*l.C*l.IH*l.IW || len(out) < n*l.K*l.OH*l.OW ||
		res != nil && len(res) < len(out[:n*l.K*l.OH*l.OW]) || len(s.buf) < l.BufferFloats(n) || len(s.panels) < pool.Size() {
		panic(fmt.Sprintf("winograd: Run of %d images: bad operands (in %d, out %d, buf %d of %d)", n, len(in), len(out), len(s.buf), l.BufferFloats(n)))
	}
	_, _, total := l.tiles(n)
	panels := (total + lanes - 1) / lanes
	if w := l.WorkerFloats(); useAsm && !l.phased && w > 0 && panels >= 3*pool.Size() && len(s.private[0]) >= w {
		j := &s.fused
		j.s, j.l, j.src, j.res, j.dst, j.n, j.total = s, l, in, res, out, n, total
		pool.Run(j, (panels+fusedPanels-1)/fusedPanels)
		j.src, j.res, j.dst = nil, nil, nil
		return
	}
	nb := l.blockTiles(n)
	target := tasksPerWorker * pool.Size()
	for t0 := 0; t0 < total; t0 += nb {
		b := l.newBlock(s.buf, t0, min(total, t0+nb), n)
		if useAsm {
			// Channels are independent through the transforms: one job
			// over channel ranges does rows then columns.
			ij := &s.inT
			ij.l, ij.b, ij.src = l, &b, in
			ij.per = chunk(l.C, 1, target)
			pool.Run(ij, (l.C+ij.per-1)/ij.per)
		} else {
			ij := &s.in
			ij.s, ij.l, ij.b, ij.src = s, l, &b, in
			ij.per = chunk(l.C, b.np, target)
			pool.Run(ij, b.np*((l.C+ij.per-1)/ij.per))
		}
		mj := &s.mul
		mj.l, mj.b = l, &b
		mj.mch = gemmChunks(l.K, target, pool.Size())
		mj.mp = (l.K + gemm.MR - 1) / gemm.MR
		pool.Run(mj, Points*mj.mch)

		if useAsm {
			oj := &s.outT
			oj.s, oj.l, oj.b, oj.dst, oj.res = s, l, &b, out, res
			oj.per = chunk(l.K, 1, target)
			pool.Run(oj, (l.K+oj.per-1)/oj.per)
		} else {
			oj := &s.out
			oj.s, oj.l, oj.b, oj.dst, oj.res = s, l, &b, out, res
			oj.per = chunk(l.K, b.np, target)
			pool.Run(oj, b.np*((l.K+oj.per-1)/oj.per))
		}
	}
	s.outT.b, s.outT.dst, s.outT.res = nil, nil, nil
	s.inT.b, s.inT.src, s.in.b, s.in.src, s.mul.b, s.out.b, s.out.dst, s.out.res = nil, nil, nil, nil, nil, nil, nil, nil
}

// tasksPerWorker is how many tasks per worker a phase aims for.
const tasksPerWorker = 4

// chunk is the channels per task when np panels share c channels, aiming
// at target tasks of at least 8 channels, or 4 where 8 leave some of the
// target's workers idle (64 channels at batch 1 made 8 tasks for 16).
func chunk(c, np, target int) int {
	parts := min(max(1, (target+np-1)/np), max(1, c/8))
	if parts*np < target/tasksPerWorker {
		parts = min(max(1, (target+np-1)/np), max(1, c/4))
	}
	return (c + parts - 1) / parts
}

// tileRows returns the first tile row (counting the images' rows in turn)
// and the number of tile rows block b touches.
func (l *Layer) tileRows(b *block) (gr0, rows int) {
	_, tw, _ := l.tiles(1)
	return b.t0 / tw, (b.t1-1)/tw - b.t0/tw + 1
}

// rows applies the input transform along rows for tile row gr of block b,
// channels [c0, c0+nc). The row-transformed patches go to b.m: per channel
// 36 rows (patch row y, transform column j) of ld floats, one per tile.
func (l *Layer) rows(b *block, src []float32, gr, c0, nc int) {
	th, tw, _ := l.tiles(1)
	img, ty := gr/th, gr%th
	tRow := gr * tw // the row's first tile
	lo, hi := max(b.t0, tRow)-tRow, min(b.t1, tRow+tw)-tRow
	plane := l.IH * l.IW
	src = src[(img*l.C+c0)*plane:]
	var zero [5]uint16
	for tx0 := lo; tx0 < hi; tx0 += lanes {
		nl := min(hi-tx0, lanes)
		pos := tRow + tx0 - b.t0 // the first tile's lane in b.m's rows
		// Whole 8-lane halves are stored plainly, where a masked store is
		// slow (AVX2's VMASKMOVPS on AMD): the lanes past this row's
		// tiles, if they stay within the row, belong to the block's later
		// tile rows, which this task writes next (rows run in order, and
		// tasks split channels, not tiles), or to the unused lanes past
		// the block's tiles.
		wide := 1<<nl - 1
		if w := (nl + 7) &^ 7; pos+w <= b.ld {
			wide = 1<<w - 1
		}
		col0 := Out*tx0 - l.PL
		var masks [5]uint16
		for v := range masks {
			masks[v] = spanMask(-col0-lanes*v, l.IW-col0-lanes*v)
		}
		for y := range In {
			iy := Out*ty - l.PT + y
			m := &masks
			if iy < 0 || iy >= l.IH {
				m = &zero // a row of padding: nothing read
			}
			inputRows(src, iy*l.IW+col0, plane, nc, m, b.m, (c0*Points+y*In)*b.ld+pos, b.ld, wide)
		}
	}
}

// spanMask is the mask of the lanes e with lo <= e < hi.
func spanMask(lo, hi int) uint16 {
	lo, hi = max(lo, 0), min(hi, lanes)
	if lo >= hi {
		return 0
	}
	return uint16(1<<hi - 1<<lo)
}

// cols finishes the input transform along columns for panel p of block b,
// channels [c0, c0+nc), writing the GEMM's B panels.
func (l *Layer) cols(b *block, p, c0, nc int) {
	inputCols(b.m[c0*Points*b.ld+p*lanes:], b.ld, nc, b.v[(p*l.C+c0)*lanes:], b.vs)
}

// gather is the input transform of panel p, lane by lane (the Go path).
func (l *Layer) gather(b *block, src []float32, pn *Panel, p, c0, nc int) {
	l.prepare(pn, b.t0+p*lanes, b.n)
	plane := l.IH * l.IW
	inputGo(src[c0*plane:], plane, pn, nc, b.v[(p*l.C+c0)*lanes:], b.vs)
}

// runPanels is the most panels of tiles mul runs through one KernelRun
// call per K-block: a small map's at batch 1, whose B panels stay in L2.
const runPanels = 8

// mul runs the GEMM of transform point pt for output channels [m0, m1)
// over all of block b's tiles.
func (l *Layer) mul(b *block, pt, m0, m1 int) {
	const mr = gemm.MR
	ld := b.ld
	a := l.W.U[pt]
	vb := b.v[pt*b.vs : pt*b.vs+l.C*ld]
	mb := b.m[pt*b.ms : pt*b.ms+l.K*ld]
	if b.np <= runPanels {
		// A few panels of tiles (a small map at batch 1): the
		// transformed weights stream from memory once; one KernelRun
		// per K-block over all rows and panels reuses each group of
		// them from L1 across the panels and fetches its successor, and
		// the next block's rows, ahead.
		ip := m0 / mr
		np := (m1 - ip*mr + mr - 1) / mr
		for kb := range a.Blocks() {
			k0, kc := a.BlockK(kb)
			tile := gemm.Tile{C: mb[ip*mr*ld:], Ld: ld, Rows: m1 - ip*mr, Cols: b.np * lanes, Split: b.np * lanes, Load: kb > 0}
			if kb+1 < a.Blocks() {
				_, kn := a.BlockK(kb + 1)
				tile.Next = a.PanelRun(kb+1, ip)[:np*mr*kn]
			}
			gemm.KernelRun(np, kc, a.PanelRun(kb, ip), mr*kc, vb[k0*lanes:], lanes, l.C*lanes, b.np, &tile)
		}
		return
	}
	wide := gemm.WidePanels()
	for kb := range a.Blocks() {
		k0, kc := a.BlockK(kb)
		for p := range b.np {
			bpan := vb[(p*l.C+k0)*lanes : (p*l.C+k0+kc)*lanes]
			for ip := m0 / mr; ip*mr < m1; {
				np := min(wide, (m1-ip*mr+mr-1)/mr)
				rows := min(np*mr, m1-ip*mr)
				tile := gemm.Tile{C: mb[ip*mr*ld+p*lanes:], Ld: ld, Rows: rows, Cols: lanes, Split: lanes, Load: kb > 0}
				gemm.KernelPanels(np, kc, a.PanelRun(kb, ip), mr*kc, bpan, &tile)
				ip += np
			}
		}
	}
}

// output transforms panel p of block b back, output channels [k0, k0+nk),
// into dst with the epilogue.
func (l *Layer) output(b *block, pn *Panel, dst, res []float32, p, k0, nk int) {
	l.prepare(pn, b.t0+p*lanes, b.n)
	plane := l.OH * l.OW
	flags := 0
	var bias []float32
	if l.Bias != nil {
		flags |= flagBias
		bias = l.Bias[k0:]
	}
	if res != nil {
		flags |= flagRes
		res = res[k0*plane:]
	}
	if l.ReLU {
		flags |= flagReLU
	}
	outputGo(b.m[k0*b.ld+p*lanes:], b.ms, b.ld, nk, dst[k0*plane:], res, plane, pn, bias, flags)
}

// fusedJob computes fusedPanels panels per task, input to output, in the
// worker's private workspace.
type fusedJob struct {
	s             *Scratch
	l             *Layer
	src, res, dst []float32
	n, total      int
}

func (j *fusedJob) Run(w, t int) {
	l := j.l
	t0 := t * fusedPanels * lanes
	b := l.newBlock(j.s.private[w], t0, min(j.total, t0+fusedPanels*lanes), j.n)
	l.inTransform(&b, j.src, 0, l.C)
	for pt := range Points {
		l.mul(&b, pt, 0, l.K)
	}
	l.outTransform(&b, &j.s.panels[w], j.dst, j.res, 0, l.K)
}

// subChunk is the channels the transforms take through both passes at a
// time, so that the intermediate rows stay in cache.
const subChunk = 4

// inTransform transforms channels [c0, c0+nc) of block b's input: rows,
// then columns, subChunk channels at a time.
func (l *Layer) inTransform(b *block, src []float32, c0, nc int) {
	gr0, rows := l.tileRows(b)
	for c := c0; c < c0+nc; c += subChunk {
		n := min(subChunk, c0+nc-c)
		for gr := gr0; gr < gr0+rows; gr++ {
			l.rows(b, src, gr, c, n)
		}
		for p := range b.np {
			l.cols(b, p, c, n)
		}
	}
}

// outTransform transforms output channels [k0, k0+nk) of block b back
// into dst with the epilogue: columns, then rows, subChunk channels at a
// time.
func (l *Layer) outTransform(b *block, pn *Panel, dst, res []float32, k0, nk int) {
	gr0, rows := l.tileRows(b)
	for k := k0; k < k0+nk; k += subChunk {
		n := min(subChunk, k0+nk-k)
		for p := range b.np {
			l.outCols(b, pn, p, k, n)
		}
		for gr := gr0; gr < gr0+rows; gr++ {
			l.outRows(b, dst, res, gr, k, n)
		}
	}
}

// inTransformJob runs inTransform: one task per channel range.
type inTransformJob struct {
	l   *Layer
	b   *block
	src []float32
	per int
}

func (j *inTransformJob) Run(_, t int) {
	c0 := t * j.per
	j.l.inTransform(j.b, j.src, c0, min(j.per, j.l.C-c0))
}

// inputJob runs gather: one task per panel and channel range.
type inputJob struct {
	s   *Scratch
	l   *Layer
	b   *block
	src []float32
	per int
}

func (j *inputJob) Run(w, t int) {
	nchunk := (j.l.C + j.per - 1) / j.per
	c0 := (t % nchunk) * j.per
	j.l.gather(j.b, j.src, &j.s.panels[w], t/nchunk, c0, min(j.per, j.l.C-c0))
}

// gemmJob runs mul: one task per transform point and output channel range.
// Each point's mp row panels are dealt out evenly to mch ranges.
type gemmJob struct {
	l       *Layer
	b       *block
	mp, mch int
}

func (j *gemmJob) Run(_, t int) {
	r := t % j.mch
	m0, m1 := r*j.mp/j.mch*gemm.MR, min(j.l.K, (r+1)*j.mp/j.mch*gemm.MR)
	j.l.mul(j.b, t/j.mch, m0, m1)
}

// gemmChunks is how many ranges of output channels each transform point's
// GEMM is split into for workers workers: enough for target tasks, and up
// to twice that where more fill the workers' last round better (36 points
// in 2 ranges are 72 tasks, four and a half rounds for 16 workers; in 4,
// nine), each range at least 4*MR channels.
func gemmChunks(k, target, workers int) int {
	first := (target + Points - 1) / Points
	most := max(1, (k+4*gemm.MR-1)/(4*gemm.MR))
	best, bestEff := min(first, most), 0.0
	for m := best; m <= min(most, 2*first); m++ {
		tasks := Points * m
		eff := float64(tasks) / float64(workers*((tasks+workers-1)/workers))
		if eff > bestEff+1e-9 {
			best, bestEff = m, eff
		}
	}
	return best
}

// outputJob runs output: one task per panel and output channel range.
type outputJob struct {
	s        *Scratch
	l        *Layer
	b        *block
	dst, res []float32
	per      int
}

func (j *outputJob) Run(w, t int) {
	nchunk := (j.l.K + j.per - 1) / j.per
	k0 := (t % nchunk) * j.per
	j.l.output(j.b, &j.s.panels[w], j.dst, j.res, t/nchunk, k0, min(j.per, j.l.K-k0))
}

// outCols applies the output transform to panel p of block b, output
// channels [k0, k0+nk), into b.y.
func (l *Layer) outCols(b *block, pn *Panel, p, k0, nk int) {
	outputCols(b.m[k0*b.ld+p*lanes:], b.ms, b.ld, nk, b.y[k0*Out*Out*b.ld+p*lanes:], pn)
}

// outRows writes the outputs of block b's tiles in tile row gr, output
// channels [k0, k0+nk), from b.y to dst, row by row, with the epilogue.
func (l *Layer) outRows(b *block, dst, res []float32, gr, k0, nk int) {
	th, tw, _ := l.tiles(1)
	img, ty := gr/th, gr%th
	tRow := gr * tw
	lo, hi := max(b.t0, tRow)-tRow, min(b.t1, tRow+tw)-tRow
	plane := l.OH * l.OW
	flags := 0
	var bias []float32
	if l.Bias != nil {
		flags |= flagBias
		bias = l.Bias[k0:]
	}
	if res != nil {
		flags |= flagRes
	}
	if l.ReLU {
		flags |= flagReLU
	}
	for tx0 := lo; tx0 < hi; tx0 += lanes {
		nl := min(hi-tx0, lanes)
		col0 := Out * tx0
		end := min(Out*(tx0+nl), l.OW)
		var masks [4]uint16
		for v := range masks {
			masks[v] = spanMask(-col0-lanes*v, end-col0-lanes*v)
		}
		for r := range Out {
			oy := Out*ty + r
			if oy >= l.OH {
				break
			}
			y := b.y[(k0*Out*Out+r*Out)*b.ld+tRow+tx0-b.t0:]
			outputRows(y, b.ld, nk, 1<<nl-1, dst, ((img*l.K+k0)*l.OH+oy)*l.OW+col0, res, plane, &masks, bias, flags)
		}
	}
}

// outTransformJob runs outTransform: one task per output channel range.
type outTransformJob struct {
	s        *Scratch
	l        *Layer
	b        *block
	dst, res []float32
	per      int
}

func (j *outTransformJob) Run(w, t int) {
	k0 := t * j.per
	j.l.outTransform(j.b, &j.s.panels[w], j.dst, j.res, k0, min(j.per, j.l.K-k0))
}
