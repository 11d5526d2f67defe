package trace

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestTraceJSON(t *testing.T) {
	t0 := time.Now()
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	tr := New()
	tr.Process(1, "device 0")
	tr.Thread(1, 2, "worker 0", 2)
	tr.Span(1, 2, "forward", "compute", at(100), at(350), map[string]any{"request": 7})
	tr.Span(1, 2, "earlier", "compute", at(10), at(20), nil)
	tr.Span(1, 2, "not run", "compute", time.Time{}, at(5), nil) // skipped
	tr.Span(1, 2, "backwards", "compute", at(9), at(8), nil)     // skipped
	tr.Async(1, "queued", "queue", 7, at(0), at(100), nil)
	tr.Instant(1, 2, "ready", at(50), nil)

	var buf bytes.Buffer
	n, err := tr.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo = %d, %v (wrote %d)", n, err, buf.Len())
	}
	var f struct {
		TraceEvents []map[string]any `json:"traceEvents"`
		Unit        string           `json:"displayTimeUnit"`
	}
	if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
		t.Fatalf("trace is not JSON: %v\n%s", err, buf.Bytes())
	}
	if f.Unit != "ms" {
		t.Errorf("displayTimeUnit = %q", f.Unit)
	}
	var phs []string
	var lastTs float64 = -1
	byName := map[string]map[string]any{}
	for _, e := range f.TraceEvents {
		ph := e["ph"].(string)
		phs = append(phs, ph)
		if ph == "M" {
			continue
		}
		ts := e["ts"].(float64)
		if ts < lastTs {
			t.Errorf("events not in time order: %v after %v", ts, lastTs)
		}
		lastTs = ts
		byName[e["name"].(string)+"/"+ph] = e
	}
	if len(f.TraceEvents) != 4+5 {
		t.Fatalf("got %d events (%v), want 4 metadata + 2 spans + 2 async + 1 instant", len(f.TraceEvents), phs)
	}
	fw := byName["forward/X"]
	if fw == nil || fw["ts"].(float64) != 100 || fw["dur"].(float64) != 250 || fw["pid"].(float64) != 1 || fw["tid"].(float64) != 2 ||
		fw["args"].(map[string]any)["request"].(float64) != 7 || fw["cat"] != "compute" {
		t.Errorf("forward span = %v, want ts 100 dur 250 on (1,2)", fw)
	}
	if b, e := byName["queued/b"], byName["queued/e"]; b == nil || e == nil || b["id"] != "0x7" || e["ts"].(float64) != 100 || b["ts"].(float64) != 0 {
		t.Errorf("async pair = %v / %v", b, e)
	}
	if _, ok := byName["not run/X"]; ok {
		t.Error("span with zero start was written")
	}
	names := 0
	for _, e := range f.TraceEvents {
		if e["ph"] == "M" && (e["name"] == "thread_name" || e["name"] == "process_name") {
			names++
		}
	}
	if names != 2 {
		t.Errorf("got %d name metadata events, want 2", names)
	}
}

func TestSetOriginAndWriteFile(t *testing.T) {
	t0 := time.Now()
	tr := New()
	tr.SetOrigin(t0.Add(-time.Millisecond))
	tr.Span(0, 0, "s", "", t0, t0.Add(time.Millisecond), nil)
	p := filepath.Join(t.TempDir(), "trace.json")
	if err := tr.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.TraceEvents) != 1 || f.TraceEvents[0].Ts != 1000 || *f.TraceEvents[0].Dur != 1000 {
		t.Fatalf("events = %+v, want one span at 1000us lasting 1000us", f.TraceEvents)
	}
	if err := tr.WriteFile(filepath.Join(t.TempDir(), "no", "such", "dir.json")); err == nil {
		t.Fatal("writing into a missing directory: want an error")
	}
}
