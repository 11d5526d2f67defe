// Package loadgen is the benchmark's frontend: it drives any
// backend.Submitter (the in-process pipeline or a client of a remote
// server) the way the reference's frontend drives its backend, and measures
// it.
//
// A run generates its request tensors before timing (Generate), sends one
// warmup request and waits for its answer (with a model loading in the
// background, its latency is the cold start), then sends NumIters requests
// in one of three modes:
//
//   - Flood, the reference's: back to back, as fast as Submit accepts them.
//     With a queue deeper than NumIters (as bench sets it) every request is
//     sent at once and latencies include the time spent queued, exactly as
//     in the reference.
//   - Concurrency C: a closed loop keeping C requests in flight.
//   - Rate R: an open loop with Poisson arrivals at R requests per second.
//     A request's latency counts from its scheduled arrival, not from when
//     a backed-up sender got to it, so queueing is never hidden
//     ("coordinated omission").
//
// A single collector receives every response, checks its ID, shape and
// values, and records latency = receive time - send time (monotonic
// clock). A GPU sampler runs from the end of the warmup to the last
// response. Result holds the latency statistics (package metrics), the
// throughput by the reference's corrected formula, per-device throughput,
// the error count and every response's stage times (for traces).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"goinfer/internal/engine"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/metrics"
)

// Mode is how timed requests are sent.
type Mode int

// The sending modes.
const (
	Flood       Mode = iota // back to back (the reference)
	Concurrency             // closed loop, Config.Concurrency in flight
	Rate                    // open loop, Poisson arrivals at Config.Rate
)

// Config describes a run.
type Config struct {
	// NumIters is the number of timed requests, after the warmup.
	NumIters    int
	Mode        Mode
	Concurrency int     // Mode Concurrency: requests in flight
	Rate        float64 // Mode Rate: requests per second
	// Seed drives the Poisson arrival times of Mode Rate.
	Seed uint64
	// Probe reads GPU utilization and memory; nil means unknown (NaN).
	Probe          metrics.Probe
	SampleInterval time.Duration // default metrics.DefaultSampleInterval
	// UtilWindow, if set, gives the run's utilization from the readings
	// the driver recorded over it (metrics.SamplerConfig.Window).
	UtilWindow metrics.WindowUtil
	// Warmed, if set, is called with the warmup latency once the warmup
	// response has arrived, before the timed requests are sent.
	Warmed func(latency time.Duration)
	// ColdStart, if set, is when the model began loading, where the
	// inputs were made after that: the warmup latency counts from it, not
	// from the warmup's send, so that the cold start keeps the time the
	// model loaded while the inputs were made (the reference's first
	// request goes out as its backend starts).
	ColdStart time.Time
	// PinAfterWarmup, if set, allocates page-locked host memory (from the
	// loaded model's device): once the warmup is answered the inputs are
	// moved there (Inputs.Pin), untimed, so the timed requests are copied
	// to the device without staging while the cold start still includes
	// creating the device context, as the reference's does.
	PinAfterWarmup func(n int) (engine.HostBuffer, error)
	// Progress, if set, is called by the collector after each timed
	// response with the number received so far. It must be quick.
	Progress func(done, total int)
	// KeepResponses keeps every response (without its logits) in
	// Result.Responses, for traces.
	KeepResponses bool
	// OutputBudget bounds the memory of the pooled logits buffers handed
	// to the backend with each request (default 256 MiB); past it the
	// backend allocates.
	OutputBudget int
}

// ModeString names the mode for CSV rows: "flood", "concurrency=C",
// "rate=R".
func (c Config) ModeString() string {
	switch c.Mode {
	case Concurrency:
		return fmt.Sprintf("concurrency=%d", c.Concurrency)
	case Rate:
		return fmt.Sprintf("rate=%g", c.Rate)
	}
	return "flood"
}

func (c Config) validate() error {
	if c.NumIters < 1 {
		return fmt.Errorf("num_iters %d: must be at least 1", c.NumIters)
	}
	switch c.Mode {
	case Flood:
	case Concurrency:
		if c.Concurrency < 1 {
			return fmt.Errorf("concurrency %d: must be at least 1", c.Concurrency)
		}
	case Rate:
		if !(c.Rate > 0) || math.IsInf(c.Rate, 1) {
			return fmt.Errorf("rate %v: must be a positive number of requests per second", c.Rate)
		}
	default:
		return fmt.Errorf("unknown mode %d", c.Mode)
	}
	return nil
}

// DeviceResult is one device's share of the timed requests.
type DeviceResult struct {
	Device     int
	Requests   int
	Images     int
	Throughput float64 // images/s over the whole run's span
}

// Result is what a run measured. Latencies are seconds.
type Result struct {
	Warmup float64 // latency of the warmup request
	// Latencies of the timed requests that succeeded, in ID order.
	Latencies []float64
	Stats     metrics.Stats
	// Throughput is Images / (LastResponse - FirstSend), images per second.
	Throughput   float64
	Images       int // images of the timed requests that succeeded
	FirstSend    time.Time
	LastResponse time.Time
	Devices      []DeviceResult
	GPU          metrics.GPUStats
	// Errors counts timed requests that failed or whose response did not
	// check out; FirstError is the first of them.
	Errors     int
	FirstError error
	// Responses are, with Config.KeepResponses, the warmup's (index 0) and
	// the timed requests' responses by ID, without their logits, for
	// traces. A request whose Submit failed has only ID, SentAt and Err.
	Responses []backend.Response
	Classes   int
}

// Run sends the warmup and the timed requests to sub and measures them.
// Request tensors come from in, cycling. It returns an error, and no
// result, when the warmup fails or ctx is done; failures of timed requests
// are counted in the result.
func Run(ctx context.Context, sub backend.Submitter, in *Inputs, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if in == nil || len(in.Tensors) == 0 {
		return nil, errors.New("loadgen: no inputs")
	}
	n := cfg.NumIters
	bs := in.Shape.BatchSize
	res := &Result{}
	if cfg.KeepResponses {
		res.Responses = make([]backend.Response, n+1)
	}
	reply := make(chan backend.Response, n+1)
	sentAt := make([]time.Time, n+1)

	// Warmup: one request, and wait for it.
	sentAt[0] = time.Now()
	if err := sub.Submit(backend.Request{ID: 0, Input: in.For(0), SentAt: sentAt[0], Ctx: ctx, Reply: reply, Pinned: in.Pinned, Inline: true}); err != nil {
		return nil, fmt.Errorf("warmup request: %w", err)
	}
	var w backend.Response
	select {
	case w = <-reply:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	from := sentAt[0]
	if !cfg.ColdStart.IsZero() && cfg.ColdStart.Before(from) {
		from = cfg.ColdStart
	}
	warm := time.Since(from)
	res.Warmup = warm.Seconds()
	if w.Err != nil {
		return nil, fmt.Errorf("warmup request: %w", w.Err)
	}
	if w.N != bs || w.Classes < 1 || len(w.Logits) != w.N*w.Classes {
		return nil, fmt.Errorf("warmup response: %d images x %d classes and %d logits for a batch of %d", w.N, w.Classes, len(w.Logits), bs)
	}
	res.Classes = w.Classes
	w.Logits = nil
	if res.Responses != nil {
		res.Responses[0] = w
	}
	if cfg.Warmed != nil {
		cfg.Warmed(warm)
	}
	if cfg.PinAfterWarmup != nil {
		if err := in.Pin(cfg.PinAfterWarmup); err != nil {
			return nil, err
		}
	}

	// Logits buffers handed to the backend, recycled by the collector, so
	// the timed loop does not allocate them.
	outLen := bs * res.Classes
	budget := cfg.OutputBudget
	if budget <= 0 {
		budget = 256 << 20
	}
	pool := make(chan []float32, n)
	for range min(n, budget/(4*outLen)) {
		pool <- make([]float32, outLen)
	}

	sampler := metrics.StartSamplerConfig(ctx, metrics.SamplerConfig{
		Probe: cfg.Probe, Interval: cfg.SampleInterval, Window: cfg.UtilWindow})
	defer sampler.Stop()
	sendCtx, stopSending := context.WithCancel(ctx)
	var tokens chan struct{}
	if cfg.Mode == Concurrency {
		tokens = make(chan struct{}, cfg.Concurrency)
	}
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		send(sendCtx, sub, in, cfg, reply, sentAt, pool, tokens)
	}()
	defer func() {
		stopSending()
		<-senderDone
	}()

	lat := make([]float64, n+1) // by ID; NaN for failed requests
	for i := range lat {
		lat[i] = math.NaN()
	}
	seen := make([]bool, n+1)
	devices := map[int]*DeviceResult{}
	// Every device is listed, also one that answered nothing (a fast
	// device can take a short run's every request).
	if d, ok := sub.(interface{ Devices() []backend.DeviceInfo }); ok {
		for _, info := range d.Devices() {
			devices[info.Index] = &DeviceResult{Device: info.Index}
		}
	}
	for done := 0; done < n; {
		var r backend.Response
		select {
		case r = <-reply:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		now := time.Now()
		if r.Logits != nil && cap(r.Logits) == outLen {
			select {
			case pool <- r.Logits[:outLen]:
			default:
			}
		}
		if r.ID < 1 || r.ID > uint64(n) || seen[r.ID] {
			// Not one of ours, or answered twice: an error, but not the
			// answer some request is still waiting for.
			res.fail(fmt.Errorf("response with unexpected or repeated ID %d", r.ID))
			continue
		}
		seen[r.ID] = true
		done++
		if tokens != nil {
			<-tokens
		}
		if err := res.check(r, bs); err != nil {
			res.fail(err)
		} else {
			lat[r.ID] = now.Sub(sentAt[r.ID]).Seconds()
			res.Images += r.N
			d := devices[r.Device]
			if d == nil {
				d = &DeviceResult{Device: r.Device}
				devices[r.Device] = d
			}
			d.Requests++
			d.Images += r.N
		}
		if res.Responses != nil {
			r.Logits = nil
			res.Responses[r.ID] = r
		}
		res.LastResponse = now
		if cfg.Progress != nil {
			cfg.Progress(done, n)
		}
	}
	res.GPU = sampler.Stop()
	res.FirstSend = sentAt[1]
	for _, l := range lat[1:] {
		if !math.IsNaN(l) {
			res.Latencies = append(res.Latencies, l)
		}
	}
	res.Stats = metrics.Summarize(res.Latencies)
	res.Throughput = metrics.Throughput(res.Images, res.FirstSend, res.LastResponse)
	for _, d := range devices {
		d.Throughput = metrics.Throughput(d.Images, res.FirstSend, res.LastResponse)
		res.Devices = append(res.Devices, *d)
	}
	sort.Slice(res.Devices, func(i, j int) bool { return res.Devices[i].Device < res.Devices[j].Device })
	return res, nil
}

func (res *Result) fail(err error) {
	res.Errors++
	if res.FirstError == nil {
		res.FirstError = err
	}
}

// check verifies a timed response: no error, the batch size sent, the
// warmup's class count, and finite logits of that shape.
func (res *Result) check(r backend.Response, bs int) error {
	if r.Err != nil {
		return fmt.Errorf("request %d: %w", r.ID, r.Err)
	}
	if r.N != bs || r.Classes != res.Classes || len(r.Logits) != r.N*r.Classes {
		return fmt.Errorf("request %d: response of %d images x %d classes with %d logits, want %d x %d",
			r.ID, r.N, r.Classes, len(r.Logits), bs, res.Classes)
	}
	for i, v := range r.Logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("request %d: logit %d (image %d, class %d) is %v", r.ID, i, i/r.Classes, i%r.Classes, v)
		}
	}
	return nil
}

// send submits requests 1..NumIters in cfg's mode. A request whose Submit
// fails gets a response made here, so the collector hears of every one.
func send(ctx context.Context, sub backend.Submitter, in *Inputs, cfg Config, reply chan backend.Response,
	sentAt []time.Time, pool chan []float32, tokens chan struct{}) {
	var rng *rand.Rand
	var timer *time.Timer
	var next time.Time
	// A closed loop of one waits for each answer before the next request,
	// so the backend may run it on this goroutine (Request.Inline).
	inline := cfg.Mode == Concurrency && cfg.Concurrency == 1
	if cfg.Mode == Rate {
		rng = rand.New(rand.NewPCG(cfg.Seed, 0xa0761d6478bd642f))
		timer = time.NewTimer(time.Hour)
		defer timer.Stop()
		next = time.Now()
	}
	for id := 1; id <= cfg.NumIters; id++ {
		switch cfg.Mode {
		case Concurrency:
			select {
			case tokens <- struct{}{}:
			case <-ctx.Done():
				return
			}
		case Rate:
			if id > 1 {
				next = next.Add(time.Duration(rng.ExpFloat64() / cfg.Rate * float64(time.Second)))
			}
			if d := time.Until(next); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return
				}
			}
		}
		var out []float32
		select {
		case out = <-pool:
		default:
		}
		at := time.Now()
		if cfg.Mode == Rate {
			at = next // latency counts from the scheduled arrival
		}
		sentAt[id] = at
		err := sub.Submit(backend.Request{ID: uint64(id), Input: in.For(id), SentAt: at, Ctx: ctx, Reply: reply, Output: out, Pinned: in.Pinned, Inline: inline})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			reply <- backend.Response{ID: uint64(id), SentAt: at, DoneAt: time.Now(), Err: fmt.Errorf("submit: %w", err), Device: -1, Worker: -1}
		}
	}
}
