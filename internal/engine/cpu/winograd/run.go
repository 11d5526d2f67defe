package winograd

import (
	"fmt"
	"unsafe"

	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/engine/cpu/parallel"
)

// Layer is a convolution prepared for Winograd: geometry, transformed
// weights and the epilogue (bias, residual, ReLU).
type Layer struct {
	Conv
	W    *Weights
	Bias []float32 // K values, or nil
	ReLU bool
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

// blockFloats bounds the transformed input and GEMM output of one block of
// tiles (16 MiB): a layer's tiles are processed block by block so that
// both stay in the last-level cache between the three passes. A variable
// for tests.
var blockFloats = 4 << 20

// blockTiles is the tiles per block at batch n, a multiple of a panel.
func (l *Layer) blockTiles(n int) int {
	_, _, t := l.tiles(n)
	nb := max(lanes, blockFloats/(Points*(l.C+l.K))/lanes*lanes)
	return min(nb, (t+lanes-1)/lanes*lanes)
}

// BufferFloats is the workspace Run needs for batches of up to n images.
func (l *Layer) BufferFloats(n int) int { return Points * (l.C + l.K) * l.blockTiles(n) }

// Scratch is one instance's Winograd state: a panel per worker, the jobs
// and the workspace. It serves every layer of the instance in turn.
type Scratch struct {
	panels []Panel
	buf    []float32
	in     inputJob
	mul    gemmJob
	out    outputJob
}

// NewScratch makes the state for a pool of workers, with buf (at least the
// largest BufferFloats of the layers it runs) as workspace.
func NewScratch(workers int, buf []float32) *Scratch {
	s := &Scratch{panels: make([]Panel, workers), buf: buf}
	s.in.s, s.out.s = s, s
	return s
}

// Bytes is the memory s holds besides its workspace.
func (s *Scratch) Bytes() int64 { return int64(len(s.panels)) * int64(unsafe.Sizeof(Panel{})) }

// Run computes the convolution of the n images of in (N x C x IH x IW,
// n <= N) into out (n x K x OH x OW), adding the bias and res (laid out as
// out, or nil) and applying ReLU, on pool's workers.
func (l *Layer) Run(pool *parallel.Pool, s *Scratch, in, res, out []float32, n int) {
	if n < 1 || n > l.N || len(in) < n*l.C*l.IH*l.IW || len(out) < n*l.K*l.OH*l.OW ||
		res != nil && len(res) < len(out[:n*l.K*l.OH*l.OW]) || len(s.buf) < l.BufferFloats(n) || len(s.panels) < pool.Size() {
		panic(fmt.Sprintf("winograd: Run of %d images: bad operands (in %d, out %d, buf %d of %d)", n, len(in), len(out), len(s.buf), l.BufferFloats(n)))
	}
	_, _, total := l.tiles(n)
	nb := l.blockTiles(n)
	target := 4 * pool.Size()
	for t0 := 0; t0 < total; t0 += nb {
		np := (min(nb, total-t0) + lanes - 1) / lanes
		ld := np * lanes
		v := s.buf[:Points*l.C*ld]
		m := s.buf[Points*l.C*ld : Points*(l.C+l.K)*ld]

		ij := &s.in
		ij.l, ij.src, ij.v, ij.t0, ij.n, ij.np = l, in, v, t0, n, np
		ij.per = chunk(l.C, np, target)
		pool.Run(ij, np*((l.C+ij.per-1)/ij.per))

		mj := &s.mul
		mj.l, mj.v, mj.m, mj.np = l, v, m, np
		mch := min((target+Points-1)/Points, (l.K+4*gemm.MR-1)/(4*gemm.MR))
		mj.mw = (l.K + mch - 1) / mch
		mj.mw = (mj.mw + gemm.MR - 1) / gemm.MR * gemm.MR
		mj.mch = (l.K + mj.mw - 1) / mj.mw
		pool.Run(mj, Points*mj.mch)

		oj := &s.out
		oj.l, oj.m, oj.dst, oj.res, oj.t0, oj.n, oj.np = l, m, out, res, t0, n, np
		oj.per = chunk(l.K, np, target)
		pool.Run(oj, np*((l.K+oj.per-1)/oj.per))
	}
	s.in.src, s.in.v, s.mul.v, s.mul.m, s.out.m, s.out.dst, s.out.res = nil, nil, nil, nil, nil, nil, nil
}

// chunk is the channels per task when np panels share c channels, aiming
// at target tasks of at least 8 channels.
func chunk(c, np, target int) int {
	parts := min(max(1, (target+np-1)/np), max(1, c/8))
	return (c + parts - 1) / parts
}

// inputJob transforms a block's input: one task per panel and channel
// range.
type inputJob struct {
	s         *Scratch
	l         *Layer
	src, v    []float32
	t0, n, np int
	per       int
}

func (j *inputJob) Run(w, t int) {
	l := j.l
	nchunk := (l.C + j.per - 1) / j.per
	p, c0 := t/nchunk, (t%nchunk)*j.per
	nc := min(j.per, l.C-c0)
	pn := &j.s.panels[w]
	l.prepare(pn, j.t0+p*lanes, j.n)
	plane := l.IH * l.IW
	input(j.src[c0*plane:], plane, pn, nc, j.v[(p*l.C+c0)*lanes:], l.C*j.np*lanes)
}

// gemmJob multiplies the transformed weights and input: one task per
// transform point and range of output channels.
type gemmJob struct {
	l       *Layer
	v, m    []float32
	np      int
	mw, mch int
}

func (j *gemmJob) Run(_, t int) {
	const mr = gemm.MR
	l := j.l
	pt, r := t/j.mch, t%j.mch
	m0 := r * j.mw
	m1 := min(l.K, m0+j.mw)
	ld := j.np * lanes
	a := l.W.U[pt]
	vb := j.v[pt*l.C*ld : (pt+1)*l.C*ld]
	mb := j.m[pt*l.K*ld : (pt+1)*l.K*ld]
	wide := gemm.WidePanels()
	for kb := range a.Blocks() {
		k0, kc := a.BlockK(kb)
		for p := range j.np {
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

// outputJob transforms a block's GEMM results to the output: one task per
// panel and output channel range.
type outputJob struct {
	s           *Scratch
	l           *Layer
	m, dst, res []float32
	t0, n, np   int
	per         int
}

func (j *outputJob) Run(w, t int) {
	l := j.l
	nchunk := (l.K + j.per - 1) / j.per
	p, k0 := t/nchunk, (t%nchunk)*j.per
	nk := min(j.per, l.K-k0)
	pn := &j.s.panels[w]
	l.prepare(pn, j.t0+p*lanes, j.n)
	plane := l.OH * l.OW
	ld := j.np * lanes
	flags := 0
	var bias, res []float32
	if l.Bias != nil {
		flags |= flagBias
		bias = l.Bias[k0:]
	}
	if j.res != nil {
		flags |= flagRes
		res = j.res[k0*plane:]
	}
	if l.ReLU {
		flags |= flagReLU
	}
	output(j.m[k0*ld+p*lanes:], l.K*ld, ld, nk, j.dst[k0*plane:], res, plane, pn, bias, flags)
}
