package irexec

import (
	"fmt"
	"sync"
	"testing"

	"goinfer/internal/engine/cpu/parallel"
)

// rangeLog records the ranges parRange hands out.
type rangeLog struct {
	mu     sync.Mutex
	ranges map[int]int // lo -> hi
}

func (l *rangeLog) rng(_ *Exec, _, lo, hi int) {
	l.mu.Lock()
	l.ranges[lo] = hi
	l.mu.Unlock()
}

// TestParRange: the tasks cover [0, n) once, start on whole grains, hold
// grains that differ by at most one between tasks (only the last may be
// short of a grain), and number about four per worker, or one per grain
// where grains are fewer.
func TestParRange(t *testing.T) {
	for _, c := range []struct{ n, grain, workers, tasks int }{
		{42, 1, 2, 6}, // 672 channels of a 14x14 depthwise: 6 tasks of 7, not 7 of 6
		{12, 1, 2, 6}, // 6 of 2, not 8 of 1 or 2
		{76, 1, 2, 8}, // 8 of 9 or 10, not 4 of 19
		{13, 1, 2, 8},
		{14, 1, 2, 14}, // a 7x7 stem's strips: 14 of 1, not 8 of 1 or 2
		{20, 1, 2, 10},
		{6, 1, 2, 6},
		{1, 1, 2, 1},
		{100, 16, 2, 7},
		{1000, 16, 2, 8},
		{1001, 16, 3, 9}, // 63 grains: 9 tasks of 7
		{9, 1, 3, 9},
		{5, 8, 2, 1},
		{40000, 16, 16, 64},
		{1152, 64, 16, 18},
		{512, 64, 16, 16}, // quarter grains where whole ones leave workers idle
	} {
		t.Run(fmt.Sprint(c.n, c.grain, c.workers), func(t *testing.T) {
			x := &Exec{pool: parallel.New(c.workers)}
			defer x.pool.Close()
			x.rjob.x = x
			l := &rangeLog{ranges: map[int]int{}}
			x.parRange(l, c.n, c.grain)
			if len(l.ranges) != c.tasks {
				t.Errorf("%d tasks, want %d", len(l.ranges), c.tasks)
			}
			minG, maxG := c.n, 0
			for lo := 0; lo < c.n; {
				hi, ok := l.ranges[lo]
				if !ok || hi <= lo {
					t.Fatalf("no task from %d (tasks %v)", lo, l.ranges)
				}
				if hi < c.n {
					g := x.rjob.grain
					if lo%g != 0 || (hi-lo)%g != 0 {
						t.Errorf("task [%d, %d) not in whole grains of %d", lo, hi, g)
					}
					minG, maxG = min(minG, (hi-lo)/g), max(maxG, (hi-lo)/g)
				}
				lo = hi
			}
			if maxG > 0 && maxG-minG > 1 {
				t.Errorf("tasks of %d to %d grains", minG, maxG)
			}
		})
	}
}
