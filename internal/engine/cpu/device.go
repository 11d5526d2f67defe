package cpu

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"goinfer/internal/engine"
	"goinfer/internal/hugepage"
)

// device is the host seen through the engine's device interface: buffers
// are Go memory and streams run their work at once, on the calling
// goroutine.
type device struct{}

// Name implements engine.Device.
func (device) Name() string { return "cpu" }

// Alloc implements engine.Device.
func (device) Alloc(n int) (engine.Buffer, error) { return newBuffer(n) }

// AllocHost implements engine.Device. Host and device memory are the same
// thing here; the returned buffer is also an engine.Buffer.
func (device) AllocHost(n int) (engine.HostBuffer, error) { return newBuffer(n) }

// NewStream implements engine.Device.
func (device) NewStream() (engine.Stream, error) { return &stream{}, nil }

// NewEvent implements engine.Device.
func (device) NewEvent() (engine.Event, error) { return &event{}, nil }

// Buffer is the cpu engine's memory: both its engine.Buffer and its
// engine.HostBuffer, so a pipeline may hand host staging buffers straight to
// Forward and skip the copies.
type Buffer struct {
	data  []byte
	freed bool
}

// maxAlloc bounds one allocation (1 TiB) so that a nonsense size is an
// error rather than an out-of-memory crash.
const maxAlloc = 1 << 40

// hugeBuffer is the size from which a buffer comes from hugepage.
const hugeBuffer = 1 << 20

func newBuffer(n int) (*Buffer, error) {
	if n < 0 || n > maxAlloc {
		return nil, fmt.Errorf("cpu: cannot allocate %d bytes", n)
	}
	if n >= hugeBuffer {
		// Request tensors and staging buffers (a few MiB each, first
		// touched by a copy) in huge pages; big Go allocations are
		// page-aligned, so float32 views are aligned too.
		return &Buffer{data: hugepage.Bytes(n)}, nil
	}
	// Back the bytes with uint64s so that float32 views are aligned.
	words := make([]uint64, (n+7)/8)
	var data []byte
	if n > 0 {
		data = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
	} else {
		data = []byte{}
	}
	return &Buffer{data: data}, nil
}

// Size implements engine.Buffer.
func (b *Buffer) Size() int { return len(b.data) }

// Bytes implements engine.HostBuffer; it is nil once the buffer is freed.
func (b *Buffer) Bytes() []byte { return b.data }

// Free implements engine.Buffer. Freeing twice is an error.
func (b *Buffer) Free() error {
	if b.freed {
		return errors.New("cpu: buffer freed twice")
	}
	b.freed, b.data = true, nil
	return nil
}

// bufferBytes returns b's bytes [off, off+n) or an error naming what is
// wrong: a foreign or freed buffer, or a range outside it.
func bufferBytes(b engine.Buffer, off, n int, what string) ([]byte, error) {
	cb, ok := b.(*Buffer)
	if !ok || cb == nil {
		return nil, fmt.Errorf("cpu: %s is a %T, not a cpu engine buffer", what, b)
	}
	if cb.freed {
		return nil, fmt.Errorf("cpu: %s was freed", what)
	}
	if off < 0 || n < 0 || off > len(cb.data)-n {
		return nil, fmt.Errorf("cpu: %s: bytes [%d, %d) out of range of a %d-byte buffer", what, off, off+n, len(cb.data))
	}
	return cb.data[off : off+n], nil
}

// stream runs work synchronously: when a call returns, its work is done.
type stream struct {
	closed bool
}

func (s *stream) check() error {
	if s.closed {
		return errors.New("cpu: stream used after Close")
	}
	return nil
}

// CopyToDevice implements engine.Stream.
func (s *stream) CopyToDevice(dst engine.Buffer, off int, src []byte) error {
	if err := s.check(); err != nil {
		return err
	}
	d, err := bufferBytes(dst, off, len(src), "copy destination")
	if err != nil {
		return err
	}
	copy(d, src)
	return nil
}

// CopyToHost implements engine.Stream.
func (s *stream) CopyToHost(dst []byte, src engine.Buffer, off int) error {
	if err := s.check(); err != nil {
		return err
	}
	b, err := bufferBytes(src, off, len(dst), "copy source")
	if err != nil {
		return err
	}
	copy(dst, b)
	return nil
}

// Record implements engine.Stream: the event completes now.
func (s *stream) Record(e engine.Event) error {
	if err := s.check(); err != nil {
		return err
	}
	ev, ok := e.(*event)
	if !ok || ev == nil {
		return fmt.Errorf("cpu: Record of a %T, not a cpu engine event", e)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if ev.closed {
		return errors.New("cpu: Record of a closed event")
	}
	ev.at, ev.recorded = time.Now(), true
	return nil
}

// Wait implements engine.Stream. Work recorded on any cpu stream is already
// done, so there is nothing to wait for.
func (s *stream) Wait(e engine.Event) error {
	if err := s.check(); err != nil {
		return err
	}
	if ev, ok := e.(*event); !ok || ev == nil {
		return fmt.Errorf("cpu: Wait on a %T, not a cpu engine event", e)
	}
	return nil
}

// Synchronize implements engine.Stream.
func (s *stream) Synchronize() error { return s.check() }

// Close implements engine.Stream.
func (s *stream) Close() error {
	if s.closed {
		return errors.New("cpu: stream closed twice")
	}
	s.closed = true
	return nil
}

// event is a timestamp. Pipelines record an event on one goroutine and
// query it on another, hence the lock.
type event struct {
	mu       sync.Mutex
	at       time.Time
	recorded bool
	closed   bool
}

// Synchronize implements engine.Event. As with CUDA, an event never
// recorded has no pending work.
func (e *event) Synchronize() error { return nil }

// Done implements engine.Event.
func (e *event) Done() (bool, error) { return true, nil }

func (e *event) stamp() (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at, e.recorded
}

// Since implements engine.Event with the wall time between the records.
func (e *event) Since(start engine.Event) (time.Duration, error) {
	s, ok := start.(*event)
	if !ok || s == nil {
		return 0, fmt.Errorf("cpu: Since of a %T, not a cpu engine event", start)
	}
	t1, ok1 := e.stamp()
	t0, ok0 := s.stamp()
	if !ok0 || !ok1 {
		return 0, errors.New("cpu: Since on an event that was never recorded")
	}
	return t1.Sub(t0), nil
}

// Close implements engine.Event.
func (e *event) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("cpu: event closed twice")
	}
	e.closed = true
	return nil
}
