package metrics

import (
	"context"
	"errors"
	"math"
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
	MeanUtil   float64
	PeakMemMiB float64
	Samples    int   // successful probe calls
	Failures   int   // failed probe calls
	Err        error // the last probe error, if any
}

// Sampler polls a Probe at a fixed interval, from StartSampler until Stop.
type Sampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	stats  GPUStats
}

// StartSampler starts polling p every interval (DefaultSampleInterval when
// interval <= 0), with a first reading at once so that even a window shorter
// than one interval has a sample. A nil probe gives a sampler whose Stop
// returns NaN statistics. Polling also stops when ctx is done.
func StartSampler(ctx context.Context, p Probe, interval time.Duration) *Sampler {
	s := &Sampler{done: make(chan struct{})}
	if p == nil {
		s.stats = GPUStats{MeanUtil: math.NaN(), PeakMemMiB: math.NaN()}
		close(s.done)
		s.cancel = func() {}
		return s
	}
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	ctx, s.cancel = context.WithCancel(ctx)
	go s.loop(ctx, p, interval)
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
// call in progress (the probe gets a cancelled context). Calling Stop again
// returns the same statistics.
func (s *Sampler) Stop() GPUStats {
	s.cancel()
	<-s.done
	return s.stats
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
