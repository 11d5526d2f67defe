package cuda

import (
	"fmt"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
)

// goinfer.cu's conv_mma runs a convolution as an implicit GEMM on the
// tensor cores with its reduction split over several blocks, for the small
// problems (batch 1, small maps) where cuDNN's kernels leave most SMs idle.
// The tuner times it beside cuDNN's calls and keeps it only where it is
// faster (tuneFused).

const (
	// mmaTile is the kernel's tile of GEMM rows (output pixels) and of
	// columns (output channels); mmaChunk the elements of one reduction
	// step (consecutive taps and channels of one filter row).
	mmaTile  = 64
	mmaChunk = 32
	// mmaThreads is the kernel's block size (launch bounds).
	mmaThreads = 256
	// mmaMaxRows bounds the problems the tuner tries the kernel on: past
	// about ten thousand output pixels (a 224-pixel ResNet's stem at batch
	// 1 has 12,544) cuDNN fills the GPU by itself, and timing more
	// candidates would only lengthen the compile.
	mmaMaxRows = 16384
	// mmaCounters is the number of tile counters (one word each) and
	// mmaPartBytes the float32 sums' space of split launches, per instance.
	mmaCounters  = 4096
	mmaPartBytes = 8 << 20
)

// mmaGeom is one launch of conv_mma: tiles blocks along x, splits along y,
// each split reducing chunks steps of mmaChunk channels.
type mmaGeom struct {
	tiles, splits, chunks int
}

// mmaProblem is a convolution as conv_mma sees it.
type mmaProblem struct {
	n, c, h, w, outC, outH, outW, k, stride, pad, groups int
}

func (p mmaProblem) rows() int   { return p.n * p.outH * p.outW }
func (p mmaProblem) chunks() int { return p.k * p.k * p.c / mmaChunk }

// tiles is the number of mmaTile x mmaTile output tiles: the grid's x.
func (p mmaProblem) tiles() int { return (p.rows() + mmaTile - 1) / mmaTile * (p.outC / mmaTile) }

// mmaEligible reports whether conv_mma runs p at precision prec: 16-bit
// channels-last tensors, no groups, filter rows in whole chunks with
// channels in 16-byte pieces, output channels in whole tiles, and a
// problem small enough to be worth trying.
func mmaEligible(prec precision, p mmaProblem) bool {
	if prec.p != engine.FP16 && prec.p != engine.BF16 || !prec.nhwc {
		return false
	}
	return p.groups == 1 && p.k >= 1 && p.c%8 == 0 && p.k*p.c%mmaChunk == 0 && p.outC%mmaTile == 0 &&
		p.rows() > 0 && p.rows() <= mmaMaxRows
}

// mmaCandidates returns the launches the tuner times for p on a GPU of sms
// multiprocessors: no split, and splits from the count that puts about one
// block on every SM to four times that, each split at least two reduction
// steps long, where the sums fit mmaPartBytes.
func mmaCandidates(p mmaProblem, sms int) []mmaGeom {
	tiles, total := p.tiles(), p.chunks()
	out := []mmaGeom{{tiles: tiles, splits: 1, chunks: total}}
	if tiles > mmaCounters || total < 4 || int64(p.rows())*int64(p.outC)*4 > mmaPartBytes {
		return out
	}
	base := max(1, (sms+tiles-1)/tiles)
	seen := map[int]bool{1: true}
	for _, want := range []int{base, 2 * base, 4 * base} {
		want = min(want, total/2)
		if want < 2 {
			continue
		}
		chunks := (total + want - 1) / want
		splits := (total + chunks - 1) / chunks // no empty split
		if seen[splits] {
			continue
		}
		seen[splits] = true
		out = append(out, mmaGeom{tiles: tiles, splits: splits, chunks: chunks})
	}
	return out
}

// mmaArgs fills a's arguments for conv_mma over p: input x, filter w,
// float32 bias, residual z (or 0), output y and the instance's counters
// and partials.
func mmaArgs(a *cu.KernelArgs, p mmaProblem, g mmaGeom, x, w, bias, z, y, counters, part cu.DevPtr, relu bool) {
	a.Reset().Ptr(x).Ptr(w).Ptr(bias).Ptr(z).Ptr(y).Ptr(part).Ptr(counters).
		Int(p.h).Int(p.w).Int(p.c).Int(p.outH).Int(p.outW).Int(p.outC).Int(p.k).Int(p.stride).Int(p.pad).
		Int(p.rows()).Int(g.chunks).Int(b2i(relu))
}

// mmaProblemOf is planOp o's convolution as conv_mma sees it.
func mmaProblemOf(o *planOp) mmaProblem {
	l := o.l
	return mmaProblem{n: o.n, c: l.in.C, h: l.in.H, w: l.in.W, outC: l.node.Conv.OutC, outH: l.out.H, outW: l.out.W,
		k: l.k, stride: l.stride, pad: l.pad, groups: l.node.Conv.Groups}
}

// initMMA allocates conv_mma's scratch and zeroes it: the counters and
// the sums start at zero, and every launch leaves them so.
func (i *instance) initMMA() error {
	sms, err := i.d.rt.DeviceAttribute(cu.AttrMultiProcessorCount, i.d.ordinal)
	if err != nil {
		return err
	}
	i.sms = sms
	if i.mmaScratch, err = i.d.alloc(mmaCounters*4+mmaPartBytes, "the split convolutions' scratch"); err != nil {
		return err
	}
	return i.d.rt.MemsetAsync(i.mmaScratch, 0, mmaCounters*4+mmaPartBytes, i.stream)
}

// mmaLaunchArgs returns conv_mma's arguments for o under g.
func (i *instance) mmaLaunchArgs(o *planOp, g mmaGeom) *cu.KernelArgs {
	a := new(cu.KernelArgs)
	mmaArgs(a, mmaProblemOf(o), g, o.x, o.l.w, o.l.biasF32, o.z, o.y, i.mmaScratch, i.mmaScratch+mmaCounters*4, o.l.spec.relu)
	return a
}

// tuneMMA times conv_mma's candidate launches for o (reps calls per timing,
// as timeCalls does), logging each, and returns the fastest, or false where
// conv_mma does not run o.
func (i *instance) tuneMMA(o *planOp, reps int, log *[]string) (mmaGeom, float32, bool) {
	p := mmaProblemOf(o)
	exp := i.m.opts.GraphExperiments
	if i.mmaScratch == 0 || o.l.biasF32 == 0 || !mmaEligible(i.m.prec, p) || hasExperiment(exp, "nomma") {
		return mmaGeom{}, 0, false
	}
	cands := mmaCandidates(p, i.sms)
	if hasExperiment(exp, "mmanosplit") {
		cands = cands[:1]
	}
	var best mmaGeom
	bestT := float32(-1)
	for _, g := range cands {
		a := i.mmaLaunchArgs(o, g)
		t, err := i.timeCalls(func() error {
			return i.drv.Launch2D(i.m.kern.convMMA, g.tiles, g.splits, mmaThreads, i.stream, a)
		}, reps)
		if err != nil {
			*log = append(*log, fmt.Sprintf("conv_mma split %d: %v", g.splits, err))
			continue
		}
		*log = append(*log, fmt.Sprintf("conv_mma split %d %.4f ms", g.splits, t))
		if bestT < 0 || t < bestT {
			best, bestT = g, t
		}
	}
	return best, bestT, bestT >= 0
}

// applyMMA makes o run as conv_mma with c's split.
func (i *instance) applyMMA(o *planOp, c tuned) error {
	p := mmaProblemOf(o)
	if i.mmaScratch == 0 || !mmaEligible(i.m.prec, p) || c.chunks <= 0 {
		return fmt.Errorf("cuda engine: %s: a split convolution was chosen for a problem it does not run", o.l.name)
	}
	g := mmaGeom{tiles: p.tiles(), splits: c.splits, chunks: c.chunks}
	if (p.chunks()+g.chunks-1)/g.chunks != g.splits ||
		g.splits > 1 && (g.tiles > mmaCounters || int64(p.rows())*int64(p.outC)*4 > mmaPartBytes) {
		return fmt.Errorf("cuda engine: %s: split %d x %d does not fit the problem", o.l.name, c.splits, c.chunks)
	}
	o.fused, o.epilogue, o.mma, o.mmaArgs = false, false, &g, i.mmaLaunchArgs(o, g)
	return nil
}
