package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"goinfer/internal/server/batcher"
)

// kind classifies a failed request once, so that HTTP, gRPC and the metrics
// agree on what happened.
type kind uint8

const (
	kindInvalid      kind = iota // bad request: 400 / INVALID_ARGUMENT
	kindNotFound                 // unknown model or version: 404 / NOT_FOUND
	kindUnavailable              // loading: 503 / UNAVAILABLE
	kindQueueFull                // back-pressure: 503 + Retry-After / RESOURCE_EXHAUSTED
	kindTooLarge                 // body over --max_request_bytes: 413 / RESOURCE_EXHAUSTED
	kindCancelled                // the client went away: 499 / CANCELLED
	kindDeadline                 // --request_timeout or the client's deadline: 504 / DEADLINE_EXCEEDED
	kindInternal                 // a bug or a device failure: 500 / INTERNAL
	kindMemoryFull               // --max_inflight_bytes spent: 503 + Retry-After / RESOURCE_EXHAUSTED
	kindBodyTimeout              // the body did not arrive within --read_timeout: 408 / DEADLINE_EXCEEDED
	kindShuttingDown             // the server drains: 503 + Connection: close / UNAVAILABLE
)

// statusLabel is the value of the "status" label of goinfer_requests_total.
func (k kind) statusLabel() string {
	switch k {
	case kindInvalid:
		return "invalid_argument"
	case kindNotFound:
		return "not_found"
	case kindUnavailable, kindShuttingDown:
		return "unavailable"
	case kindQueueFull:
		return "queue_full"
	case kindTooLarge:
		return "too_large"
	case kindCancelled:
		return "cancelled"
	case kindDeadline:
		return "deadline_exceeded"
	case kindMemoryFull:
		return "memory_full"
	case kindBodyTimeout:
		return "body_timeout"
	}
	return "internal"
}

// statusClientClosed is nginx's code for a client that closed the request;
// nobody reads it, but logs and metrics keep it apart from server errors.
const statusClientClosed = 499

func (k kind) httpStatus() int {
	switch k {
	case kindInvalid:
		return http.StatusBadRequest
	case kindNotFound:
		return http.StatusNotFound
	case kindUnavailable, kindShuttingDown, kindQueueFull, kindMemoryFull:
		return http.StatusServiceUnavailable
	case kindBodyTimeout:
		return http.StatusRequestTimeout
	case kindTooLarge:
		return http.StatusRequestEntityTooLarge
	case kindCancelled:
		return statusClientClosed
	case kindDeadline:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

func (k kind) grpcCode() codes.Code {
	switch k {
	case kindInvalid:
		return codes.InvalidArgument
	case kindNotFound:
		return codes.NotFound
	case kindUnavailable, kindShuttingDown:
		return codes.Unavailable
	case kindQueueFull, kindTooLarge, kindMemoryFull:
		return codes.ResourceExhausted
	case kindCancelled:
		return codes.Canceled
	case kindDeadline, kindBodyTimeout:
		return codes.DeadlineExceeded
	}
	return codes.Internal
}

// apiError is an error with its protocol-neutral kind. Its message is what
// the client sees; it names the offending field.
type apiError struct {
	kind kind
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func errorf(k kind, format string, args ...any) *apiError {
	return &apiError{kind: k, msg: fmt.Sprintf(format, args...)}
}

// classify maps any error from handling a request to its kind and the
// message for the client.
func classify(err error) (kind, string) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae.kind, ae.msg
	case errors.Is(err, batcher.ErrQueueFull):
		return kindQueueFull, "the server's queue is full; retry later"
	case errors.Is(err, batcher.ErrClosed):
		return kindShuttingDown, "the server is shutting down"
	case errors.Is(err, batcher.ErrTooLarge), errors.Is(err, batcher.ErrInvalid):
		return kindInvalid, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return kindDeadline, "request timed out: " + err.Error()
	case errors.Is(err, context.Canceled):
		return kindCancelled, "request cancelled"
	}
	return kindInternal, "inference failed: " + err.Error()
}

// grpcError turns err into a gRPC status error.
func grpcError(err error) error {
	k, msg := classify(err)
	return status.Error(k.grpcCode(), msg)
}
