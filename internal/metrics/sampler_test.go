package metrics

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }

// every returns readings of pct at from, from+step, ... up to to.
func every(from, to time.Time, step time.Duration, pct float64) []UtilSample {
	var out []UtilSample
	for t := from; !t.After(to); t = t.Add(step) {
		out = append(out, UtilSample{At: t, Percent: pct})
	}
	return out
}

func TestWindowMean(t *testing.T) {
	tests := []struct {
		name        string
		readings    []UtilSample
		start, end  time.Time
		wantMean    float64 // NaN: none
		wantSamples int
		wantCovered time.Duration
	}{
		{
			name: "readings inside, equal periods",
			readings: []UtilSample{{ms(0), 5}, {ms(100), 10}, {ms(200), 20}, {ms(300), 30},
				{ms(400), 40}},
			start: ms(0), end: ms(400),
			wantMean: 25, wantSamples: 4, wantCovered: 400 * time.Millisecond,
		},
		{
			name: "periods straddling the edges count for their part inside",
			readings: []UtilSample{{ms(0), 10}, {ms(250), 10}, {ms(500), 100}, {ms(750), 100},
				{ms(1000), 100}, {ms(1250), 0}, {ms(1500), 0}},
			start: ms(400), end: ms(1100),
			// 100 ms of 100%, 250 ms, 250 ms, then 100 ms of 0%.
			wantMean: 100 * 600.0 / 700, wantSamples: 4, wantCovered: 700 * time.Millisecond,
		},
		{
			name:     "order does not matter",
			readings: []UtilSample{{ms(1000), 100}, {ms(1500), 0}, {ms(250), 10}, {ms(750), 100}, {ms(1250), 0}, {ms(500), 100}, {ms(0), 10}},
			start:    ms(400), end: ms(1100),
			wantMean: 100 * 600.0 / 700, wantSamples: 4, wantCovered: 700 * time.Millisecond,
		},
		{
			name:     "readings outside only",
			readings: []UtilSample{{ms(-2000), 100}, {ms(-1900), 100}, {ms(5000), 100}, {ms(5100), 100}},
			start:    ms(0), end: ms(1000),
			wantMean: math.NaN(),
		},
		{
			name:     "a gap without readings (idle) is not covered",
			readings: []UtilSample{{ms(0), 100}, {ms(100), 100}, {ms(1000), 50}},
			start:    ms(0), end: ms(1000),
			wantMean: 75, wantSamples: 2, wantCovered: 200 * time.Millisecond,
		},
		{
			name:     "a lone reading after the end covers up to MaxSamplePeriod before it",
			readings: []UtilSample{{ms(500), 60}},
			start:    ms(0), end: ms(300),
			wantMean: 60, wantSamples: 1, wantCovered: 300 * time.Millisecond,
		},
		{
			name:     "empty window",
			readings: []UtilSample{{ms(100), 60}},
			start:    ms(100), end: ms(100),
			wantMean: math.NaN(),
		},
		{
			name:  "no readings",
			start: ms(0), end: ms(100),
			wantMean: math.NaN(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := WindowMean(tt.readings, tt.start, tt.end)
			if math.IsNaN(tt.wantMean) {
				if !math.IsNaN(got.Mean) || got.Samples != 0 || got.Covered != 0 {
					t.Fatalf("got %+v, want no readings for the window", got)
				}
				return
			}
			if !near(got.Mean, tt.wantMean) || got.Samples != tt.wantSamples || got.Covered != tt.wantCovered {
				t.Fatalf("got %+v, want mean %v over %d samples covering %v", got, tt.wantMean, tt.wantSamples, tt.wantCovered)
			}
		})
	}
}

// history serves given readings as a driver's buffer does: those newer than
// since.
func history(readings ...UtilSample) UtilHistory {
	return func(since time.Time) ([]UtilSample, error) {
		var out []UtilSample
		for _, r := range readings {
			if r.At.After(since) {
				out = append(out, r)
			}
		}
		return out, nil
	}
}

// recording is history whose readings exist only once their time has come,
// as a driver records them.
func recording(readings ...UtilSample) UtilHistory {
	h := history(readings...)
	return func(since time.Time) ([]UtilSample, error) {
		all, err := h(since)
		var out []UtilSample
		for _, r := range all {
			if !r.At.After(time.Now()) {
				out = append(out, r)
			}
		}
		return out, err
	}
}

func TestHistoryWindow(t *testing.T) {
	errDriver := errors.New("nvml: device 1: not supported")
	tests := []struct {
		name        string
		histories   []UtilHistory
		wantMean    float64 // NaN: none
		wantSamples int
		wantCovered time.Duration // 0: the whole window
		wantErr     error
	}{
		{
			name: "averaged over GPUs",
			histories: []UtilHistory{
				history(every(ms(-100), ms(1100), 100*time.Millisecond, 80)...),
				history(every(ms(-100), ms(1100), 100*time.Millisecond, 40)...),
			},
			wantMean: 60, wantSamples: 20,
		},
		{
			name: "coverage is the least covered GPU's",
			histories: []UtilHistory{
				history(every(ms(-100), ms(1100), 100*time.Millisecond, 80)...),
				history(every(ms(-100), ms(500), 100*time.Millisecond, 40)...),
			},
			wantMean: 60, wantSamples: 15, wantCovered: 500 * time.Millisecond,
		},
		{
			name: "a GPU without readings empties the result",
			histories: []UtilHistory{
				history(every(ms(-100), ms(1100), 100*time.Millisecond, 80)...),
				history(),
			},
			wantMean: math.NaN(),
		},
		{
			name: "an error is returned",
			histories: []UtilHistory{
				history(every(ms(-100), ms(1100), 100*time.Millisecond, 80)...),
				func(time.Time) ([]UtilSample, error) { return nil, errDriver },
			},
			wantMean: math.NaN(), wantErr: errDriver,
		},
		{
			name:     "no GPUs",
			wantMean: math.NaN(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := HistoryWindow(0, tt.histories...)(context.Background(), ms(0), ms(1000))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if math.IsNaN(tt.wantMean) {
				if !math.IsNaN(got.Mean) || got.Samples != 0 {
					t.Fatalf("got %+v, want none", got)
				}
				return
			}
			if tt.wantCovered == 0 {
				tt.wantCovered = time.Second
			}
			if !near(got.Mean, tt.wantMean) || got.Samples != tt.wantSamples || got.Covered != tt.wantCovered {
				t.Fatalf("got %+v, want mean %v over %d samples covering %v", got, tt.wantMean, tt.wantSamples, tt.wantCovered)
			}
		})
	}
}

func TestHistoryWindowWaitsForTheClosingReading(t *testing.T) {
	// The window ended now; the reading describing its last 50 ms is
	// recorded 50 ms from now.
	end := time.Now()
	start := end.Add(-400 * time.Millisecond)
	readings := every(end.Add(-950*time.Millisecond), end.Add(time.Second), 100*time.Millisecond, 90) // ..., end-50ms, end+50ms, ...

	got, err := HistoryWindow(0, recording(readings...))(context.Background(), start, end)
	if err != nil {
		t.Fatal(err)
	}
	if got.Covered != 350*time.Millisecond {
		t.Fatalf("without waiting: %+v, want the last 50 ms uncovered", got)
	}
	got, err = HistoryWindow(5*time.Second, recording(readings...))(context.Background(), start, end)
	if err != nil {
		t.Fatal(err)
	}
	if got.Covered != 400*time.Millisecond || !near(got.Mean, 90) {
		t.Fatalf("waiting: %+v, want the whole window at 90%%", got)
	}
	if waited := time.Since(end); waited > 3*time.Second {
		t.Errorf("waited %v for a reading due 50 ms after the end", waited)
	}
}

func TestHistoryWindowWaitIsBounded(t *testing.T) {
	end := time.Now()
	h := history(UtilSample{At: end.Add(-10 * time.Millisecond), Percent: 50}) // never closed
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name   string
		ctx    context.Context
		settle time.Duration
		within time.Duration // generous: the machine is shared
	}{
		{"settle", context.Background(), 50 * time.Millisecond, time.Second},
		{"cancelled", ctx, time.Hour, time.Second},
	} {
		t0 := time.Now()
		got, err := HistoryWindow(c.settle, h)(c.ctx, end.Add(-100*time.Millisecond), end)
		if err != nil || got.Samples != 1 || got.Mean != 50 {
			t.Errorf("%s: %+v, %v; want the one reading", c.name, got, err)
		}
		if d := time.Since(t0); d > c.within {
			t.Errorf("%s: returned after %v", c.name, d)
		}
	}
}

func TestSamplerWindow(t *testing.T) {
	errDriver := errors.New("nvml: nvmlDeviceGetSamples: not supported")
	probe := func(context.Context) (GPUSample, error) { return GPUSample{Util: 20, MemMiB: 512}, nil }
	tests := []struct {
		name     string
		probe    Probe
		history  func(t0 time.Time) UtilHistory
		wantUtil float64 // NaN: unknown
		fromWin  bool
		wantErr  error
	}{
		{
			name:  "readings inside the window",
			probe: probe,
			history: func(t0 time.Time) UtilHistory {
				return history(every(t0.Add(-10*time.Millisecond), t0.Add(5*time.Second), 5*time.Millisecond, 90)...)
			},
			wantUtil: 90, fromWin: true,
		},
		{
			name:  "readings outside the window only: polled",
			probe: probe,
			history: func(t0 time.Time) UtilHistory {
				return history(UtilSample{t0.Add(-1500 * time.Millisecond), 90}, UtilSample{t0.Add(10 * time.Second), 90})
			},
			wantUtil: 20,
		},
		{
			name:  "readings covering under half the window: polled",
			probe: probe,
			history: func(t0 time.Time) UtilHistory {
				return history(UtilSample{t0.Add(5 * time.Millisecond), 90}, UtilSample{t0.Add(10 * time.Millisecond), 90})
			},
			wantUtil: 20,
		},
		{
			name: "readings covering under half the window, nothing polled",
			history: func(t0 time.Time) UtilHistory {
				return history(UtilSample{t0.Add(5 * time.Millisecond), 90}, UtilSample{t0.Add(10 * time.Millisecond), 90})
			},
			wantUtil: 90, fromWin: true,
		},
		{
			name:  "window error: polled, error kept",
			probe: probe,
			history: func(time.Time) UtilHistory {
				return func(time.Time) ([]UtilSample, error) { return nil, errDriver }
			},
			wantUtil: 20, wantErr: errDriver,
		},
		{
			name:     "no readings, no probe",
			history:  func(time.Time) UtilHistory { return history() },
			wantUtil: math.NaN(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Now()
			s := StartSamplerConfig(context.Background(), SamplerConfig{
				Probe: tt.probe, Interval: 5 * time.Millisecond,
				Window: HistoryWindow(20*time.Millisecond, tt.history(t0)),
			})
			time.Sleep(40 * time.Millisecond)
			st := s.Stop()
			if math.IsNaN(tt.wantUtil) != math.IsNaN(st.MeanUtil) || !math.IsNaN(tt.wantUtil) && !near(st.MeanUtil, tt.wantUtil) {
				t.Errorf("MeanUtil %v, want %v (window %+v)", st.MeanUtil, tt.wantUtil, st.Window)
			}
			if st.UtilFromWindow != tt.fromWin {
				t.Errorf("UtilFromWindow %v, want %v", st.UtilFromWindow, tt.fromWin)
			}
			if !errors.Is(st.WindowErr, tt.wantErr) {
				t.Errorf("WindowErr %v, want %v", st.WindowErr, tt.wantErr)
			}
			if tt.probe != nil && st.PeakMemMiB != 512 {
				t.Errorf("PeakMemMiB %v, want the polled 512", st.PeakMemMiB)
			}
			if again := s.Stop(); again.MeanUtil != st.MeanUtil && !math.IsNaN(st.MeanUtil) {
				t.Errorf("second Stop: MeanUtil %v, first %v", again.MeanUtil, st.MeanUtil)
			}
		})
	}
}
