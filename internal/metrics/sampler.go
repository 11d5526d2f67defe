package metrics

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"
)

// GPUSample is one reading of the GPUs a run uses.
type GPUSample struct {
	// Util is the utilization in percent (0..100), averaged over the
	// devices the probe watches.
	Util float64
	// MemMiB is the memory in use, in MiB, on the fullest watched device.
	MemMiB float64
}

// Probe reads the GPUs once. It is the sampler's pluggable data source:
// nvidia-smi (NvidiaSMIProbe) or NVML. An error skips that sample.
type Probe func(ctx context.Context) (GPUSample, error)

// DefaultSampleInterval is the reference's nvidia-smi polling period.
const DefaultSampleInterval = 100 * time.Millisecond

// GPUStats is what a sampling window measured. Without a probe, or when no
// probe call succeeded, MeanUtil and PeakMemMiB are NaN: "unknown", never a
// made-up 0.
type GPUStats struct {
	// MeanUtil is the window's utilization in percent: from the readings
	// the driver recorded over the window when UtilFromWindow, else the
	// mean of the polled ones.
	MeanUtil   float64
	PeakMemMiB float64
	Samples    int   // successful probe calls
	Failures   int   // failed probe calls
	Err        error // the last probe error, if any

	// UtilFromWindow says MeanUtil comes from SamplerConfig.Window.
	UtilFromWindow bool
	// Window is what SamplerConfig.Window returned, used or not (zero
	// without one).
	Window UtilWindow
	// WindowErr is why SamplerConfig.Window failed, if it did.
	WindowErr error
}

// SamplerConfig configures StartSamplerConfig.
type SamplerConfig struct {
	// Probe is polled every Interval (DefaultSampleInterval when <= 0) for
	// utilization and memory; nil leaves both unknown, unless Window gives
	// the utilization.
	Probe    Probe
	Interval time.Duration
	// Window, if set, is asked by Stop for the window's utilization from
	// the readings the driver recorded (HistoryWindow). A polled reading
	// such as NVML's current utilization describes the driver's last sample
	// period, up to a second, mostly before the window when the window is
	// shorter than that; recorded readings can be matched to the window.
	// MeanUtil keeps the polled mean when Window fails, has no reading for
	// the window, or covers less than half of it (its buffer is finite)
	// while polling produced a figure.
	Window WindowUtil
}

// Sampler polls a Probe at a fixed interval, from StartSampler until Stop,
// and at Stop asks the Window source, if any, about the whole window.
type Sampler struct {
	// ctx is the caller's, kept because Stop takes none: Window may wait
	// for the driver and must stop waiting when the run is cancelled.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	window WindowUtil
	start  time.Time
	stop   sync.Once
	stats  GPUStats
}

// StartSampler starts polling p every interval (DefaultSampleInterval when
// interval <= 0), with a first reading at once so that even a window shorter
// than one interval has a sample. A nil probe gives a sampler whose Stop
// returns NaN statistics. Polling also stops when ctx is done.
func StartSampler(ctx context.Context, p Probe, interval time.Duration) *Sampler {
	return StartSamplerConfig(ctx, SamplerConfig{Probe: p, Interval: interval})
}

// StartSamplerConfig is StartSampler with a Window source: the window
// starts now and ends at Stop.
func StartSamplerConfig(ctx context.Context, cfg SamplerConfig) *Sampler {
	s := &Sampler{ctx: ctx, done: make(chan struct{}), window: cfg.Window, start: time.Now()}
	if cfg.Probe == nil {
		s.stats = GPUStats{MeanUtil: math.NaN(), PeakMemMiB: math.NaN()}
		close(s.done)
		s.cancel = func() {}
		return s
	}
	interval := cfg.Interval
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	var pctx context.Context
	pctx, s.cancel = context.WithCancel(ctx)
	go s.loop(pctx, cfg.Probe, interval)
	return s
}

func (s *Sampler) loop(ctx context.Context, p Probe, interval time.Duration) {
	defer close(s.done)
	var sum float64
	peak := math.NaN()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		g, err := p(ctx)
		switch {
		case ctx.Err() != nil:
			// A probe cut short by Stop is not a failure.
		case err != nil:
			s.stats.Failures++
			s.stats.Err = err
		default:
			s.stats.Samples++
			sum += g.Util
			if math.IsNaN(peak) || g.MemMiB > peak {
				peak = g.MemMiB
			}
		}
		select {
		case <-ctx.Done():
			s.stats.MeanUtil = math.NaN()
			if s.stats.Samples > 0 {
				s.stats.MeanUtil = sum / float64(s.stats.Samples)
			}
			s.stats.PeakMemMiB = peak
			return
		case <-t.C:
		}
	}
}

// Stop ends the window and returns its statistics. It waits for a probe
// call in progress (the probe gets a cancelled context), then for Window,
// if set. Calling Stop again returns the same statistics.
func (s *Sampler) Stop() GPUStats {
	s.stop.Do(func() {
		end := time.Now()
		s.cancel()
		<-s.done
		if s.window != nil {
			s.useWindow(end)
		}
	})
	return s.stats
}

func (s *Sampler) useWindow(end time.Time) {
	w, err := s.window(s.ctx, s.start, end)
	s.stats.Window = w
	if err != nil {
		s.stats.WindowErr = err
		return
	}
	polled := !math.IsNaN(s.stats.MeanUtil)
	if w.Samples > 0 && !math.IsNaN(w.Mean) && (!polled || 2*w.Covered >= end.Sub(s.start)) {
		s.stats.MeanUtil = w.Mean
		s.stats.UtilFromWindow = true
	}
}

// UtilSample is a utilization reading a driver recorded: the Percent of
// its sample period, which ended At, in which the GPU was busy.
type UtilSample struct {
	At      time.Time
	Percent float64
}

// UtilHistory returns the readings a GPU's driver has recorded after since,
// such as NVML's sample buffer (cuda.NVML.UtilizationSamples).
type UtilHistory func(since time.Time) ([]UtilSample, error)

// UtilWindow is a window's utilization computed from recorded readings.
type UtilWindow struct {
	// Mean is in percent, each reading weighted by the part of the window
	// its sample period covers; NaN without readings.
	Mean float64
	// Samples is the number of readings overlapping the window.
	Samples int
	// Covered is the part of the window their periods cover (on several
	// GPUs, the least covered one's).
	Covered time.Duration
}

// WindowUtil computes the utilization of the window [start, end] after it
// has ended. Samples == 0 means it has no reading for the window. It
// should return early, with what it has, once ctx is done.
type WindowUtil func(ctx context.Context, start, end time.Time) (UtilWindow, error)

// MaxSamplePeriod is the longest period a recorded reading describes: NVML
// samples utilization every 1/6 s to 1 s, depending on the product.
const MaxSamplePeriod = time.Second

// historyPoll is how often HistoryWindow looks for the reading that closes
// the window.
const historyPoll = 20 * time.Millisecond

// HistoryWindow is a WindowUtil over GPUs' recorded readings: WindowMean on
// each GPU, averaged over them. The reading describing the window's last
// moments is recorded up to a sample period after it, so HistoryWindow
// waits, at most settle, until each GPU has a reading at or after the end.
// A GPU without any reading for the window makes the result empty
// (Samples 0): NVML records nothing while a GPU idles, so averaging the
// others would overstate the run's utilization.
func HistoryWindow(settle time.Duration, histories ...UtilHistory) WindowUtil {
	return func(ctx context.Context, start, end time.Time) (UtilWindow, error) {
		none := UtilWindow{Mean: math.NaN()}
		if len(histories) == 0 {
			return none, nil
		}
		// Readings from before the window bound the period of its first.
		since := start.Add(-2 * MaxSamplePeriod)
		deadline := time.Now().Add(settle)
		per := make([]UtilWindow, len(histories))
		for {
			closed := true
			for i, h := range histories {
				readings, err := h(since)
				if err != nil {
					return none, err
				}
				per[i] = WindowMean(readings, start, end)
				closed = closed && slices.ContainsFunc(readings, func(r UtilSample) bool { return !r.At.Before(end) })
			}
			if closed || !time.Now().Before(deadline) || ctx.Err() != nil {
				break
			}
			t := time.NewTimer(min(historyPoll, time.Until(deadline)))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		out := UtilWindow{Covered: end.Sub(start)}
		var sum float64
		for _, w := range per {
			if w.Samples == 0 {
				return none, nil
			}
			sum += w.Mean
			out.Samples += w.Samples
			out.Covered = min(out.Covered, w.Covered)
		}
		out.Mean = sum / float64(len(per))
		return out, nil
	}
}

// WindowMean is the utilization of [start, end] from one GPU's readings, in
// any order. Each reading describes its sample period, which ended at its
// time and began at the previous reading or one period earlier, whichever
// is later (readings stop while the GPU idles). The period is the shortest
// gap between readings, or MaxSamplePeriod when that is unknown. Time in
// the window no period covers does not count.
func WindowMean(readings []UtilSample, start, end time.Time) UtilWindow {
	w := UtilWindow{Mean: math.NaN()}
	if !end.After(start) || len(readings) == 0 {
		return w
	}
	rs := slices.Clone(readings)
	slices.SortFunc(rs, func(a, b UtilSample) int { return a.At.Compare(b.At) })
	period := MaxSamplePeriod
	for i := 1; i < len(rs); i++ {
		if g := rs[i].At.Sub(rs[i-1].At); g > 0 && g < period {
			period = g
		}
	}
	var sum float64
	for i, r := range rs {
		from := r.At.Add(-period)
		if i > 0 && rs[i-1].At.After(from) {
			from = rs[i-1].At
		}
		lo, hi := from, r.At
		if start.After(lo) {
			lo = start
		}
		if end.Before(hi) {
			hi = end
		}
		if d := hi.Sub(lo); d > 0 {
			sum += d.Seconds() * r.Percent
			w.Covered += d
			w.Samples++
		}
	}
	if w.Samples > 0 {
		w.Mean = sum / w.Covered.Seconds()
	}
	return w
}

// MultiProbe combines per-device probes into one: utilization averaged,
// memory the maximum. It fails only when every probe fails.
func MultiProbe(probes ...Probe) Probe {
	return func(ctx context.Context) (GPUSample, error) {
		var out GPUSample
		var n int
		var firstErr error
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, p := range probes {
			wg.Go(func() {
				g, err := p(ctx)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				out.Util += g.Util
				out.MemMiB = max(out.MemMiB, g.MemMiB)
				n++
			})
		}
		wg.Wait()
		if n == 0 {
			if firstErr == nil {
				firstErr = errors.New("no GPU probes")
			}
			return GPUSample{}, firstErr
		}
		out.Util /= float64(n)
		return out, nil
	}
}
