// Package batcher merges small inference requests of one image shape into
// device batches (dynamic batching, as Triton's dynamic batcher does),
// submits them to a backend.Submitter and splits the logits back.
//
// Policy. A batch is sent when the queued images reach MaxBatch, or when the
// oldest queued request has waited MaxDelay, whichever comes first; with
// IdleDispatch, also as soon as no batch is in flight. Requests
// are taken in arrival order and never reordered; a request is never split
// across batches unless it is larger than MaxBatch, in which case it is cut
// into chunks of at most MaxBatch images that run as separate batches and
// are joined again before the caller gets its answer. When PreferredSizes is
// set (the sizes the engine compiled, e.g. captured CUDA graphs), a batch is
// padded up to the smallest preferred size that holds it: one graph launch
// of 8 images beats an eager forward of 5 on a GPU.
//
// Bounds. MaxQueue bounds the images waiting to be batched (not requests:
// memory grows with images); a request that does not fit is refused at once
// with ErrQueueFull. MaxInflight bounds the batches submitted and not yet
// answered, and with it the batch buffers; while all are in flight the queue
// fills and new requests are refused, so an overloaded server answers
// quickly instead of growing memory.
//
// Copies. A request whose images form a whole batch on their own, in the
// model's dtype and needing no padding, is submitted without copying: the
// backend reads the request's bytes and writes the logits straight into the
// caller's output. Otherwise images are copied (and converted, for FP16 or
// UINT8 input) once into a pooled batch buffer, in parallel for large
// batches. With AllocHost the batch buffers are page-locked and every batch
// is copied there, which replaces the backend's staging copy. Requests
// received straight into page-locked memory (Input.Pinned) are not copied
// at all: a batch made only of them goes to the backend as a list of parts,
// which it copies to the device one after another.
package batcher

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/engine"
	"goinfer/internal/tensor"
	"goinfer/internal/topk"
)

// Errors Infer returns; callers map them to protocol status codes.
var (
	// ErrQueueFull means the request did not fit in the queue now; retrying
	// later may succeed (HTTP 503, gRPC RESOURCE_EXHAUSTED).
	ErrQueueFull = backend.ErrQueueFull
	// ErrClosed means the batcher is shutting down (HTTP 503, gRPC UNAVAILABLE).
	ErrClosed = backend.ErrClosed
	// ErrTooLarge means the request holds more images than the whole queue
	// and can never be accepted (HTTP 400, gRPC INVALID_ARGUMENT).
	ErrTooLarge = errors.New("request is larger than the queue")
	// ErrInvalid wraps errors in the request's input: dtype, size.
	ErrInvalid = errors.New("invalid input")
)

// Config describes the images a batcher takes and how it batches them.
type Config struct {
	// Channels, Height and Width are the per-image shape the backend runs.
	Channels, Height, Width int
	// DType is the backend's input dtype: batch buffers hold it. Requests
	// may be Float32, Float16 or Uint8; they are converted while copied.
	DType tensor.DType
	// Classes is the number of logits per image.
	Classes int
	// MaxBatch is the largest batch submitted (images).
	MaxBatch int
	// MaxDelay is how long the oldest queued request may wait for company.
	// Zero sends whatever is queued as soon as a batch slot is free.
	MaxDelay time.Duration
	// IdleDispatch sends a partial batch at once when no batch is in
	// flight, instead of waiting MaxDelay for company: an idle device gets
	// work immediately (lowest latency at low load), a busy one gets the
	// requests that queued while it worked, merged.
	IdleDispatch bool
	// MaxQueue bounds the images waiting to be batched (default 4*MaxBatch).
	MaxQueue int
	// PreferredSizes are batch sizes to pad up to (the sizes the engine
	// prepared). Empty: batches run at their natural size.
	PreferredSizes []int
	// MaxInflight bounds the batches submitted and not yet answered
	// (default 4). It should cover the backend's pipeline depth.
	MaxInflight int
	// CopyWorkers is how many goroutines assemble a large batch
	// (default min(GOMAXPROCS, 8)).
	CopyWorkers int
	// AllocHost, if set, allocates batch input buffers in memory the
	// backend copies to the device directly (page-locked on a GPU): every
	// batch is then assembled there and submitted with Request.Pinned,
	// which costs no more than the backend's own staging copy and saves it.
	// The buffers are freed by a complete Close.
	AllocHost func(n int) (engine.HostBuffer, error)
	// Observe, if set, is called once per answered batch, from the
	// batcher's collector goroutine or, for a batch a request to an idle
	// batcher submitted itself, from that request's Infer; it must not
	// block.
	Observe func(BatchStats)
	// Encoded says that the backend decodes encoded images
	// (backend.Config.NewDecoder), so that Infer takes Input.Encoded.
	Encoded bool
	// Stages makes Infer report when its request passed the backend's
	// stages (Result.Stages), for a server's latency breakdown.
	Stages bool
}

// BatchStats describe one batch, for metrics.
type BatchStats struct {
	Images   int           // real images
	Padded   int           // images submitted, padding included
	Requests int           // request chunks merged into it
	Compute  time.Duration // device time the backend reported
	Latency  time.Duration // submit to answer
	Err      error
}

// Result describes how a request ran.
type Result struct {
	// QueueWait is the time from Infer to the request's (first) batch
	// being submitted.
	QueueWait time.Duration
	// Compute is the device time of the batch(es) that ran it.
	Compute time.Duration
	// BatchSize is the number of real images in the largest batch that ran
	// (part of) the request: the effect of dynamic batching.
	BatchSize int
	// Ranked says, for a request with Input.TopK, that the device ranked
	// every image (the backend's Postprocessor) and out holds no logits;
	// otherwise Infer ranked the logits in out on the host.
	Ranked bool
	// With Config.Stages: when the request's (last) batch was submitted,
	// the backend's stage times of that batch and when its logits were
	// on the host. Zero otherwise.
	Dispatched time.Time
	Stages     backend.Stages
	HostDone   time.Time
}

// Input is one request's images: N images of the batcher's shape in DType,
// NCHW, little-endian. Float32 data must be 4-byte aligned.
type Input struct {
	DType tensor.DType
	N     int
	Data  []byte
	// Encoded, if not empty, holds N encoded images (JPEG, PNG) that the
	// backend decodes (Config.Encoded); DType and Data are then unused.
	// Batches hold either encoded images or tensors, never both; an
	// encoded batch is padded like a tensor one (the padding slots hold
	// whatever the device input held), so that it runs a compiled size.
	Encoded [][]byte
	// Pinned says that Data lies in memory the backend copies to the
	// device directly (page-locked on a GPU; see Config.AllocHost). Batches
	// made only of such requests in the model's dtype are not assembled on
	// the host: the backend copies each request's images into place.
	Pinned bool
	// TopK > 0 asks for the k best classes of each image in Top (N*TopK
	// of them, best first per image), ranked by the softmax of the logits
	// with Softmax set, else by the logits (package topk's order): on the
	// device where the backend has a Postprocessor, which copies back
	// only those, else by Infer from the logits in out. Batches merge
	// only requests that ask for the same ranking.
	TopK    int
	Softmax bool
	Top     []topk.Class
}

// Batcher is a dynamic batcher in front of one backend. It is safe for
// concurrent use.
type Batcher struct {
	cfg       Config
	sub       backend.Submitter
	imgElems  int
	conv      map[tensor.DType]*converter
	convErr   map[tensor.DType]error
	preferred []int // sorted, within (0, MaxBatch]

	mu         sync.Mutex
	head, tail *item // FIFO of items with images not yet dispatched
	queued     int   // images not yet dispatched
	inflight   int   // batches formed and not yet answered
	closed     bool

	wake     chan struct{} // an item arrived or Close began (cap 1)
	free     chan *batch   // batch slots not in flight
	batches  []*batch      // by ID
	replies  chan backend.Response
	jobs     chan copyJob
	stop     chan struct{} // closed when Close is done: helpers exit
	kill     chan struct{} // closed when Close gives up: the dispatcher exits
	dispDone chan struct{} // closed when the dispatcher has exited
	closeOne sync.Once     // closes kill (and stop, after a full drain)
	drainOne sync.Once     // runs Close's drain once
	closeErr error
	items    sync.Pool
}

// New starts a batcher that submits merged batches to sub. It answers
// batches by reading the Reply channel it sets on each backend.Request.
func New(sub backend.Submitter, cfg Config) (*Batcher, error) {
	if sub == nil {
		return nil, errors.New("batcher: nil Submitter")
	}
	if cfg.Channels <= 0 || cfg.Height <= 0 || cfg.Width <= 0 || cfg.Classes <= 0 {
		return nil, fmt.Errorf("batcher: image shape [%d %d %d] and classes %d must be positive", cfg.Channels, cfg.Height, cfg.Width, cfg.Classes)
	}
	if cfg.MaxBatch <= 0 {
		return nil, fmt.Errorf("batcher: MaxBatch is %d; want at least 1", cfg.MaxBatch)
	}
	if cfg.MaxDelay < 0 {
		return nil, fmt.Errorf("batcher: MaxDelay is negative (%v)", cfg.MaxDelay)
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = 4 * cfg.MaxBatch
	}
	if cfg.MaxQueue < 0 {
		return nil, fmt.Errorf("batcher: MaxQueue is negative (%d)", cfg.MaxQueue)
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 4
	}
	if cfg.CopyWorkers <= 0 {
		cfg.CopyWorkers = min(runtime.GOMAXPROCS(0), 8)
	}
	switch cfg.DType {
	case tensor.Float32, tensor.Float16, tensor.Uint8:
	default:
		return nil, fmt.Errorf("batcher: model input dtype %s is not supported (want float32, float16 or uint8)", cfg.DType)
	}
	b := &Batcher{
		cfg:      cfg,
		sub:      sub,
		imgElems: cfg.Channels * cfg.Height * cfg.Width,
		conv:     map[tensor.DType]*converter{},
		convErr:  map[tensor.DType]error{},
		wake:     make(chan struct{}, 1),
		free:     make(chan *batch, cfg.MaxInflight),
		replies:  make(chan backend.Response, cfg.MaxInflight),
		jobs:     make(chan copyJob, cfg.CopyWorkers),
		stop:     make(chan struct{}),
		kill:     make(chan struct{}),
		dispDone: make(chan struct{}),
	}
	for _, s := range cfg.PreferredSizes {
		if s > 0 && s <= cfg.MaxBatch && !slices.Contains(b.preferred, s) {
			b.preferred = append(b.preferred, s)
		}
	}
	slices.Sort(b.preferred)
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.Uint8} {
		cv, err := newConverter(dt, cfg.DType, cfg.Channels, cfg.Height*cfg.Width)
		if err != nil {
			b.convErr[dt] = err
			continue
		}
		b.conv[dt] = cv
	}
	b.items.New = func() any { return &item{done: make(chan struct{}, 1)} }
	for id := range cfg.MaxInflight {
		bt := &batch{
			id:    id,
			segs:  make([]seg, 0, cfg.MaxBatch),
			reply: make(chan backend.Response, 1),
			tensor: tensor.Tensor{
				DType: cfg.DType,
				Shape: tensor.Shape{0, cfg.Channels, cfg.Height, cfg.Width},
			},
		}
		b.batches = append(b.batches, bt)
		b.free <- bt
	}
	for range cfg.CopyWorkers {
		go b.copyWorker()
	}
	go b.dispatch()
	go b.collect()
	return b, nil
}

// Config returns the configuration in effect (defaults filled in).
func (b *Batcher) Config() Config { return b.cfg }

// item is one request while it is queued or running.
type item struct {
	ctx  context.Context
	in   Input
	cv   *converter
	out  []float32
	enq  time.Time
	done chan struct{} // receives once, when no work of the item remains

	// Guarded by Batcher.mu.
	prev, next *item
	queued     bool // linked in the FIFO
	withdrawn  bool // the caller gave up; undispatched images were dropped
	sent       int  // images handed to batches
	finished   int  // images whose batch has been answered
	dispatched time.Time
	compute    time.Duration
	batchSize  int
	hostRanked bool // some of its images were ranked from their logits here
	err        error
	stages     backend.Stages // with Config.Stages, of its last answered batch
	hostDone   time.Time
}

func (it *item) reset() {
	*it = item{done: it.done}
}

// seg is a run of one item's images inside a batch.
type seg struct {
	it       *item
	itemOff  int // first image within the item
	batchOff int // first image within the batch
	n        int
}

// batch is one slot of work in flight, with its pooled buffers.
type batch struct {
	id        int
	in        []byte            // MaxBatch images in Config.DType, allocated when first assembled
	host      engine.HostBuffer // in's memory, when Config.AllocHost made it
	out       []float32         // MaxBatch*Classes logits, allocated when first needed
	tensor    tensor.Tensor
	segs      []seg
	parts     [][]byte // the segments' bytes, when the backend gathers them
	images    int
	padded    int
	inDirect  bool     // the request's own bytes were submitted
	outDirect bool     // the backend writes into the request's own output
	encoded   bool     // the images are encoded; the backend decodes them
	enc       [][]byte // the encoded images, in batch order
	submitted time.Time
	wg        sync.WaitGroup
	reply     chan backend.Response // the answer to a batch its request submitted itself (cap 1)
}

// copyJob asks a copy worker to fill images [lo, hi) of a batch.
type copyJob struct {
	b      *batch
	lo, hi int
}

// Admit reports whether a request of n images would be queued now: nil,
// ErrQueueFull, ErrTooLarge or ErrClosed. Servers call it before reading a
// request body so that an overloaded server refuses without paying for it.
func (b *Batcher) Admit(n int) error {
	if n > b.cfg.MaxQueue {
		return b.tooLarge(n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return ErrClosed
	case b.queued+max(n, 1) > b.cfg.MaxQueue:
		return ErrQueueFull
	}
	return nil
}

func (b *Batcher) tooLarge(n int) error {
	return fmt.Errorf("%w: %d images, but at most %d can be queued (send smaller requests)", ErrTooLarge, n, b.cfg.MaxQueue)
}

// QueueDepth is the number of images waiting to be batched.
func (b *Batcher) QueueDepth() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queued
}

// Infer queues in, waits for its batch(es) to run, and writes the logits
// (N*Classes float32) into out. If ctx ends while the request is still
// queued, its images are dropped and Infer returns ctx's error at once; work
// already on the device is waited for (milliseconds), since the device
// writes into out.
func (b *Batcher) Infer(ctx context.Context, in Input, out []float32) (Result, error) {
	if in.N < 1 {
		return Result{}, fmt.Errorf("%w: batch dimension is %d; want at least 1", ErrInvalid, in.N)
	}
	var cv *converter
	switch {
	case len(in.Encoded) > 0:
		if !b.cfg.Encoded {
			return Result{}, fmt.Errorf("%w: encoded images, and the backend decodes none", ErrInvalid)
		}
		if len(in.Encoded) != in.N {
			return Result{}, fmt.Errorf("%w: %d encoded images for a batch of %d", ErrInvalid, len(in.Encoded), in.N)
		}
	case b.conv[in.DType] != nil:
		cv = b.conv[in.DType]
		if want := in.N * b.imgElems * in.DType.Size(); len(in.Data) != want {
			return Result{}, fmt.Errorf("%w: %d images of [%d %d %d] %s need %d bytes, got %d", ErrInvalid, in.N, b.cfg.Channels, b.cfg.Height, b.cfg.Width, in.DType, want, len(in.Data))
		}
	default:
		if err := b.convErr[in.DType]; err != nil {
			return Result{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return Result{}, fmt.Errorf("%w: datatype %s is not supported (want FP32, FP16 or UINT8)", ErrInvalid, in.DType)
	}
	if len(out) < in.N*b.cfg.Classes {
		return Result{}, fmt.Errorf("batcher: output has room for %d logits, need %d", len(out), in.N*b.cfg.Classes)
	}
	if in.TopK < 0 || in.TopK > b.cfg.Classes || len(in.Top) < in.N*in.TopK {
		return Result{}, fmt.Errorf("%w: top %d of %d classes with room for %d", ErrInvalid, in.TopK, b.cfg.Classes, len(in.Top))
	}
	if in.N > b.cfg.MaxQueue {
		return Result{}, b.tooLarge(in.N)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	it := b.items.Get().(*item)
	it.ctx, it.in, it.cv, it.out, it.enq = ctx, in, cv, out[:in.N*b.cfg.Classes], time.Now()

	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		b.putItem(it)
		return Result{}, ErrClosed
	case b.queued+in.N > b.cfg.MaxQueue:
		b.mu.Unlock()
		b.putItem(it)
		return Result{}, ErrQueueFull
	}
	b.push(it)
	b.queued += in.N
	if bt := b.idleSlot(in); bt != nil {
		// Nothing else is queued or running: this goroutine forms and
		// submits the batch and takes its answer itself, which saves
		// two goroutine hand-offs (to the dispatcher, from the
		// collector) on the path of a request to an idle device.
		b.form(bt, time.Now())
		b.mu.Unlock()
		if b.submit(bt, bt.reply) {
			b.finish(bt, <-bt.reply)
		}
	} else {
		b.mu.Unlock()
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}

	select {
	case <-it.done:
	case <-ctx.Done():
		b.mu.Lock()
		b.withdraw(it, ctx.Err())
		b.mu.Unlock()
		<-it.done
	}
	// it.done was received, so no goroutine touches it any more.
	res := Result{QueueWait: it.dispatched.Sub(it.enq), Compute: it.compute, BatchSize: it.batchSize,
		Ranked: in.TopK > 0 && !it.hostRanked}
	if b.cfg.Stages {
		res.Dispatched, res.Stages, res.HostDone = it.dispatched, it.stages, it.hostDone
	}
	if it.dispatched.IsZero() {
		res.QueueWait = time.Since(it.enq)
	}
	err := it.err
	b.putItem(it)
	return res, err
}

// idleSlot returns a free batch slot for in, which b.push has just made
// the only queued item, when IdleDispatch would send it at once (no batch
// in flight) and a slot is free beside the one the dispatcher waits with;
// else nil. b.mu must be held.
func (b *Batcher) idleSlot(in Input) *batch {
	if !b.cfg.IdleDispatch || b.inflight > 0 || b.head != b.tail || in.N > b.cfg.MaxBatch {
		return nil
	}
	select {
	case bt := <-b.free:
		return bt
	default:
		return nil
	}
}

func (b *Batcher) putItem(it *item) {
	it.reset()
	b.items.Put(it)
}

// push appends it to the FIFO. b.mu must be held.
func (b *Batcher) push(it *item) {
	it.queued = true
	it.prev, it.next = b.tail, nil
	if b.tail != nil {
		b.tail.next = it
	} else {
		b.head = it
	}
	b.tail = it
}

// unlink removes it from the FIFO. b.mu must be held.
func (b *Batcher) unlink(it *item) {
	if it.prev != nil {
		it.prev.next = it.next
	} else {
		b.head = it.next
	}
	if it.next != nil {
		it.next.prev = it.prev
	} else {
		b.tail = it.prev
	}
	it.prev, it.next, it.queued = nil, nil, false
}

// withdraw drops the images of it that are still queued, recording err as
// its outcome. b.mu must be held.
func (b *Batcher) withdraw(it *item, err error) {
	if !it.queued {
		return // all of it is on the device; the collector will finish it
	}
	b.unlink(it)
	b.queued -= it.in.N - it.sent
	it.withdrawn = true
	if it.err == nil {
		it.err = err
	}
	b.maybeDone(it)
}

// maybeDone signals it's caller once no work of it remains. b.mu must be
// held. It signals exactly once: afterwards nothing changes the condition.
func (b *Batcher) maybeDone(it *item) {
	if !it.queued && it.finished == it.sent {
		it.done <- struct{}{}
	}
}

// Close stops accepting requests, runs what is queued, and waits for every
// batch in flight to be answered, or for ctx to end. When ctx ends first,
// queued requests are answered with ErrClosed and ctx's error is returned;
// batches already on the device still finish in the background.
// Calling Close again returns the first call's result.
func (b *Batcher) Close(ctx context.Context) error {
	b.drainOne.Do(func() { b.closeErr = b.drain(ctx) })
	return b.closeErr
}

func (b *Batcher) drain(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	giveUp := func() error {
		b.closeOne.Do(func() { close(b.kill) })
		b.mu.Lock()
		for b.head != nil {
			b.withdraw(b.head, ErrClosed)
		}
		b.mu.Unlock()
		return fmt.Errorf("batcher: draining: %w", ctx.Err())
	}
	select {
	case <-b.dispDone:
	case <-ctx.Done():
		return giveUp()
	}
	// The dispatcher has returned its slot; take every slot back, which
	// means every batch has been answered.
	for range b.cfg.MaxInflight {
		select {
		case <-b.free:
		case <-ctx.Done():
			return giveUp()
		}
	}
	b.closeOne.Do(func() {
		close(b.kill)
		close(b.stop)
	})
	var errs []error
	for _, bt := range b.batches {
		if bt.host != nil {
			errs = append(errs, bt.host.Free())
			bt.host, bt.in = nil, nil
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("batcher: freeing batch buffers: %w", err)
	}
	return nil
}

// dispatch forms batches and submits them, one at a time.
func (b *Batcher) dispatch() {
	defer close(b.dispDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var bt *batch
		select {
		case bt = <-b.free:
		case <-b.kill:
			return
		}
		if !b.waitAndForm(bt, timer) {
			b.free <- bt
			return
		}
		b.submit(bt, b.replies)
	}
}

// waitAndForm waits until a batch is due and fills bt's segments. It
// returns false when the batcher is closed and empty.
func (b *Batcher) waitAndForm(bt *batch, timer *time.Timer) bool {
	for {
		b.mu.Lock()
		if b.head == nil {
			closed := b.closed
			b.mu.Unlock()
			if closed {
				return false
			}
			select {
			case <-b.wake:
			case <-b.kill:
				return false
			}
			continue
		}
		now := time.Now()
		wait := b.head.enq.Add(b.cfg.MaxDelay).Sub(now)
		idle := b.cfg.IdleDispatch && b.inflight == 0
		if b.closed || b.queued >= b.cfg.MaxBatch || wait <= 0 || idle {
			b.form(bt, now)
			b.mu.Unlock()
			return true
		}
		b.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-b.wake:
		case <-timer.C:
		case <-b.kill:
			timer.Stop()
			return false
		}
		timer.Stop()
	}
}

// form moves queued images into bt, oldest first. b.mu must be held.
func (b *Batcher) form(bt *batch, now time.Time) {
	bt.segs = bt.segs[:0]
	take := 0
	encoded := len(b.head.in.Encoded) > 0
	topK, softmax := b.head.in.TopK, b.head.in.Softmax
	for it := b.head; it != nil && take < b.cfg.MaxBatch; {
		if (len(it.in.Encoded) > 0) != encoded {
			break // a batch is all encoded images or all tensors
		}
		if it.in.TopK != topK || it.in.Softmax != softmax {
			break // and asks for one ranking
		}
		left := it.in.N - it.sent
		n := left
		if room := b.cfg.MaxBatch - take; n > room {
			// Only a request larger than a whole batch is split; a smaller
			// one waits for the next batch rather than being torn in two.
			if it.in.N <= b.cfg.MaxBatch {
				break
			}
			n = room
		}
		bt.segs = append(bt.segs, seg{it: it, itemOff: it.sent, batchOff: take, n: n})
		if it.sent == 0 {
			it.dispatched = now
		}
		it.sent += n
		take += n
		next := it.next
		if it.sent == it.in.N {
			b.unlink(it)
		}
		it = next
	}
	b.queued -= take
	b.inflight++
	bt.images = take
	bt.padded = take
	bt.encoded = encoded
	if i, ok := slices.BinarySearch(b.preferred, take); !ok && i < len(b.preferred) {
		bt.padded = b.preferred[i]
	}
}

// submit assembles bt's input and hands it to the backend, whose answer
// arrives on reply. It reports false if the backend did not take it: bt
// is then finished already, with the error.
func (b *Batcher) submit(bt *batch, reply chan backend.Response) bool {
	cfg := &b.cfg
	imgBytes := b.imgElems * cfg.DType.Size()
	// A batch's own reply channel is read by the goroutine that submits it
	// (a request to an idle batcher), which may then run it (Inline).
	req := backend.Request{ID: uint64(bt.id), Input: &bt.tensor, Reply: reply, Inline: reply == bt.reply}
	s := bt.segs[0]
	whole := len(bt.segs) == 1 && s.itemOff == 0 && s.n == s.it.in.N && bt.padded == s.n
	bt.outDirect = whole
	bt.inDirect = whole && !bt.encoded && s.it.in.DType == cfg.DType && (cfg.AllocHost == nil || s.it.in.Pinned)
	req.TopK, req.Softmax = s.it.in.TopK, s.it.in.Softmax
	if whole {
		req.Output = s.it.out
		req.Top = s.it.in.Top
		// The one client's cancellation can still drop it from the
		// backend's queue.
		req.Ctx = s.it.ctx
	} else {
		req.Output = b.output(bt)
	}
	switch {
	case bt.encoded:
		for _, s := range bt.segs {
			bt.enc = append(bt.enc, s.it.in.Encoded[s.itemOff:s.itemOff+s.n]...)
		}
		req.Encoded = bt.enc
	case bt.inDirect:
		bt.tensor.Data = s.it.in.Data
		req.Pinned = s.it.in.Pinned
	case b.gathers(bt):
		for _, s := range bt.segs {
			bt.parts = append(bt.parts, s.it.in.Data[s.itemOff*imgBytes:(s.itemOff+s.n)*imgBytes])
		}
		req.Parts, req.Pinned = bt.parts, true
	default:
		if err := b.buffers(bt); err != nil {
			b.finish(bt, backend.Response{ID: req.ID, Err: err})
			return false
		}
		bt.tensor.Data = bt.in[:bt.padded*imgBytes]
		req.Pinned = bt.host != nil
		b.assemble(bt)
	}
	bt.tensor.Shape[0] = bt.padded
	bt.submitted = time.Now()
	req.SentAt = bt.submitted
	if err := b.sub.Submit(req); err != nil {
		b.finish(bt, backend.Response{ID: req.ID, Err: err})
		return false
	}
	return true
}

// gathers reports whether the backend can copy bt's images straight from
// its requests: all pinned and in the model's dtype.
func (b *Batcher) gathers(bt *batch) bool {
	for _, s := range bt.segs {
		if !s.it.in.Pinned || s.it.in.DType != b.cfg.DType {
			return false
		}
	}
	return true
}

// buffers allocates bt's batch buffers on first use.
func (b *Batcher) buffers(bt *batch) error {
	if bt.in != nil {
		return nil
	}
	cfg := &b.cfg
	size := cfg.MaxBatch * b.imgElems * cfg.DType.Size()
	if cfg.AllocHost != nil {
		hb, err := cfg.AllocHost(size)
		if err != nil {
			return fmt.Errorf("allocating a %d-byte batch buffer: %w", size, err)
		}
		if len(hb.Bytes()) < size {
			hb.Free()
			return fmt.Errorf("host allocator returned %d bytes for a %d-byte batch buffer", len(hb.Bytes()), size)
		}
		bt.host, bt.in = hb, hb.Bytes()[:size]
	} else {
		bt.in = make([]byte, size)
	}
	return nil
}

// output returns bt's pooled logits buffer for its padded batch.
func (b *Batcher) output(bt *batch) []float32 {
	if bt.out == nil {
		bt.out = make([]float32, b.cfg.MaxBatch*b.cfg.Classes)
	}
	return bt.out[:bt.padded*b.cfg.Classes]
}

// minParallelBytes is the batch size below which one goroutine copies: a
// hand-off costs about a microsecond, a 64 KiB copy a few.
const minParallelBytes = 1 << 20

// assemble copies every segment's images into bt.in, in parallel when the
// batch is large.
func (b *Batcher) assemble(bt *batch) {
	bytes := bt.images * b.imgElems * b.cfg.DType.Size()
	parts := 1
	if bytes >= minParallelBytes {
		parts = min(b.cfg.CopyWorkers+1, bt.images)
	}
	per := (bt.images + parts - 1) / parts
	lo := per // this goroutine copies [0, per)
	for lo < bt.images {
		hi := min(lo+per, bt.images)
		bt.wg.Add(1)
		b.jobs <- copyJob{b: bt, lo: lo, hi: hi}
		lo = hi
	}
	b.copyImages(bt, 0, min(per, bt.images))
	bt.wg.Wait()
}

func (b *Batcher) copyWorker() {
	for {
		select {
		case j := <-b.jobs:
			b.copyImages(j.b, j.lo, j.hi)
			j.b.wg.Done()
		case <-b.stop:
			return
		}
	}
}

// copyImages converts batch images [lo, hi) from their requests.
func (b *Batcher) copyImages(bt *batch, lo, hi int) {
	dstImg := b.imgElems * b.cfg.DType.Size()
	for _, s := range bt.segs {
		from, to := max(lo, s.batchOff), min(hi, s.batchOff+s.n)
		if from >= to {
			continue
		}
		srcImg := b.imgElems * s.it.in.DType.Size()
		k := s.itemOff + from - s.batchOff // first image within the item
		src := s.it.in.Data[k*srcImg : (k+to-from)*srcImg]
		s.it.cv.images(bt.in[from*dstImg:to*dstImg], src)
	}
}

// collect answers batches as the backend finishes them.
func (b *Batcher) collect() {
	for {
		select {
		case resp := <-b.replies:
			if resp.ID >= uint64(len(b.batches)) {
				continue // not ours; cannot happen with a correct backend
			}
			b.finish(b.batches[resp.ID], resp)
		case <-b.stop:
			return
		}
	}
}

// finish splits a batch's logits back to its requests and frees the slot.
func (b *Batcher) finish(bt *batch, resp backend.Response) {
	err := resp.Err
	c := b.cfg.Classes
	k, softmax := bt.segs[0].it.in.TopK, bt.segs[0].it.in.Softmax
	ranked := k > 0 && resp.Top != nil
	if ranked && err == nil && len(resp.Top) < bt.padded*k {
		err = fmt.Errorf("backend answered %d ranked classes for a batch of %d images, top %d", len(resp.Top), bt.padded, k)
	}
	if !ranked && err == nil && len(resp.Logits) < bt.padded*c {
		err = fmt.Errorf("backend answered %d logits for a batch of %d images of %d classes", len(resp.Logits), bt.padded, c)
	}
	if ranked {
		for _, s := range bt.segs {
			if err == nil && (!bt.outDirect || &resp.Top[0] != &s.it.in.Top[0]) {
				copy(s.it.in.Top[s.itemOff*k:(s.itemOff+s.n)*k], resp.Top[s.batchOff*k:(s.batchOff+s.n)*k])
			}
		}
	} else if err == nil && !bt.outDirect {
		for _, s := range bt.segs {
			copy(s.it.out[s.itemOff*c:(s.itemOff+s.n)*c], resp.Logits[s.batchOff*c:(s.batchOff+s.n)*c])
		}
	} else if err == nil && &resp.Logits[0] != &bt.segs[0].it.out[0] {
		// The backend did not write into Output; copy what it returned.
		copy(bt.segs[0].it.out, resp.Logits)
	}
	if !ranked && k > 0 && err == nil {
		// No Postprocessor: rank the logits here, as the device would.
		for _, s := range bt.segs {
			topk.BestRows(s.it.in.Top[s.itemOff*k:(s.itemOff+s.n)*k], s.it.out[s.itemOff*c:(s.itemOff+s.n)*c], c, k, softmax)
		}
	}
	stats := BatchStats{
		Images: bt.images, Padded: bt.padded, Requests: len(bt.segs),
		Compute: resp.Compute, Latency: time.Since(bt.submitted), Err: err,
	}
	b.mu.Lock()
	b.inflight--
	idle := b.inflight == 0 && b.head != nil
	for _, s := range bt.segs {
		it := s.it
		it.finished += s.n
		it.compute += resp.Compute
		it.batchSize = max(it.batchSize, bt.images)
		it.hostRanked = it.hostRanked || k > 0 && !ranked
		if b.cfg.Stages {
			it.stages, it.hostDone = resp.Stages, resp.DoneAt
		}
		if err != nil && it.err == nil {
			it.err = err
		}
		if err == nil && len(resp.ImageErrs) >= bt.images {
			imageErrors(it, s, resp.ImageErrs)
		}
		b.maybeDone(it)
	}
	b.mu.Unlock()
	clear(bt.segs) // drop item pointers: items are pooled
	bt.segs = bt.segs[:0]
	clear(bt.parts) // and the requests' memory
	bt.parts = bt.parts[:0]
	clear(bt.enc)
	bt.enc = bt.enc[:0]
	bt.tensor.Data = nil
	if b.cfg.Observe != nil {
		b.cfg.Observe(stats)
	}
	b.free <- bt
	if idle && b.cfg.IdleDispatch {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// ImageError is a request's failure to decode one of its encoded images:
// the first that failed, by index within the request.
type ImageError struct {
	Index  int // the image within the request
	Failed int // how many of the request's images failed
	Err    error
}

func (e *ImageError) Error() string {
	if e.Failed > 1 {
		return fmt.Sprintf("image %d: %v (and %d more failed)", e.Index, e.Err, e.Failed-1)
	}
	return fmt.Sprintf("image %d: %v", e.Index, e.Err)
}

func (e *ImageError) Unwrap() error { return e.Err }

// imageErrors records the decode failures of s's images in its item: the
// lowest index wins (segments of an item are answered in any order).
// b.mu must be held.
func imageErrors(it *item, s seg, errs []error) {
	for i, e := range errs[s.batchOff : s.batchOff+s.n] {
		if e == nil {
			continue
		}
		ie, ok := it.err.(*ImageError)
		switch {
		case it.err == nil:
			it.err = &ImageError{Index: s.itemOff + i, Failed: 1, Err: e}
		case ok:
			ie.Failed++
			if s.itemOff+i < ie.Index {
				ie.Index, ie.Err = s.itemOff+i, e
			}
		}
	}
}
