// Package parallel is the cpu engines' worker pool: a fixed set of
// goroutines that split one loop at a time into tasks taken dynamically.
// Both the ResNet engine (package cpu) and the general graph executor
// (package irexec) drive their kernels through it.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Job is a parallel loop body: Run(worker, task) does task number task on
// worker number worker (0 <= worker < pool size), which indexes per-worker
// scratch. Jobs are structs reused across calls, so that dispatching one
// allocates nothing.
type Job interface {
	Run(worker, task int)
}

// The pool's state word: the job's generation in the high 32 bits, then
// whether the job is closed (its caller has run out of tasks and admits no
// more helpers), whether the caller sleeps until the last helper leaves,
// and the number of helpers inside the job.
const (
	closedBit  = 1 << 31
	waiterBit  = 1 << 30
	countMask  = waiterBit - 1
	genShift   = 32
	spinChecks = 64 // spin iterations between clock reads
)

// Spin times per worker of the pool, and their caps: a helper that
// finished a job polls for the next one for helperSpin per worker before it
// parks, because at batch 1 jobs follow each other every few tens of
// microseconds and a parked helper takes about as long to be woken (the
// scheduler wakes a thread, which then steals the helper from the caller's
// processor); the caller polls for its last helpers for callerSpin per
// worker before it sleeps, for the same reason (and a caller that slept
// may wake on another core, away from the activations in its cache). What
// parking costs a job grows with the helpers to wake: on a 16-core VM
// (BenchmarkGaps) 3 us a job for 2 workers, 23 us for 4, 40-70 us for 16,
// so larger pools poll longer (2 workers: 50 and 20 us; 16: 300 and 100
// us). Both are short enough that an idle pool costs nothing measurable.
const (
	helperSpin    = 25 * time.Microsecond
	callerSpin    = 10 * time.Microsecond
	helperSpinMax = 300 * time.Microsecond
	callerSpinMax = 100 * time.Microsecond
)

// spinTimes is how long the helpers and the caller of a pool of size
// workers poll before they sleep, on a machine of cpus logical CPUs. Where
// the machine has CPUs to spare, a pool polls the caps whatever its size:
// on the 16-core host two workers ran MobileNetV3-Large and
// EfficientNet-B0 at batch 1 0-19% faster (median about 12%, three
// alternating rounds each) polling 300/100 us than 50/20 us. Where the
// workers take every CPU, a longer poll holds a core that another process
// may be waiting for (a 2-core VM shared by several runs was 10-20% slower
// with it), so the poll grows with the workers as above.
func spinTimes(size, cpus int) (helper, caller time.Duration) {
	if cpus > size {
		return helperSpinMax, callerSpinMax
	}
	n := time.Duration(size)
	return min(helperSpinMax, n*helperSpin), min(callerSpinMax, n*callerSpin)
}

// Pool is a fixed set of goroutines that, with the calling goroutine,
// share the tasks of one job at a time, taking them in order from an atomic
// counter (dynamic scheduling balances uneven tasks). The caller never
// waits for a helper that has not started: once it has taken the last task
// it closes the job, and a helper that arrives later goes back to waiting.
// One owner drives a pool; it is not safe for concurrent Run calls.
type Pool struct {
	size   int // workers, including the caller
	wake   []chan struct{}
	parked []atomic.Bool // helper i-1 sleeps on wake[i-1] (or is about to)
	done   chan struct{} // the last helper out of a closed job, to a sleeping caller
	// poll and callerPoll are helperSpin and callerSpin, or 0 where the
	// workers outnumber the Go processors (a polling goroutine would then
	// hold the processor the one it waits for needs).
	poll, callerPoll time.Duration
	cores            *Cores // the pools this one shares processors with, or nil
	quit             chan struct{}
	exits            sync.WaitGroup

	// record, when set, makes the pool a recorder (NewRecorder).
	record func([]time.Duration)
	times  []time.Duration

	// The job, read by every worker for every task, the task counter,
	// which each task's taker writes, and the state word, which idle
	// helpers poll, each have a cache line of their own: sharing one, each
	// task taken would evict the job and the state from every other core.
	_     cacheLinePad
	job   Job
	tasks int64
	_     cacheLinePad
	next  atomic.Int64
	_     cacheLinePad
	state atomic.Uint64
	_     cacheLinePad
}

// cacheLinePad is two 64-byte cache lines: Intel cores fetch lines in
// adjacent pairs.
type cacheLinePad [128]byte

// Cores counts the workers of pools that run side by side (the instances
// of one model serving several requests at once). Their workers poll only
// while all of them together fit the Go processors: polling goroutines of
// one pool would otherwise hold the processors another pool's tasks need.
// The zero value is ready to use; it is safe for concurrent use.
type Cores struct{ workers atomic.Int64 }

// fit reports whether the counted workers fit the Go processors.
func (c *Cores) fit() bool {
	return c == nil || c.workers.Load() <= int64(runtime.GOMAXPROCS(0))
}

// New starts size-1 helper goroutines (size < 1 counts as 1).
func New(size int) *Pool { return NewIn(nil, size) }

// NewIn is New for a pool whose workers count against c until Close (nil:
// a pool that runs alone).
func NewIn(c *Cores, size int) *Pool {
	size = max(size, 1)
	p := &Pool{size: size, cores: c, quit: make(chan struct{}), done: make(chan struct{}, 1)}
	if c != nil {
		c.workers.Add(int64(size))
	}
	if runtime.GOMAXPROCS(0) >= size {
		p.poll, p.callerPoll = spinTimes(size, runtime.NumCPU())
	}
	p.wake = make([]chan struct{}, size-1)
	p.parked = make([]atomic.Bool, size-1)
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
	var seen uint64 // generation of the last job this helper entered
	for {
		if !p.await(worker, seen) {
			return
		}
		s := p.state.Load()
		for s&closedBit == 0 && !p.state.CompareAndSwap(s, s+1) {
			s = p.state.Load()
		}
		if s&closedBit != 0 {
			continue // the caller finished this job alone
		}
		seen = s >> genShift
		p.work(worker)
		if s = p.state.Add(^uint64(0)); s&countMask == 0 && s&waiterBit != 0 {
			p.done <- struct{}{}
		}
	}
}

// await returns when a job newer than generation seen may be open, or
// false when the pool closes: it polls for p.poll, then parks on the
// helper's wake channel.
func (p *Pool) await(worker int, seen uint64) bool {
	if p.polled(seen) {
		return true
	}
	park := &p.parked[worker-1]
	park.Store(true)
	// A job opened between the poll and the Store saw parked == false and
	// sent no token: look once more before sleeping.
	if p.opened(seen) && park.CompareAndSwap(true, false) {
		return true
	}
	select {
	case <-p.wake[worker-1]:
		return true
	case <-p.quit:
		return false
	}
}

// opened reports whether a job newer than generation seen is open.
func (p *Pool) opened(seen uint64) bool {
	s := p.state.Load()
	return s&closedBit == 0 && s>>genShift != seen
}

// polled spins for up to p.poll until a job newer than generation seen
// opens.
func (p *Pool) polled(seen uint64) bool {
	if p.poll <= 0 || !p.cores.fit() {
		return false
	}
	start := time.Now()
	for {
		for i := 0; i < spinChecks; i++ {
			if p.opened(seen) {
				return true
			}
		}
		if time.Since(start) > p.poll {
			return false
		}
	}
}

func (p *Pool) work(worker int) {
	if p.size == 2 {
		p.work2(worker)
		return
	}
	for {
		t := p.next.Add(1) - 1
		if t >= p.tasks {
			return
		}
		p.job.Run(worker, int(t))
	}
}

// work2 is work for a pool of two: the caller takes tasks from the front,
// the helper from the back (next holds the tasks taken from the front in
// its low 32 bits, from the back in the high ones), so that each worker
// gets about the same half of every loop's tasks, loop after loop: the
// rows of activations a worker writes in one step are the ones it reads
// in the next, from its own core's cache.
func (p *Pool) work2(worker int) {
	const lo = 1<<32 - 1
	for {
		v := p.next.Load()
		f, b := v&lo, v>>32
		if f+b >= p.tasks {
			return
		}
		t, inc := f, int64(1)
		if worker != 0 {
			t, inc = p.tasks-1-b, 1<<32
		}
		if p.next.CompareAndSwap(v, v+inc) {
			p.job.Run(worker, int(t))
		}
	}
}

// Run runs tasks [0, tasks) of j and returns when all are done.
func (p *Pool) Run(j Job, tasks int) {
	if tasks <= 0 {
		return
	}
	if p.record != nil {
		p.recordRun(j, tasks)
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
	// Open the next generation with no helper inside: the previous Run
	// returned only after its last helper left.
	p.state.Store((p.state.Load()>>genShift + 1) << genShift)
	for i := range min(p.size-1, tasks-1) {
		if p.parked[i].CompareAndSwap(true, false) {
			p.wake[i] <- struct{}{}
		}
	}
	p.work(0)
	p.finish()
	p.job = nil
}

// finish closes the current job and returns once no helper is inside it.
func (p *Pool) finish() {
	s := p.state.Load()
	for !p.state.CompareAndSwap(s, s|closedBit) {
		s = p.state.Load()
	}
	if s&countMask == 0 {
		return
	}
	start := time.Now()
	for p.callerPoll > 0 && p.cores.fit() && time.Since(start) <= p.callerPoll {
		for i := 0; i < spinChecks; i++ {
			if p.state.Load()&countMask == 0 {
				return
			}
		}
	}
	for {
		s = p.state.Load()
		if s&countMask == 0 {
			return
		}
		if p.state.CompareAndSwap(s, s|waiterBit) {
			<-p.done
			return
		}
	}
}

// Close stops the helpers and waits for them to exit.
func (p *Pool) Close() {
	close(p.quit)
	p.exits.Wait()
	if p.cores != nil {
		p.cores.workers.Add(-int64(p.size))
	}
}
