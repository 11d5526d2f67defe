package parallel

import (
	"sync/atomic"
	"testing"
)

// countJob counts how often each task runs and checks worker indices.
type countJob struct {
	t       *testing.T
	size    int
	runs    []atomic.Int32
	workers []atomic.Int32
}

func (j *countJob) Run(w, task int) {
	if w < 0 || w >= j.size {
		j.t.Errorf("worker %d outside [0, %d)", w, j.size)
		return
	}
	j.runs[task].Add(1)
	j.workers[w].Add(1)
}

func TestRunEveryTaskOnce(t *testing.T) {
	for _, size := range []int{1, 2, 5} {
		p := New(size)
		if p.Size() != size {
			t.Errorf("Size() = %d, want %d", p.Size(), size)
		}
		for _, tasks := range []int{0, 1, 3, 100} {
			for rep := 0; rep < 3; rep++ { // the pool is reused
				j := &countJob{t: t, size: size, runs: make([]atomic.Int32, tasks), workers: make([]atomic.Int32, size)}
				p.Run(j, tasks)
				for i := range j.runs {
					if n := j.runs[i].Load(); n != 1 {
						t.Fatalf("size %d, %d tasks: task %d ran %d times", size, tasks, i, n)
					}
				}
			}
		}
		p.Close()
	}
	if New(0).Size() != 1 {
		t.Error("New(0) does not have one worker")
	}
}

func TestRunAllocatesNothing(t *testing.T) {
	p := New(3)
	defer p.Close()
	j := &countJob{t: t, size: 3, runs: make([]atomic.Int32, 64), workers: make([]atomic.Int32, 3)}
	if n := testing.AllocsPerRun(50, func() { p.Run(j, 64) }); n != 0 {
		t.Errorf("Run allocates %v times", n)
	}
}
