package parallel

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
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

// sleepJob holds each task for a while so that helpers get to take some.
type sleepJob struct {
	d       time.Duration
	workers []atomic.Int32
}

func (j *sleepJob) Run(w, _ int) {
	j.workers[w].Add(1)
	time.Sleep(j.d)
}

// TestHelpersTakeTasks checks that a job long enough for helpers to wake is
// shared: the pool is not the caller alone.
func TestHelpersTakeTasks(t *testing.T) {
	p := New(3)
	defer p.Close()
	j := &sleepJob{d: time.Millisecond, workers: make([]atomic.Int32, 3)}
	p.Run(j, 60)
	if n := j.workers[1].Load() + j.workers[2].Load(); n == 0 {
		t.Errorf("helpers took none of 60 tasks of 1 ms (caller %d)", j.workers[0].Load())
	}
}

// TestRunSequences runs jobs back to back with task counts that leave
// helpers idle, late (the caller finishes alone and closes the job before
// they arrive) or parked, with pauses that let helpers finish spinning and
// park in between; every task must run exactly once per job.
func TestRunSequences(t *testing.T) {
	p := New(4)
	defer p.Close()
	for i := range 300 {
		tasks := []int{2, 3, 1, 7, 64, 2, 4}[i%7]
		j := &countJob{t: t, size: 4, runs: make([]atomic.Int32, tasks), workers: make([]atomic.Int32, 4)}
		p.Run(j, tasks)
		for k := range j.runs {
			if n := j.runs[k].Load(); n != 1 {
				t.Fatalf("job %d (%d tasks): task %d ran %d times", i, tasks, k, n)
			}
		}
		if i%50 == 49 {
			time.Sleep(2 * (helperSpinMax + callerSpinMax)) // helpers park
		}
	}
}

// TestCloseIdle closes pools whose helpers are spinning, parked, or never
// ran a job; Close must return (the test times out otherwise) and the
// helpers must exit.
func TestCloseIdle(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, wait := range []time.Duration{0, time.Microsecond, 4 * helperSpinMax} {
		for _, jobs := range []int{0, 1, 5} {
			p := New(4)
			for range jobs {
				p.Run(&countJob{t: t, size: 4, runs: make([]atomic.Int32, 16), workers: make([]atomic.Int32, 4)}, 16)
			}
			time.Sleep(wait)
			p.Close()
		}
	}
	// Helpers have exited once Close returns; allow the runtime a moment to
	// reap other goroutines of the test framework.
	for range 100 {
		if runtime.NumGoroutine() <= before {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Errorf("%d goroutines after closing every pool, %d before", runtime.NumGoroutine(), before)
}

// nopJob does nothing: BenchmarkRun measures the pool's hand-off alone.
type nopJob struct{}

func (nopJob) Run(int, int) {}

// BenchmarkRun times back-to-back jobs of a few empty tasks on two
// workers, the pool's fixed cost per parallel step.
func BenchmarkRun(b *testing.B) {
	for _, tasks := range []int{2, 8} {
		b.Run(strconv.Itoa(tasks), func(b *testing.B) {
			p := New(2)
			defer p.Close()
			for b.Loop() {
				p.Run(nopJob{}, tasks)
			}
		})
	}
}

// spinJob is a task of about n multiply-adds of work.
type spinJob struct {
	n   int
	out [16 * 16]float64 // per worker (up to 16), 128 bytes apart
}

func (j *spinJob) Run(w, _ int) {
	x := j.out[w*16]
	for i := 0; i < j.n; i++ {
		x = x*0.999999 + 1
	}
	j.out[w*16] = x
}

// BenchmarkSteps runs 100 back-to-back jobs of 8 tasks of a few
// microseconds each on two workers, the shape of a batch-1 forward: on an
// idle 2-core machine two workers should take about half one's time.
func BenchmarkSteps(b *testing.B) {
	for _, size := range []int{1, 2} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			p := New(size)
			defer p.Close()
			j := &spinJob{n: 4000}
			for b.Loop() {
				for range 100 {
					p.Run(j, 8)
				}
			}
		})
	}
}

// TestCoresCountWorkers: pools that share a Cores poll only while all
// their workers fit the processors, and a closed pool stops counting.
func TestCoresCountWorkers(t *testing.T) {
	var c Cores
	n := runtime.GOMAXPROCS(0)
	a := NewIn(&c, n)
	if !c.fit() {
		t.Fatalf("%d workers on %d processors: fit false", c.workers.Load(), n)
	}
	b := NewIn(&c, 2)
	if c.fit() {
		t.Errorf("%d workers on %d processors: fit true", c.workers.Load(), n)
	}
	// Both still run every task with polling off.
	for _, p := range []*Pool{a, b} {
		j := &countJob{t: t, size: p.Size(), runs: make([]atomic.Int32, 50), workers: make([]atomic.Int32, p.Size())}
		p.Run(j, 50)
		for task := range j.runs {
			if n := j.runs[task].Load(); n != 1 {
				t.Errorf("task %d ran %d times", task, n)
			}
		}
	}
	b.Close()
	if !c.fit() {
		t.Errorf("after Close: %d workers counted", c.workers.Load())
	}
	a.Close()
	if w := c.workers.Load(); w != 0 {
		t.Errorf("all closed: %d workers counted", w)
	}
}

// BenchmarkGaps runs 100 jobs of 2 tasks per worker of a few microseconds
// each, the caller working alone for a gap between them (a batch-1
// forward's serial steps): with gaps longer than the helpers poll, every
// job must wake them. ns/op is per 100 jobs; the work alone is
// 100*(gap + 2*task) on size workers.
func BenchmarkGaps(b *testing.B) {
	for _, size := range []int{2, 4, 16} {
		if size > runtime.GOMAXPROCS(0) {
			continue
		}
		for _, gap := range []int{0, 4000, 20000, 100000} {
			b.Run(strconv.Itoa(size)+"/gap"+strconv.Itoa(gap), func(b *testing.B) {
				p := New(size)
				defer p.Close()
				j := &spinJob{n: 4000}
				g := &spinJob{n: gap}
				for b.Loop() {
					for range 100 {
						g.Run(0, 0)
						p.Run(j, 2*size)
					}
				}
			})
		}
	}
}

// TestSpinTimes checks the poll lengths: the caps where the machine has
// CPUs beyond the workers, growing with the workers where it has not.
func TestSpinTimes(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct {
		size, cpus     int
		helper, caller time.Duration
	}{
		{2, 2, 50 * us, 20 * us}, // a 2-core VM
		{2, 16, 300 * us, 100 * us},
		{4, 4, 100 * us, 40 * us},
		{16, 16, 300 * us, 100 * us},
		{64, 16, 300 * us, 100 * us},
	} {
		if h, cl := spinTimes(c.size, c.cpus); h != c.helper || cl != c.caller {
			t.Errorf("spinTimes(%d, %d) = %v, %v; want %v, %v", c.size, c.cpus, h, cl, c.helper, c.caller)
		}
	}
}
