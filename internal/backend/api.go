// Package backend is the inference pipeline behind `bench` and `serve`:
// request queue -> H2D stage -> N prediction workers -> D2H stage ->
// responses, mirroring the reference's threads with goroutines. Each stage
// talks to the device only through engine interfaces, so the cpu engine runs
// the same code (its copies are plain memory copies).
package backend

import (
	"context"
	"errors"
	"time"

	"goinfer/internal/tensor"
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
}

// Response answers one Request.
type Response struct {
	ID      uint64
	Logits  []float32 // n*Classes, row-major
	N       int
	Classes int
	SentAt  time.Time // copied from the request
	DoneAt  time.Time // when the logits were on the host
	Err     error
	// Stage timings, for profiles and server metrics.
	QueueWait time.Duration // submit to start of the H2D stage
	Compute   time.Duration // device time of the forward (events)
	Worker    int           // which prediction worker ran it
}

// Errors a Submit can return.
var (
	// ErrQueueFull is returned by TrySubmit when the request queue is full.
	ErrQueueFull = errors.New("request queue is full")
	// ErrClosed is returned once Close has begun.
	ErrClosed = errors.New("backend is closed")
)

// Submitter is what a load generator drives and a server feeds: the
// in-process Backend, or a client of a remote goinfer server.
type Submitter interface {
	// Submit queues req, blocking while the queue is full. The response
	// (or the error that ended the request) arrives on req.Reply; an error
	// returned here means no response will be sent.
	Submit(req Request) error
}
