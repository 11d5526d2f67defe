package irexec

import (
	"goinfer/internal/engine/cpu/gemm"
)

// convSplit is how a GEMM convolution's tasks divide one group's output:
// nch ranges of NR-wide column panels by mch ranges of MR-row panels, the
// panels dealt out evenly (range i of c over p panels holds panels
// i*p/c..(i+1)*p/c), so that no range is a thin remainder; and, where kch
// > 1, the reduction into kch ranges of the weights' K-blocks, whose
// partial sums a second loop adds (see kSplit).
type convSplit struct{ nch, mch, kch int }

// Per-task costs of the split model in units of one MR x NR panel pair
// over the whole depth: packing a column panel of B for a task (its
// gather loads, against the MR-row kernel's FMAs), and a task's fixed
// costs (its masks and panel lanes, the hand-off).
const (
	splitPackCost = 0.5
	splitTaskCost = 1
	// splitGain is how much shorter the best split must make the loop
	// than the first-fit one to replace it: the model ignores memory
	// traffic.
	splitGain = 0.85
	// splitGainFew replaces splitGain below 4 workers, where a task more
	// for one worker than for the other is what the first fit loses: its
	// 3 x 3 tasks on a 14x14 map (EfficientNet-B0's 112->672 and
	// 80->480 expansions) or 7 column ranges on a 28x28 one ran at 88-89%
	// of two workers (TestSimThreads), an even count of tasks about as
	// thick at 99-100%, which the model prices only 8-12% below the first
	// fit (it charges the largest task's tail to both).
	splitGainFew = 0.95
	// splitMinWorkers is the fewest workers the model is used for.
	splitMinWorkers = 2
	// splitTail is the share of its largest task a split's makespan is
	// charged on top: tasks of one size still take uneven times (cache
	// misses, a worker that loses its core), and a late large one is
	// what the others wait for.
	splitTail = 0.5
)

// chooseConvSplit picks the split of a convolution with groups groups of
// np column panels and mp row panels for workers workers. The first-fit
// split adds column ranges, then row ranges, until there are
// tasksPerThread tasks per worker or tasks would get thinner than four
// panels each way; it balances where the task count is a multiple of the
// workers or several times it, but 16 workers over a 7x7 map's 86 row
// panels get 18 tasks of 5 panels, two rounds for two of them, and two
// workers over 9 tasks run 5 and 4. So, from splitMinWorkers on, every
// split of tasks about as thick is costed as
// dynamic scheduling would run it, and the cheapest replaces the first fit
// where it is clearly better (splitGain; on two or three workers
// splitGainFew).
func chooseConvSplit(groups, ntot, m, workers int, shared bool) convSplit {
	const nr, mr = gemm.NR, gemm.MR
	first := firstConvSplit(groups, ntot, m, workers)
	if workers < splitMinWorkers {
		return first
	}
	target := tasksPerThread * workers
	np, mp := (ntot+nr-1)/nr, (m+mr-1)/mr
	minN := (ntot + ncMax - 1) / ncMax // a task's columns fit its scratch
	// Tasks of at least four panels each way, as the first fit's, or two
	// where those leave workers without a task (a 7x7 map of 160
	// channels made 6 tasks for 16 workers).
	thin := 4
	if groups*first.nch*first.mch < workers {
		thin = 2
	}
	maxN, maxM := max(minN, ntot/(thin*nr)), max(1, m/(thin*mr))
	maxTasks := max(2*target, groups*first.nch*first.mch)
	firstCost := splitCost(groups, np, mp, first, workers, shared)
	best, bestCost := first, firstCost
	for nch := minN; nch <= maxN && groups*nch <= maxTasks; nch++ {
		for mch := 1; mch <= maxM && groups*nch*mch <= maxTasks; mch++ {
			c := convSplit{nch, mch, 1}
			cost := splitCost(groups, np, mp, c, workers, shared)
			// Of splits within 1%, the one of more tasks: it leaves
			// fewer workers idle.
			if cost < bestCost*0.99 || cost <= bestCost*1.01 && nch*mch > best.nch*best.mch {
				best, bestCost = c, cost
			}
		}
	}
	gain := splitGain
	if workers < 4 {
		gain = splitGainFew
	}
	if bestCost < firstCost*gain {
		return best
	}
	return first
}

// firstConvSplit is the first-fit split: column ranges, then row ranges,
// until there are tasksPerThread tasks per worker or tasks would get
// thinner than four panels each way.
func firstConvSplit(groups, ntot, m, workers int) convSplit {
	const nr, mr = gemm.NR, gemm.MR
	nch, mch := (ntot+ncMax-1)/ncMax, 1
	target := tasksPerThread * workers
split:
	for groups*nch*mch < target {
		switch {
		case ntot/(nch+1) >= 4*nr:
			nch++
		case m/(mch+1) >= 4*mr:
			mch++
		default:
			break split // tasks would get too thin
		}
	}
	nw, mw := roundUp((ntot+nch-1)/nch, nr), roundUp((m+mch-1)/mch, mr)
	return convSplit{nch: (ntot + nw - 1) / nw, mch: (m + mw - 1) / mw, kch: 1}
}

// splitCost is the makespan, in panel units, of split c's tasks taken in
// order by workers workers as each finishes its last, plus splitTail of
// its largest task.
func splitCost(groups, np, mp int, c convSplit, workers int, shared bool) float64 {
	s := newListSchedule(workers)
	for range groups {
		for jn := range c.nch {
			n := float64(evenRange(jn, c.nch, np))
			for jm := range c.mch {
				cost := n*float64(evenRange(jm, c.mch, mp)) + splitTaskCost
				if !shared || c.mch == 1 {
					cost += n * splitPackCost
				}
				s.add(cost)
			}
		}
	}
	return s.makespan()
}

// listSchedule models workers taking tasks in order, each task going to
// the worker that is free first (at most 64 workers are modelled).
type listSchedule struct {
	free         [64]float64
	w            int
	end, largest float64
}

func newListSchedule(workers int) listSchedule {
	return listSchedule{w: max(1, min(workers, 64))}
}

// add gives a task of cost to the earliest free worker.
func (s *listSchedule) add(cost float64) {
	k := 0
	for i := 1; i < s.w; i++ {
		if s.free[i] < s.free[k] {
			k = i
		}
	}
	s.free[k] += cost
	s.end = max(s.end, s.free[k])
	s.largest = max(s.largest, cost)
}

// makespan is when the last task ends, plus splitTail of the largest.
func (s *listSchedule) makespan() float64 { return s.end + splitTail*s.largest }

// evenRange is how many of p items range i of c holds when they are dealt
// out evenly.
func evenRange(i, c, p int) int { return (i+1)*p/c - i*p/c }

// convSplitFor is s's split on x's pool, worked out on first use (newExec
// asks for every convolution's).
func (x *Exec) convSplitFor(s *convStep) convSplit {
	if sp, ok := x.convSplits[s]; ok {
		return sp
	}
	if x.convSplits == nil {
		x.convSplits = map[*convStep]convSplit{}
	}
	ntot := s.n * s.oh * s.ow
	shared := !s.direct && s.groups*s.icg*s.kh*s.kw*roundUp(ntot, gemm.NR) <= len(x.sharedB)
	sp := chooseConvSplit(s.groups, ntot, s.ocg, x.pool.Size(), shared)
	if out := s.n * s.outC * s.oh * s.ow; !s.direct && s.groups == 1 && out > 0 {
		// Partial sums of all but the first K range go where a shared
		// packing of B would have been.
		maxK := 1 + len(x.sharedB)/out
		if ks := chooseKSplit(sp, ntot, s.ocg, s.a[0].Blocks(), maxK, x.pool.Size()); ks.kch > 1 {
			sp = ks
		}
	}
	x.convSplits[s] = sp
	return sp
}

// evenRange0 is where range i of c over p items dealt out evenly starts.
func evenRange0(i, c, p int) int { return i * p / c }
