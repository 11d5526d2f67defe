package backend

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"goinfer/internal/engine"
)

// Config shapes the pipeline. The zero value is usable: one worker per
// device, copies on the worker's stream, a queue of DefaultQueueDepth.
type Config struct {
	// NumWorkers is the number of prediction workers per device, each with
	// its own engine.Instance and stream (default 1).
	NumWorkers int
	// QueueDepth bounds the request queue shared by all devices (default
	// DefaultQueueDepth). Submit blocks and TrySubmit fails when it is full.
	QueueDepth int
	// CopyStreams gives the H2D and D2H stages their own streams, so copies
	// overlap the workers' compute. Without it every copy runs on the
	// stream of the worker that computes the request (the reference's
	// original, one-stream-per-worker design).
	CopyStreams bool
	// Slots is how many requests one device pipeline holds at once between
	// taking them from the queue and replying: each slot owns a device
	// input buffer, a device output buffer, a pinned output buffer and its
	// events. Default NumWorkers+3: one being copied in, one per worker,
	// one being copied back, one being handed to the client.
	Slots int
	// MaxBatch is the largest batch a request may carry (default and upper
	// bound: the model's MaxBatch). Buffers are sized for it once.
	MaxBatch int
	// StagingChunk is the size in bytes of the pinned staging buffers the
	// input passes through (default 8 MiB); StagingBuffers how many there
	// are per stream (default 3). A request's input is staged chunk by
	// chunk so that the host copy of one chunk overlaps the device copy of
	// the previous one, and the pinned memory does not grow with the batch.
	StagingChunk   int
	StagingBuffers int
	// Profile records device spans of every stage (three more events per
	// request and their timings) into Response.Stages.
	Profile bool
	// NewDecoder, if set, makes the Decoders of requests that carry
	// Encoded images: one per copy stream (or per worker without
	// CopyStreams) of the pipeline of device index (the position of its
	// loader in StartDevices). Without it such requests are refused.
	NewDecoder func(device int, dev engine.Device, info engine.Info) (Decoder, error)
	// NewPostprocessor, if set, makes the Postprocessor of the pipeline of
	// device index, which ranks the logits of requests that ask for TopK
	// on the device. Without it such requests get their logits.
	NewPostprocessor func(device int, dev engine.Device, info engine.Info) (Postprocessor, error)
	// NoInline sends every request through the stage goroutines, also
	// those marked Request.Inline.
	NoInline bool
}

// DefaultQueueDepth is the request queue's capacity when Config leaves it 0.
const DefaultQueueDepth = 64

func (c Config) withDefaults() Config {
	if c.NumWorkers <= 0 {
		c.NumWorkers = 1
	}
	if c.QueueDepth <= 0 {
		c.QueueDepth = DefaultQueueDepth
	}
	if c.Slots <= 0 {
		c.Slots = c.NumWorkers + 3
	}
	if c.StagingChunk <= 0 {
		c.StagingChunk = 8 << 20
	}
	if c.StagingBuffers <= 0 {
		c.StagingBuffers = 3
	}
	return c
}

// LoadFunc loads the model for one device. It runs in the background while
// requests queue; its ctx is cancelled when the backend is stopped.
type LoadFunc func(ctx context.Context) (engine.Model, error)

// DeviceInfo describes one device pipeline once it is loaded.
type DeviceInfo struct {
	Index int
	// Info is the model's description after the workers' instances were
	// created, so CompileTime includes their compile-only work (graph
	// capture).
	Info engine.Info
	// LoadStart is when the LoadFunc was called. Load is how long it took;
	// Setup how long creating the instances, streams, events and buffers
	// took after it.
	LoadStart   time.Time
	Load, Setup time.Duration
	// MemoryBytes is the device memory of weights, instances and pipeline
	// buffers.
	MemoryBytes int64
}

// DeviceStats counts what one device pipeline answered.
type DeviceStats struct {
	Requests uint64 // answered, with logits or an error
	Images   uint64 // images of the requests answered with logits
	Errors   uint64 // requests answered with an error
	// Inline counts the requests run on their submitter's goroutine
	// (Request.Inline) rather than by the stages.
	Inline uint64
}

// Backend is the pipeline of one or more devices behind one request queue.
// Create it with New, start it with Start or StartDevices, feed it with
// Submit or TrySubmit, and stop it with Close.
type Backend struct {
	cfg   Config
	queue chan item

	mu      sync.RWMutex
	closed  bool
	started bool
	closing chan struct{} // closed when Close begins
	submits sync.WaitGroup

	// abort ends the backend's life: requests not yet on the device are
	// answered with abortErr and no new device work starts. It fires when
	// Start's ctx is done or when Close's ctx runs out before the drain.
	abortCtx context.Context
	abort    context.CancelCauseFunc

	ready chan struct{} // closed once loading finished (or failed)
	err   error         // load error; written before ready is closed
	pipes []*pipeline   // written before ready is closed

	nextInline atomic.Uint64 // spreads inline runs over idle devices

	done      chan struct{} // closed once every goroutine ended and resources are freed
	closeErr  error         // errors freeing resources; written before done is closed
	closeOnce sync.Once
}

// item is a queued request and when it was accepted.
type item struct {
	req    Request
	queued time.Time
}

// New returns a backend that accepts requests at once; they wait in its
// queue until Start's models are loaded.
func New(cfg Config) *Backend {
	cfg = cfg.withDefaults()
	b := &Backend{
		cfg:     cfg,
		queue:   make(chan item, cfg.QueueDepth),
		closing: make(chan struct{}),
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	b.abortCtx, b.abort = context.WithCancelCause(context.Background())
	return b
}

// Start loads the model with load in the background and then runs the
// pipeline on it. See StartDevices.
func (b *Backend) Start(ctx context.Context, load LoadFunc) error {
	return b.StartDevices(ctx, load)
}

// StartDevices loads one model per loader, concurrently and in the
// background, and runs one pipeline per model. All pipelines take requests
// from the one queue, each as soon as it has a free slot, so a faster
// device takes more of them (least-loaded dispatch, no central scheduler).
// Pipelines start only once every model is loaded; if one load fails, the
// others are closed and every queued and later request is answered with the
// error (Err).
//
// ctx bounds the backend's life: when it is done, loading is cancelled and
// every request not yet on the device is answered with an error wrapping
// ErrClosed. Use Close for a graceful stop. Start can be called once.
func (b *Backend) StartDevices(ctx context.Context, loads ...LoadFunc) error {
	if len(loads) == 0 {
		return errors.New("backend: no model loader")
	}
	for i, l := range loads {
		if l == nil {
			return fmt.Errorf("backend: loader %d is nil", i)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return errors.New("backend: already started")
	}
	if b.closed {
		return ErrClosed
	}
	b.started = true
	stop := context.AfterFunc(ctx, func() { b.abort(context.Cause(ctx)) })
	go func() {
		defer stop()
		b.run(loads)
	}()
	return nil
}

// run loads the models, runs the pipelines until the queue is closed and
// drained, and frees everything.
func (b *Backend) run(loads []LoadFunc) {
	defer close(b.done)
	pipes := make([]*pipeline, len(loads))
	errs := make([]error, len(loads))
	// The first failure cancels the other loads: the backend cannot start.
	loadCtx, failed := context.WithCancelCause(b.abortCtx)
	defer failed(nil)
	var wg sync.WaitGroup
	for i, load := range loads {
		wg.Go(func() {
			// CUDA keeps the current device per OS thread.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			p, err := newPipeline(loadCtx, b, i, load)
			if err != nil && len(loads) > 1 {
				err = fmt.Errorf("device %d: %w", i, err)
			}
			pipes[i], errs[i] = p, err
			if err != nil {
				failed(err)
			}
		})
	}
	wg.Wait()
	if b.abortCtx.Err() == nil {
		if cause := context.Cause(loadCtx); cause != nil {
			// Report the failure, not the cancellations it caused.
			for i, err := range errs {
				if err != nil && err != cause && errors.Is(err, context.Canceled) {
					errs[i] = nil
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		var rel []error
		for _, p := range pipes {
			if p != nil {
				rel = append(rel, p.release())
			}
		}
		b.err = fmt.Errorf("loading the model: %w", err)
		b.closeErr = errors.Join(rel...)
		close(b.ready)
		// Answer everything, queued and later, with the load error.
		for it := range b.queue {
			b.reply(it.req.Reply, earlyResponse(it, b.err, -1))
		}
		return
	}
	b.pipes = pipes
	close(b.ready)
	rel := make([]error, len(pipes))
	for i, p := range pipes {
		wg.Go(func() { rel[i] = p.run() })
	}
	wg.Wait()
	b.closeErr = errors.Join(rel...)
}

// Ready is closed once loading has finished, successfully or not (then Err
// says why).
func (b *Backend) Ready() <-chan struct{} { return b.ready }

// Err returns the load error once Ready is closed, and nil before.
func (b *Backend) Err() error {
	select {
	case <-b.ready:
		return b.err
	default:
		return nil
	}
}

// Info describes the model on the first device; it is the zero Info until
// Ready is closed, and after a failed load.
func (b *Backend) Info() engine.Info {
	if d := b.Devices(); len(d) > 0 {
		return d[0].Info
	}
	return engine.Info{}
}

// Devices describes every device pipeline once Ready is closed (nil before,
// and after a failed load).
func (b *Backend) Devices() []DeviceInfo {
	select {
	case <-b.ready:
	default:
		return nil
	}
	out := make([]DeviceInfo, len(b.pipes))
	for i, p := range b.pipes {
		out[i] = p.desc
	}
	return out
}

// AllocHost returns n bytes of host memory from the first device's
// allocator: page-locked on a GPU (portable, so every device's copies use
// it directly), for clients that keep their request tensors there and mark
// them Request.Pinned. It fails until the model has loaded.
func (b *Backend) AllocHost(n int) (engine.HostBuffer, error) {
	select {
	case <-b.ready:
	default:
		return nil, errors.New("AllocHost: the model has not loaded yet")
	}
	if b.err != nil {
		return nil, b.err
	}
	return b.pipes[0].dev.AllocHost(n)
}

// RegisterHost page-locks b for the devices' copies when the engine can
// (engine.HostRegisterer); errors.ErrUnsupported when it cannot.
func (b *Backend) RegisterHost(p []byte) (engine.HostBuffer, error) {
	select {
	case <-b.ready:
	default:
		return nil, errors.New("RegisterHost: the model has not loaded yet")
	}
	if b.err != nil {
		return nil, b.err
	}
	r, ok := b.pipes[0].dev.(engine.HostRegisterer)
	if !ok {
		return nil, fmt.Errorf("RegisterHost: %w by the %s device", errors.ErrUnsupported, b.pipes[0].dev.Name())
	}
	return r.RegisterHost(p)
}

// Stats returns per-device counters (nil before Ready).
func (b *Backend) Stats() []DeviceStats {
	select {
	case <-b.ready:
	default:
		return nil
	}
	out := make([]DeviceStats, len(b.pipes))
	for i, p := range b.pipes {
		out[i] = DeviceStats{Requests: p.requests.Load(), Images: p.images.Load(), Errors: p.errors.Load(), Inline: p.inlined.Load()}
	}
	return out
}

// Submit queues req, blocking while the queue is full, until req.Ctx is
// done (its error is returned) or Close begins (ErrClosed). A nil error
// means exactly one Response will arrive on req.Reply (unless Close has to
// abandon a client that does not read its Reply channel). Submit may be
// called before Start: requests wait for the model. A request marked
// Inline may be run by Submit itself, which then returns once its
// Response is sent.
func (b *Backend) Submit(req Request) error { return b.submit(req, true) }

// TrySubmit is Submit without waiting: it returns ErrQueueFull at once when
// the queue is full, so servers can shed load.
func (b *Backend) TrySubmit(req Request) error { return b.submit(req, false) }

func (b *Backend) submit(req Request, block bool) error {
	if req.Reply == nil {
		return fmt.Errorf("backend: request %d has no Reply channel", req.ID)
	}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return ErrClosed
	}
	b.submits.Add(1)
	b.mu.RUnlock()
	it := item{req: req, queued: time.Now()}
	if b.runInline(it, b.submits.Done) {
		return nil
	}
	defer b.submits.Done()

	select {
	case b.queue <- it:
		return nil
	default:
	}
	if !block {
		return ErrQueueFull
	}
	var cancelled <-chan struct{}
	if req.Ctx != nil {
		cancelled = req.Ctx.Done()
	}
	select {
	case b.queue <- it:
		return nil
	case <-b.closing:
		return ErrClosed
	case <-cancelled:
		return req.Ctx.Err()
	}
}

// Close stops accepting requests (Submit returns ErrClosed) and drains: the
// queued and in-flight requests are answered, then the workers stop and
// every buffer, stream, instance and model is freed. If ctx is done before
// the drain ends, the rest is cancelled: requests not yet on the device are
// answered with an error wrapping ErrClosed and ctx's error, and Close waits
// only for the work already enqueued on the device (whose buffers cannot be
// freed before it ends). Close returns ctx's error when it had to cancel,
// and errors from freeing resources. It is safe to call more than once.
func (b *Backend) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		close(b.closing)
		started := b.started
		b.mu.Unlock()
		// No Submit can be between its closed check and its send any more
		// once this returns, so closing the queue is safe.
		b.submits.Wait()
		close(b.queue)
		if !started {
			b.abort(ErrClosed)
			go func() {
				defer close(b.done)
				b.err = ErrClosed
				close(b.ready)
				for it := range b.queue {
					b.reply(it.req.Reply, earlyResponse(it, ErrClosed, -1))
				}
			}()
		}
	})
	var cut error
	select {
	case <-b.done:
	case <-ctx.Done():
		cut = fmt.Errorf("backend: drain cut short: %w", ctx.Err())
		b.abort(context.Cause(ctx))
		<-b.done
	}
	b.abort(ErrClosed) // release the context's resources
	return errors.Join(cut, b.closeErr)
}

// abortErr is the error of requests answered because the backend stopped.
func (b *Backend) abortErr() error {
	cause := context.Cause(b.abortCtx)
	if cause == nil || errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("%w: %w", ErrClosed, cause)
}

// aborted reports whether the backend has been stopped.
func (b *Backend) aborted() bool { return b.abortCtx.Err() != nil }

// reply hands resp to its client. It waits for the client as long as the
// backend lives; once it is aborted, a client that does not read is dropped
// rather than leak the goroutine.
func (b *Backend) reply(ch chan<- Response, resp Response) {
	select {
	case ch <- resp:
		return
	default:
	}
	select {
	case ch <- resp:
	case <-b.abortCtx.Done():
		select {
		case ch <- resp:
		default:
		}
	}
}

// earlyResponse answers a request that never reached the device.
func earlyResponse(it item, err error, device int) Response {
	now := time.Now()
	return Response{
		ID:        it.req.ID,
		SentAt:    it.req.SentAt,
		DoneAt:    now,
		Err:       err,
		QueueWait: now.Sub(it.queued),
		Worker:    -1,
		Device:    device,
		Stages:    Stages{Queued: it.queued, Dequeued: now},
	}
}
