// Package trace writes Chrome trace files (the Trace Event Format that
// Perfetto, chrome://tracing and speedscope open): complete ("X") spans on
// named tracks, async ("b"/"e") spans for intervals that overlap on one
// track, and metadata ("M") events naming processes and threads.
//
// Times are host time.Time values; the file stores microseconds since the
// trace's origin (the earliest time added, unless SetOrigin fixes it), so
// that spans from several sources line up on one axis.
package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"time"
)

// Event is one entry of the file, in the format's own field names.
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`            // microseconds
	Dur  *float64       `json:"dur,omitempty"` // microseconds, "X" only
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	ID   string         `json:"id,omitempty"` // async events
	Args map[string]any `json:"args,omitempty"`

	at time.Time // Ts before the origin is known
}

// File is the JSON object format of a trace file.
type File struct {
	TraceEvents     []Event `json:"traceEvents"`
	DisplayTimeUnit string  `json:"displayTimeUnit"`
}

// Trace collects events. It is not safe for concurrent use: collect the
// data during a run and build the trace afterwards.
type Trace struct {
	events []Event
	meta   []Event
	origin time.Time
	fixed  bool
}

// New returns an empty trace.
func New() *Trace { return &Trace{} }

// SetOrigin fixes time zero of the file (by default the earliest event).
func (t *Trace) SetOrigin(o time.Time) { t.origin, t.fixed = o, true }

func (t *Trace) see(at time.Time) {
	if !t.fixed && (t.origin.IsZero() || at.Before(t.origin)) {
		t.origin = at
	}
}

// Process names a process track group (pid), sorted by pid in viewers.
func (t *Trace) Process(pid int, name string) {
	t.meta = append(t.meta,
		Event{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": name}},
		Event{Name: "process_sort_index", Ph: "M", Pid: pid, Args: map[string]any{"sort_index": pid}})
}

// Thread names a track (pid, tid); sortIndex orders tracks in viewers.
func (t *Trace) Thread(pid, tid int, name string, sortIndex int) {
	t.meta = append(t.meta,
		Event{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": name}},
		Event{Name: "thread_sort_index", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"sort_index": sortIndex}})
}

// Span adds a complete event on track (pid, tid). Spans on one track must
// not partly overlap (nesting is fine); use Async for intervals that do.
// A span with a zero start or an end before its start is skipped: it marks
// a stage that did not run.
func (t *Trace) Span(pid, tid int, name, cat string, start, end time.Time, args map[string]any) {
	if start.IsZero() || end.Before(start) {
		return
	}
	dur := float64(end.Sub(start).Nanoseconds()) / 1e3
	t.see(start)
	t.events = append(t.events, Event{Name: name, Cat: cat, Ph: "X", Dur: &dur, Pid: pid, Tid: tid, Args: args, at: start})
}

// Async adds an interval that may overlap others of its category: viewers
// stack them on their own rows. id must be unique within cat.
func (t *Trace) Async(pid int, name, cat string, id uint64, start, end time.Time, args map[string]any) {
	if start.IsZero() || end.Before(start) {
		return
	}
	sid := fmt.Sprintf("0x%x", id)
	t.see(start)
	t.events = append(t.events,
		Event{Name: name, Cat: cat, Ph: "b", Pid: pid, ID: sid, Args: args, at: start},
		Event{Name: name, Cat: cat, Ph: "e", Pid: pid, ID: sid, at: end})
}

// Instant adds a point event on a track.
func (t *Trace) Instant(pid, tid int, name string, at time.Time, args map[string]any) {
	if at.IsZero() {
		return
	}
	t.see(at)
	t.events = append(t.events, Event{Name: name, Ph: "i", Pid: pid, Tid: tid, Args: args, at: at})
}

// Len is the number of non-metadata events.
func (t *Trace) Len() int { return len(t.events) }

// File returns the trace as the JSON object format: metadata first, then
// events in time order.
func (t *Trace) File() File {
	evs := make([]Event, 0, len(t.meta)+len(t.events))
	evs = append(evs, t.meta...)
	body := make([]Event, len(t.events))
	copy(body, t.events)
	for i := range body {
		body[i].Ts = float64(body[i].at.Sub(t.origin).Nanoseconds()) / 1e3
	}
	sort.SliceStable(body, func(i, j int) bool { return body[i].Ts < body[j].Ts })
	return File{TraceEvents: append(evs, body...), DisplayTimeUnit: "ms"}
}

// WriteTo writes the trace as JSON.
func (t *Trace) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriter(cw)
	if err := json.NewEncoder(bw).Encode(t.File()); err != nil {
		return cw.n, fmt.Errorf("encoding trace: %w", err)
	}
	err := bw.Flush()
	return cw.n, err
}

// WriteFile writes the trace to path, replacing it.
func (t *Trace) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("trace file: %w", err)
	}
	if _, err := t.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
