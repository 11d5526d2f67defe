package server

import (
	"context"
	"errors"
	"sync"
	"time"
)

// gRPC-Go reads a message before any hook sees its length, so the server
// cannot take a message's bytes from the in-flight budget before they
// arrive, as it does for HTTP bodies. Instead the tap (tapInfer) takes a
// reservation for every inference RPC before its message is read, and the
// RPC holds it until ModelInfer starts (then the request holds its decoded
// message, as any request does) or the RPC ends: at most
// budget/reservation RPCs receive at once, and further RPCs are refused
// RESOURCE_EXHAUSTED before their messages are read. A message no larger
// than the reservation (a batch of a few images) is thus received within
// the budget; a larger one can hold up to --max_request_bytes beyond its
// reservation while it arrives.
//
// Counting gRPC's receive buffers themselves (a mem.BufferPool that takes
// from the budget) was tried and dropped: gRPC-Go lets some buffers of
// reset streams go to the garbage collector without returning them to the
// pool, so such a count drifts upward until it refuses everything.

// grpcRecvReserve is what an inference RPC takes from the budget before its
// message is read: like the first read of an HTTP body (firstReadBytes), as
// much as a typical request, but no more than a quarter of the budget.
func (s *Server) grpcRecvReserve() int64 {
	return min(firstReadBytes, s.budget.capacity/4)
}

// recvReservation is what an inference RPC holds of the budget while its
// message arrives.
type recvReservation struct {
	once  sync.Once
	b     *memBudget
	n     int64
	timer *time.Timer // --read_timeout; nil if none
}

// release gives the reservation back and stops its timer. It reports
// whether this call released it (later calls do nothing).
func (r *recvReservation) release() bool {
	return r.releaseOnce(func() {
		if r.timer != nil {
			r.timer.Stop()
		}
	})
}

// releaseOnce gives the reservation back, then calls also, unless it was
// given back before. The timer's own callback releases with a no-op also:
// it may run before r.timer is set.
func (r *recvReservation) releaseOnce(also func()) (released bool) {
	r.once.Do(func() {
		also()
		r.b.release(r.n)
		released = true
	})
	return released
}

type recvReservationKey struct{}

// errRecvTimeout cuts off an RPC whose message did not arrive within
// --read_timeout.
var errRecvTimeout = errors.New("the request message did not arrive in time (--read_timeout)")

// releaseRecvReservation gives back the reservation of the RPC of ctx, if
// it holds one: its message has been received.
func releaseRecvReservation(ctx context.Context) {
	if r, ok := ctx.Value(recvReservationKey{}).(*recvReservation); ok {
		r.release()
	}
}
