package h2grpc

import (
	"sync"
	"sync/atomic"
	"time"
)

// A connection that carries one call at a time (h2grpc's client, a gRPC-Go
// client with one call in flight) runs each handler on the goroutine that
// read its request and goes on reading with that same goroutine once the
// handler is done: no goroutine is started or woken per call, which costs
// a wake-up of another thread on the request's path. Nothing is read from
// the connection while such a handler runs, so a watch hands the reading
// to a new goroutine (as a connection with several calls in flight does at
// once) when the handler has run for a tick or two, or at once when its
// answer waits for a flow-control window. A connection that is seen with
// two calls in flight, or a fallback stream, hands off every call from
// then on.

// inlineTick is how often the watch looks at the handlers running inline;
// one is handed off after one to two ticks.
const inlineTick = time.Millisecond

// inlineIdleTicks is how many ticks without a handler running inline the
// watch waits before it stops.
const inlineIdleTicks = 100

// inlineRun is a handler running on its connection's reading goroutine.
type inlineRun struct {
	sc    *serverConn
	state atomic.Int32 // inlineRunning, then inlineHanded or inlineDone
	seen  bool         // guarded by the watch's mu: running at a tick
}

const (
	inlineRunning = iota
	inlineHanded  // a new goroutine reads the connection
	inlineDone    // the handler returned first: its goroutine reads on
)

// handOff starts a new goroutine reading the connection unless the handler
// is done or that was done already.
func (r *inlineRun) handOff() {
	if r.state.CompareAndSwap(inlineRunning, inlineHanded) {
		go r.sc.loop()
	}
}

// finish reports whether the handler's goroutine is still the reader.
func (r *inlineRun) finish() bool {
	return r.state.CompareAndSwap(inlineRunning, inlineDone)
}

// inlineWatch hands off the handlers that run inline for too long. Its
// goroutine runs while there are such handlers, and for inlineIdleTicks
// after.
type inlineWatch struct {
	mu      sync.Mutex
	runs    map[*inlineRun]struct{}
	running bool
}

func (w *inlineWatch) add(r *inlineRun) {
	w.mu.Lock()
	if w.runs == nil {
		w.runs = map[*inlineRun]struct{}{}
	}
	w.runs[r] = struct{}{}
	if !w.running {
		w.running = true
		go w.watch()
	}
	w.mu.Unlock()
}

func (w *inlineWatch) remove(r *inlineRun) {
	w.mu.Lock()
	delete(w.runs, r)
	w.mu.Unlock()
}

func (w *inlineWatch) watch() {
	idle := 0
	for {
		time.Sleep(inlineTick)
		w.mu.Lock()
		if len(w.runs) == 0 {
			if idle++; idle >= inlineIdleTicks {
				w.running = false
				w.mu.Unlock()
				return
			}
		}
		for r := range w.runs {
			idle = 0
			if r.seen {
				delete(w.runs, r)
				r.handOff()
			}
			r.seen = true
		}
		w.mu.Unlock()
	}
}
