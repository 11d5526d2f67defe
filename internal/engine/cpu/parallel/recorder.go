package parallel

import (
	"container/heap"
	"time"
)

// NewRecorder returns a pool that reports size workers, so that callers
// split their loops as for size threads, but runs every task on the
// caller, one after another, and passes rec each Run's task times in task
// order. It is a planning tool: from the times, how a loop would balance
// over size workers can be worked out on a machine with fewer cores.
func NewRecorder(size int, rec func(tasks []time.Duration)) *Pool {
	return &Pool{size: max(size, 1), record: rec, quit: make(chan struct{})}
}

// recordRun runs a recorder's job serially, timing each task.
func (p *Pool) recordRun(j Job, tasks int) {
	p.times = p.times[:0]
	for t := 0; t < tasks; t++ {
		t0 := time.Now()
		j.Run(0, t)
		p.times = append(p.times, time.Since(t0))
	}
	p.record(p.times)
}

// Makespan is how long tasks of the given times take on workers workers
// that each take the next task in order when they finish one, as Pool's
// workers do: the finish time of the last task, handing-off costs aside.
func Makespan(times []time.Duration, workers int) time.Duration {
	free := make(freeTimes, max(workers, 1))
	var end time.Duration
	for _, d := range times {
		free[0] += d
		end = max(end, free[0])
		heap.Fix(&free, 0)
	}
	return end
}

// freeTimes is a min-heap of the times workers become free.
type freeTimes []time.Duration

func (f freeTimes) Len() int           { return len(f) }
func (f freeTimes) Less(i, j int) bool { return f[i] < f[j] }
func (f freeTimes) Swap(i, j int)      { f[i], f[j] = f[j], f[i] }
func (f *freeTimes) Push(x any)        { *f = append(*f, x.(time.Duration)) }
func (f *freeTimes) Pop() any {
	old := *f
	x := old[len(old)-1]
	*f = old[:len(old)-1]
	return x
}
