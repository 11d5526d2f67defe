// Package backend is the inference pipeline behind `bench` and `serve`:
// request queue -> H2D stage -> N prediction workers -> D2H stage ->
// responses, mirroring the reference's threads with goroutines. Each stage
// talks to the device only through engine interfaces, so the cpu engine runs
// the same code (its copies are plain memory copies).
//
// # Concurrency design
//
// One bounded queue (Config.QueueDepth) is shared by all devices. Each
// device has one pipeline of goroutines connected by channels:
//
//	queue -> H2D stage -> workers[0..N) -> D2H stage -> reply stage -> client
//
// What travels is a *slot: one request's device input and output buffers,
// pinned output buffer and events, all allocated once when the model loads
// (Config.Slots of them). The H2D stage takes a free slot first and only then
// a request, so a busy device leaves requests to an idle one (least-loaded
// dispatch without a scheduler) and the number of requests inside a pipeline
// is bounded by its slots. Every channel has room for every slot, so a
// stage never blocks on the next one; only the free list applies
// back-pressure.
//
// No stage waits for the device except the reply stage. The H2D stage
// copies the input through a small ring of pinned staging buffers (or
// straight from the request, when it is pinned already) onto its own
// stream and records an event; the worker makes its stream wait for
// that event (on the device: Stream.Wait), enqueues the forward and records
// an event; the D2H stage makes its stream wait for that one, enqueues the
// copy into the slot's pinned output and records a last event. The reply
// stage waits for it on the host, copies the logits into the response,
// returns the slot to the free list, and answers. A slot is reused only
// after its last event, which follows all device work on its buffers; a
// staging buffer only after the event of the copy that read it. With
// Config.CopyStreams off, the copies run on the worker's stream instead.
//
// A request marked Request.Inline that finds a device idle (nothing of it
// between the H2D stage's admission and the reply stage's end, no request
// queued, a slot free) skips the stages: the submitting goroutine runs
// the same steps on the same streams, slot and worker 0's instance, and
// sends the Response before Submit returns. The pipeline's gate keeps the
// stages from admitting a request until such a run ends, and a run starts
// only when no request is admitted, so the two never share a slot, stream
// or instance.
//
// Goroutines that call the engine lock their OS thread, since CUDA keeps
// its current device per thread. Requests cancelled while queued, requests
// the model cannot run and requests arriving after a failed load are
// answered without touching the device; an engine error fails only the
// request it happened to.
package backend

import (
	"context"
	"errors"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/tensor"
	"goinfer/internal/topk"
)

// Request is one batch of images to classify.
type Request struct {
	// ID is echoed in the Response.
	ID uint64
	// Input is [n, C, H, W] in the model's input dtype. The backend reads it
	// until the Response is sent; the caller must not modify it before.
	Input *tensor.Tensor
	// SentAt is when the client sent the request (monotonic clock).
	SentAt time.Time
	// Ctx, if not nil, cancels the request while it waits in a queue: it is
	// answered with Ctx.Err() and never reaches the device.
	Ctx context.Context
	// Reply receives exactly one Response. It must have room (buffered) or
	// a reader: the backend blocks on it.
	Reply chan<- Response
	// Output, if it has room for n*Classes values, receives the logits
	// (and Response.Logits aliases it); otherwise the backend allocates.
	Output []float32
	// Pinned says that Input.Data lies in host memory the engine can copy
	// from asynchronously (an engine.HostBuffer: page-locked on a GPU), as
	// the reference's frontend pins its tensors. The H2D stage then copies
	// it straight to the device instead of through its staging buffers.
	// With Parts, it says the same of every part.
	Pinned bool
	// Parts, if not empty, hold Input's bytes in pieces and Input.Data is
	// not read: a batch gathered from several requests' own buffers, which
	// the H2D stage copies to the device one after another, so that no one
	// assembles the batch on the host. They may cover fewer images than
	// Input's shape says (a batch padded up to a compiled size): the
	// padding images are whatever the device buffer held, and so are their
	// logits.
	Parts [][]byte
	// Encoded, if not empty, holds one encoded image (JPEG, PNG) per
	// image of Input's shape, or fewer for a batch padded up to a compiled
	// size (the padding slots hold whatever the device buffer held), and
	// Input.Data is not read: the pipeline's
	// Decoder (Config.NewDecoder) decodes and preprocesses them into the
	// device input in place of the H2D copy, so that decoding one request
	// overlaps the forward of another. Images that fail to decode are
	// reported in Response.ImageErrs; the others are answered.
	Encoded [][]byte
	// Inline says that the submitter waits for this Response and submits
	// nothing meanwhile, so that, when a device is idle (nothing of it in
	// any stage, no request queued, a slot free) and Reply has room,
	// Submit may run the request on the submitting goroutine and send the
	// Response before it returns, without the stages' four goroutine
	// hand-offs. A goroutine that submits many requests before reading
	// their answers must not set it: each Submit would wait for its
	// request, and the device would run them one at a time.
	Inline bool
	// TopK > 0 asks for the k best classes of each image in place of its
	// logits, ranked on the device after the forward by the pipeline's
	// Postprocessor (Config.NewPostprocessor): by the softmax of the
	// logits, and valued by it, with Softmax set, else by the logits. Only
	// the k classes per image are copied back (Response.Top). Without a
	// Postprocessor, or for k over half the classes (the pairs would be no
	// smaller than the logits), the logits come back as usual.
	TopK    int
	Softmax bool
	// Top, if it has room for n*TopK classes, receives them (and
	// Response.Top aliases it); otherwise the backend allocates.
	Top []topk.Class
}

// Postprocessor ranks a batch's logits on the device, so that only the
// best classes of each image cross to the host. It must be safe for
// concurrent use (workers without copy streams call it at once).
type Postprocessor interface {
	// TopK enqueues on st the k best classes of each of the rows rows of
	// `classes` float32 logits in logits, into dst as rows*k pairs of
	// TopPairBytes (index int32, value float32, little-endian), best
	// first: by the softmax with softmax set, else by the logits, ties to
	// the lower index, NaN last (package topk's order).
	TopK(logits engine.Buffer, rows, classes, k int, softmax bool, dst engine.Buffer, st engine.Stream) error
	// Close frees the postprocessor once its work has finished.
	Close() error
}

// TopPairBytes is the size of one ranked class a Postprocessor writes.
const TopPairBytes = 8

// Decoder decodes encoded images into a pipeline's device input buffer: a
// batch of images preprocessed to the model's input, in its dtype and
// layout. One Decoder serves one stream at a time (the pipeline makes one
// per copy stream, or per worker without copy streams).
type Decoder interface {
	// Decode enqueues the decode of images into dst on st and returns once
	// it is enqueued (dst is ready when st passes this point). imageErrs
	// has one entry per image, nil for those decoded; err is a failure of
	// the whole batch.
	Decode(images [][]byte, dst engine.Buffer, st engine.Stream) (imageErrs []error, err error)
	// Close frees the decoder once its work has finished.
	Close() error
}

// Response answers one Request.
type Response struct {
	ID     uint64
	Logits []float32 // n*Classes, row-major; nil when Top holds the answer
	// Top, when the request's TopK was ranked on the device, holds n*TopK
	// classes, the best first for each image.
	Top     []topk.Class
	N       int
	Classes int
	SentAt  time.Time // copied from the request
	DoneAt  time.Time // when the logits were on the host
	Err     error
	// Stage timings, for profiles and server metrics.
	QueueWait time.Duration // submit to start of the H2D stage
	Compute   time.Duration // device time of the forward (events)
	Worker    int           // which prediction worker ran it
	// Device is the index of the device pipeline that ran it (the position
	// of its loader in StartDevices).
	Device int
	// ImageErrs, for a request of Encoded images of which some failed to
	// decode, says why for each of them (nil for those decoded; their
	// logits are valid). Nil when every image decoded.
	ImageErrs []error
	// Stages says when the request passed each stage, for --profile
	// traces. Stages that did not run (a rejected request) stay zero.
	Stages Stages
}

// Stages holds the host times at which a request passed the pipeline's
// stages, and the device spans of its copies and forward measured with
// engine events (zero unless Config.Profile is set or when the engine cannot
// time its events). Device spans are placed on the host clock through an
// anchor event recorded when the pipeline started, so they line up with the
// host times.
type Stages struct {
	Queued   time.Time // accepted by Submit
	Dequeued time.Time // taken from the queue by the H2D stage
	// Staged is when the H2D stage had copied the input into pinned staging
	// memory and enqueued its copy to the device.
	Staged                 time.Time
	WorkerStart, WorkerEnd time.Time // the worker took it / had enqueued the forward
	D2HStart, D2HEnd       time.Time // the D2H stage took it / had enqueued the copy back
	ReplyStart             time.Time // the reply stage began waiting for the device
	GPUH2D, GPUCompute     Span      // device time of the input copy and the forward
	GPUD2H                 Span      // device time of the logits copy
}

// Span is an interval on the host clock.
type Span struct{ Start, End time.Time }

// Errors a Submit can return.
var (
	// ErrQueueFull is returned by TrySubmit when the request queue is full.
	ErrQueueFull = errors.New("request queue is full")
	// ErrClosed is returned once Close has begun.
	ErrClosed = errors.New("backend is closed")
	// ErrInvalidInput wraps the errors of requests the model cannot run (a
	// wrong shape or dtype, a batch larger than MaxBatch), so that servers
	// can answer them as the client's fault.
	ErrInvalidInput = errors.New("invalid input")
)

// Submitter is what a load generator drives and a server feeds: the
// in-process Backend, or a client of a remote goinfer server.
type Submitter interface {
	// Submit queues req, blocking while the queue is full. The response
	// (or the error that ended the request) arrives on req.Reply; an error
	// returned here means no response will be sent.
	Submit(req Request) error
}
