package cpu

import (
	"sync"
	"sync/atomic"
)

// job is a parallel loop body: run(worker, task) does task number task on
// worker number worker (0 <= worker < pool size), which indexes per-worker
// scratch. Jobs are structs reused across calls, so that dispatching one
// allocates nothing.
type job interface {
	run(worker, task int)
}

// pool is a fixed set of goroutines that, with the calling goroutine,
// share the tasks of one job at a time, taking them in order from an atomic
// counter (dynamic scheduling balances uneven tasks). One instance owns a
// pool; it is not safe for concurrent parallel calls.
type pool struct {
	size  int // workers, including the caller
	wake  []chan struct{}
	quit  chan struct{}
	exits sync.WaitGroup

	job   job
	tasks int64
	next  atomic.Int64
	busy  sync.WaitGroup
}

// newPool starts size-1 helper goroutines.
func newPool(size int) *pool {
	p := &pool{size: size, quit: make(chan struct{})}
	p.wake = make([]chan struct{}, size-1)
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
		p.exits.Add(1)
		go p.helper(i + 1)
	}
	return p
}

func (p *pool) helper(worker int) {
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

func (p *pool) work(worker int) {
	for {
		t := p.next.Add(1) - 1
		if t >= p.tasks {
			return
		}
		p.job.run(worker, int(t))
	}
}

// parallel runs tasks [0, tasks) of j and returns when all are done.
func (p *pool) parallel(j job, tasks int) {
	if tasks <= 0 {
		return
	}
	if tasks == 1 || p.size == 1 {
		for t := 0; t < tasks; t++ {
			j.run(0, t)
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

// close stops the helpers and waits for them to exit.
func (p *pool) close() {
	close(p.quit)
	p.exits.Wait()
}
