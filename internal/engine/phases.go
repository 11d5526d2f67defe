package engine

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// processStart approximates the process's start: package variables are
// initialized before main, a few milliseconds after exec.
var processStart = time.Now()

// phaseOut is where phase lines go (nil: nowhere, StartPhases returns nil);
// its lock serializes lines from concurrent loaders.
var phaseOut struct {
	sync.Mutex
	w io.Writer
}

// ReportPhases makes the cold start's phases print their durations on w
// (nil: off, the default): bench's loader and the cuda engine's Load,
// device preparation and NewInstance say how long each step took and when
// it ended, so that a cold start can be taken apart on a machine without a
// profiler. Like log.SetOutput, it is set once by the command.
func ReportPhases(w io.Writer) {
	phaseOut.Lock()
	defer phaseOut.Unlock()
	phaseOut.w = w
}

// Phases times consecutive steps of one activity. A nil *Phases (what
// StartPhases returns when phases are not reported) does nothing, so callers
// need not check.
type Phases struct {
	name string
	last time.Time
	acc  map[string]time.Duration
	keys []string
}

// StartPhases starts timing the steps of the activity called name, or
// returns nil when phases are not reported (ReportPhases).
func StartPhases(name string) *Phases {
	phaseOut.Lock()
	on := phaseOut.w != nil
	phaseOut.Unlock()
	if !on {
		return nil
	}
	return &Phases{name: name, last: time.Now()}
}

// Done reports the step that ends now, timed from the previous Done (or
// StartPhases, or Skip).
func (p *Phases) Done(step string) {
	if p == nil {
		return
	}
	now := time.Now()
	printPhase(p.name+"/"+step, now.Sub(p.last), now)
	p.last = now
}

// Skip restarts the clock without reporting: the time since the previous
// step belongs to no step of this activity (it is reported elsewhere).
func (p *Phases) Skip() {
	if p != nil {
		p.last = time.Now()
	}
}

// Add accumulates the step that ends now under step, to be reported once
// by Flush: for steps interleaved with others (per-layer tuning).
func (p *Phases) Add(step string) {
	if p == nil {
		return
	}
	now := time.Now()
	if p.acc == nil {
		p.acc = map[string]time.Duration{}
	}
	if _, ok := p.acc[step]; !ok {
		p.keys = append(p.keys, step)
	}
	p.acc[step] += now.Sub(p.last)
	p.last = now
}

// Flush reports the accumulated steps in the order they first occurred.
func (p *Phases) Flush() {
	if p == nil {
		return
	}
	now := time.Now()
	for _, k := range p.keys {
		printPhase(p.name+"/"+k+" (sum)", p.acc[k], now)
	}
	p.acc, p.keys = nil, nil
}

func printPhase(step string, d time.Duration, end time.Time) {
	phaseOut.Lock()
	defer phaseOut.Unlock()
	if phaseOut.w == nil {
		return
	}
	fmt.Fprintf(phaseOut.w, "phase %-40s %8.1f ms  (ends at +%.1f ms)\n", step, ms(d), ms(end.Sub(processStart)))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
