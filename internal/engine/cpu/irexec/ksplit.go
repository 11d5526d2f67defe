package irexec

import (
	"goinfer/internal/engine/cpu/gemm"
	"goinfer/internal/engine/cpu/vec"
)

// A split of the reduction (K) gives many workers work where a
// convolution's output is small and its weights large: ResNet-18's stage
// 4 at batch 1 (512 x 49 outputs, 4608-deep) split by output rows alone
// makes 16 tasks of 5-6 row panels, each of which reads all of B (the
// 49 columns over the whole depth, 1.2 MB packed once and shared) for 32
// rows of weights: on 16 cores the tasks mostly move B between caches. Split
// into kch ranges of K-blocks, a task packs only its own range of B and
// reads only that range of its rows' weights; range 0 writes the output,
// the others partial sums that a second loop adds, with the epilogue
// (bias, residual, activation). The sum then runs in another order than
// one task's: the result differs from a one-thread run in the last bits.
const (
	// kSplitMinWorkers is the fewest workers the split model chooses a K
	// split for; below, it takes one row range and kSplitFewPerWorker K
	// ranges a worker.
	kSplitMinWorkers = 4
	// kSplitFewPerWorker is the K ranges per worker of a K split on two
	// or three workers: row ranges alone would give them work, but each
	// would read all of the shared B (1.2 MB for ResNet-18's stage 4, past
	// a Zen 5 core's L2); one row range reads it once. Three a worker, as
	// ResNet-18's stage 4 on two threads ran (three layers, step minima on
	// the 2-core VM: 3.3 ms row ranges, 2.2-2.3 ms one row range in 2 or 6
	// K ranges, 2.5-2.6 ms in 18), so that a worker that loses its core
	// holds up less.
	kSplitFewPerWorker = 3
	// kSplitReduceCost is the reduction loop, in panel units (see
	// splitCost): its hand-off and the partial sums it reads from other
	// cores.
	kSplitReduceCost = 2
	// kSplitSlack is how much dearer than the best split without one the
	// split model may cost a K split that is taken: the model counts
	// neither the shared B every task reads nor where it comes from.
	kSplitSlack = 1.1
	// kSplitMaxPanels is the most column panels a K split is used for:
	// beyond, column ranges give the workers work (14x14 maps at batch 1
	// ran slower split over K in the simulator, TestSimThreads).
	kSplitMaxPanels = 4
	// kSplitMaxRows is the most row ranges of a K split: each packs its
	// K range of B again.
	kSplitMaxRows = 4
)

// kSplitForce, when set (by the profiling tools), replaces the choice of
// K split for every pool size wherever the output is small enough for
// one: {0, 0} turns them off, else the given row ranges and K ranges
// (clamped to the panels and blocks).
var kSplitForce *[2]int

// chooseKSplit returns a split of the reduction for a one-group
// convolution whose split without one is sp (ntot columns, m rows, nb
// K-blocks, at most maxK ranges of partial sums that fit), or sp with
// kch == 1 where none pays. One applies where the output has at most
// kSplitMaxPanels column panels and sp's row ranges share B: on two or
// three workers always, on more where sp's tasks would read more columns
// of B than rows of weights each.
func chooseKSplit(sp convSplit, ntot, m, nb, maxK, workers int) convSplit {
	const nr, mr = gemm.NR, gemm.MR
	np, mp := (ntot+nr-1)/nr, (m+mr-1)/mr
	cols := (np + sp.nch - 1) / sp.nch * nr
	rows := (mp + sp.mch - 1) / sp.mch * mr
	maxK = min(maxK, nb)
	if maxK < 2 || sp.nch > 1 || np > kSplitMaxPanels {
		return sp
	}
	if f := kSplitForce; f != nil {
		if f[1] < 2 {
			return sp
		}
		return convSplit{nch: sp.nch, mch: max(1, min(f[0], mp)), kch: min(f[1], maxK)}
	}
	if workers < 2 || sp.mch == 1 {
		return sp // one task, or no B shared between tasks
	}
	if workers < kSplitMinWorkers {
		return fewKSplit(sp.nch, mp, nb, maxK, workers)
	}
	if rows >= cols {
		return sp
	}
	target := tasksPerThread * workers
	base := splitCost(1, np, mp, sp, workers, true)
	best, bestCost := sp, base*kSplitSlack
	for kch := 2; kch <= maxK; kch++ {
		for mch := 1; mch <= min(mp, kSplitMaxRows) && sp.nch*mch*kch <= 2*target; mch++ {
			c := convSplit{nch: sp.nch, mch: mch, kch: kch}
			cost := kSplitCost(np, mp, nb, c, workers)
			if cost < bestCost*0.99 || cost <= bestCost*1.01 && best.kch > 1 && mch*kch < best.mch*best.kch {
				best, bestCost = c, cost
			}
		}
	}
	return best
}

// fewKSplit is the K split on two or three workers: one row range in
// kSplitFewPerWorker K ranges a worker, unless those are unequal or not a
// multiple of the workers (9 K-blocks in 6 ranges of 1-2 blocks run 5:4
// on two workers: ResNet-18's 3x3 stride-2 conv into stage 4, 87% busy
// in TestSimThreads); then the fewest ranges of equal K-blocks, over as
// few row ranges as make the tasks a multiple of the workers (9 blocks:
// 2 row ranges x 3 K ranges), each row range packing its K range of B
// again.
func fewKSplit(nch, mp, nb, maxK, workers int) convSplit {
	even := func(c convSplit) bool { return nb%c.kch == 0 && (c.mch*c.kch)%workers == 0 }
	few := convSplit{nch: nch, mch: 1, kch: min(maxK, kSplitFewPerWorker*workers)}
	if even(few) {
		return few
	}
	for mch := 1; mch <= min(mp, workers); mch++ {
		for kch := 2; kch <= maxK; kch++ {
			if c := (convSplit{nch: nch, mch: mch, kch: kch}); even(c) && mch*kch >= 2*workers {
				return c
			}
		}
	}
	return few
}

// kSplitCost is splitCost for a K split: tasks of a K range pack their own
// range of B (each row range again), and the reduction loop follows.
func kSplitCost(np, mp, nb int, c convSplit, workers int) float64 {
	s := newListSchedule(workers)
	for jn := range c.nch {
		n := float64(evenRange(jn, c.nch, np))
		for jm := range c.mch {
			m := float64(evenRange(jm, c.mch, mp))
			for jk := range c.kch {
				depth := float64(evenRange(jk, c.kch, nb)) / float64(nb)
				s.add((n*m+n*splitPackCost)*depth + splitTaskCost)
			}
		}
	}
	return s.makespan() + kSplitReduceCost
}

// reduceJob adds a K split's partial sums into the output and applies the
// convolution's epilogue: one task per per output planes (image, channel).
type reduceJob struct {
	c           *convJob
	planes, per int
}

func (r *reduceJob) Run(_, t int) {
	j := r.c
	s := j.s
	npix := s.oh * s.ow
	size := len(j.parts) / (j.kch - 1)
	p0, p1 := t*r.per, min(r.planes, (t+1)*r.per)
	o := j.out[p0*npix : p1*npix]
	for jk := 1; jk < j.kch; jk++ {
		vec.Add(o, o, j.parts[(jk-1)*size+p0*npix:][:len(o)])
	}
	for p := p0; p < p1; p++ {
		o := j.out[p*npix : (p+1)*npix]
		var ep gemm.Epilogue
		ep.ReLU = s.act.relu()
		if s.bias != nil {
			ep.Bias = s.bias[p%s.outC:]
		}
		if j.res != nil {
			ep.Res, ep.LdRes = j.res[p*npix:], npix
		}
		gemm.ApplyEpilogue(o, npix, 1, npix, ep)
		if s.act.post() {
			s.act.apply(o)
		}
	}
}
