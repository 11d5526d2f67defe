// Package parallel is the cpu engines' worker pool: a fixed set of
// goroutines that split one loop at a time into tasks taken dynamically.
// Both the ResNet engine (package cpu) and the general graph executor
// (package irexec) drive their kernels through it.
package parallel

import (
	"sync"
	"sync/atomic"
)

// Job is a parallel loop body: Run(worker, task) does task number task on
// worker number worker (0 <= worker < pool size), which indexes per-worker
// scratch. Jobs are structs reused across calls, so that dispatching one
// allocates nothing.
type Job interface {
	Run(worker, task int)
}

// Pool is a fixed set of goroutines that, with the calling goroutine,
// share the tasks of one job at a time, taking them in order from an atomic
// counter (dynamic scheduling balances uneven tasks). One owner drives a
// pool; it is not safe for concurrent Run calls.
type Pool struct {
	size  int // workers, including the caller
	wake  []chan struct{}
	quit  chan struct{}
	exits sync.WaitGroup

	job   Job
	tasks int64
	next  atomic.Int64
	busy  sync.WaitGroup
}

// New starts size-1 helper goroutines (size < 1 counts as 1).
func New(size int) *Pool {
	size = max(size, 1)
	p := &Pool{size: size, quit: make(chan struct{})}
	p.wake = make([]chan struct{}, size-1)
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
		p.exits.Add(1)
		go p.helper(i + 1)
	}
	return p
}

// Size is the number of workers, the caller included.
func (p *Pool) Size() int { return p.size }

func (p *Pool) helper(worker int) {
	defer p.exits.Done()
	for {
		select {
		case <-p.wake[worker-1]:
			p.work(worker)
			p.busy.Done()
		case <-p.quit:
			return
		}
	}
}

func (p *Pool) work(worker int) {
	for {
		t := p.next.Add(1) - 1
		if t >= p.tasks {
			return
		}
		p.job.Run(worker, int(t))
	}
}

// Run runs tasks [0, tasks) of j and returns when all are done.
func (p *Pool) Run(j Job, tasks int) {
	if tasks <= 0 {
		return
	}
	if tasks == 1 || p.size == 1 {
		for t := 0; t < tasks; t++ {
			j.Run(0, t)
		}
		return
	}
	p.job, p.tasks = j, int64(tasks)
	p.next.Store(0)
	helpers := min(p.size-1, tasks-1)
	p.busy.Add(helpers)
	for i := 0; i < helpers; i++ {
		p.wake[i] <- struct{}{}
	}
	p.work(0)
	p.busy.Wait()
	p.job = nil
}

// Close stops the helpers and waits for them to exit.
func (p *Pool) Close() {
	close(p.quit)
	p.exits.Wait()
}
