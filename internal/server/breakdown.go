package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"goinfer/internal/server/batcher"
)

// The latency breakdown (Config.LatencyBreakdown, GET /debug/latency)
// keeps, per protocol, the times at which the last requests passed each
// step between their arrival and their answer, so that the time a
// one-in-flight client measures can be split into transport, server code,
// queue and engine on the machine that runs it. It costs nothing when off:
// no stamp is taken and no context value is added.

// Steps of an answered inference request, in the order they happen. A step
// a path does not see stays zero and is left out of the table.
const (
	stepArrived   = iota // HTTP: head parsed (handler start); gRPC: call headers in (before the message)
	stepHandler          // gRPC: handler start (message read and decoded)
	stepHeader           // HTTP: JSON header read and decoded
	stepInput            // input bytes in place (HTTP: body read)
	stepSubmit           // handed to the batcher
	stepFormed           // its batch formed
	stepDequeued         // the backend took the batch
	stepStaged           // the input's copy to the device enqueued
	stepWorker           // a worker took it
	stepForward          // the forward enqueued
	stepReplyWait        // the reply stage began waiting for the device
	stepHostDone         // logits on the host
	stepAnswered         // the batcher returned to the handler
	stepEncoded          // answer encoded (gRPC) or handed to net/http (HTTP)
	stepWritten          // answer written (h2grpc: after its write)
	numSteps
)

var stepNames = [numSteps]string{
	"arrived", "handler", "header", "input", "submit", "formed", "dequeued", "staged",
	"worker", "forward", "reply_wait", "host_done", "answered", "encoded", "written",
}

// stamps are one request's step times.
type stamps [numSteps]time.Time

// setResult copies the batcher's and backend's step times of res.
func (st *stamps) setResult(res batcher.Result) {
	st[stepFormed] = res.Dispatched
	st[stepDequeued] = res.Stages.Dequeued
	st[stepStaged] = res.Stages.Staged
	st[stepWorker] = res.Stages.WorkerStart
	st[stepForward] = res.Stages.WorkerEnd
	st[stepReplyWait] = res.Stages.ReplyStart
	st[stepHostDone] = res.HostDone
}

// breakdownKeep is how many requests a protocol's ring holds.
const breakdownKeep = 4096

// breakdown holds the last requests' steps per protocol, as offsets from
// their arrival (-1: step not seen).
type breakdown struct {
	mu    sync.Mutex
	rings map[string]*stepRing
}

type stepRing struct {
	recs [][numSteps]time.Duration
	next int
	full bool
}

func newBreakdown() *breakdown { return &breakdown{rings: map[string]*stepRing{}} }

// record adds one answered request. A nil breakdown records nothing.
func (b *breakdown) record(protocol string, st *stamps) {
	if b == nil {
		return
	}
	t0 := st[stepArrived]
	if t0.IsZero() {
		return
	}
	var rec [numSteps]time.Duration
	for i, t := range st {
		rec[i] = -1
		if !t.IsZero() {
			rec[i] = t.Sub(t0)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.rings[protocol]
	if r == nil {
		r = &stepRing{recs: make([][numSteps]time.Duration, breakdownKeep)}
		b.rings[protocol] = r
	}
	r.recs[r.next] = rec
	r.next++
	if r.next == len(r.recs) {
		r.next, r.full = 0, true
	}
}

func (b *breakdown) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.rings)
}

// write prints, per protocol, the median and 90th percentile of the time
// from each step seen to the next step seen, and of the whole.
func (b *breakdown) write(w io.Writer) {
	b.mu.Lock()
	protos := make([]string, 0, len(b.rings))
	recs := map[string][][numSteps]time.Duration{}
	for p, r := range b.rings {
		protos = append(protos, p)
		n := r.next
		if r.full {
			n = len(r.recs)
		}
		recs[p] = slices.Clone(r.recs[:n])
	}
	b.mu.Unlock()
	slices.Sort(protos)
	if len(protos) == 0 {
		fmt.Fprintln(w, "no requests recorded")
	}
	for _, p := range protos {
		rs := recs[p]
		fmt.Fprintf(w, "%s: %d requests; time from the previous step seen, us\n", p, len(rs))
		fmt.Fprintf(w, "  %-22s %9s %9s %9s\n", "step", "p50", "p90", "mean")
		var ds []time.Duration
		for i := 1; i < numSteps; i++ {
			ds = ds[:0]
			for _, r := range rs {
				if r[i] < 0 {
					continue
				}
				prev := time.Duration(0)
				for j := i - 1; j >= 0; j-- {
					if r[j] >= 0 {
						prev = r[j]
						break
					}
				}
				ds = append(ds, r[i]-prev)
			}
			if len(ds) > 0 {
				writeStepLine(w, stepNames[i], ds)
			}
		}
		ds = ds[:0]
		for _, r := range rs {
			last := time.Duration(0)
			for _, d := range r {
				last = max(last, d)
			}
			ds = append(ds, last)
		}
		writeStepLine(w, "total", ds)
	}
}

func writeStepLine(w io.Writer, name string, ds []time.Duration) {
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	fmt.Fprintf(w, "  %-22s %9.1f %9.1f %9.1f\n", name, us(ds[len(ds)/2]), us(ds[len(ds)*9/10]), us(sum/time.Duration(len(ds))))
}

// handleBreakdown serves GET /debug/latency: the table; with ?reset=1 the
// records are dropped after it is written.
func (s *Server) handleBreakdown(w http.ResponseWriter, r *http.Request) {
	if s.breakdown == nil {
		http.Error(w, "latency breakdown is off (serve --latency_breakdown)", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	s.breakdown.write(w)
	if r.URL.Query().Get("reset") != "" {
		s.breakdown.reset()
	}
}

type stampsKey struct{}

// withStamps returns ctx carrying a new request's stamps, arrived now, when
// the breakdown is on; else ctx.
func (s *Server) withStamps(ctx context.Context) context.Context {
	if s.breakdown == nil {
		return ctx
	}
	st := new(stamps)
	st[stepArrived] = time.Now()
	return context.WithValue(ctx, stampsKey{}, st)
}

// stampsOf returns the stamps withStamps put in ctx, or nil; with the
// breakdown off it does not search ctx.
func (s *Server) stampsOf(ctx context.Context) *stamps {
	if s.breakdown == nil {
		return nil
	}
	st, _ := ctx.Value(stampsKey{}).(*stamps)
	return st
}
