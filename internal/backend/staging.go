package backend

import (
	"errors"
	"fmt"

	"goinfer/internal/engine"
)

// stagingRing is a few pinned host buffers that inputs pass through on
// their way to the device. A request's input (any size) is copied chunk by
// chunk: host memcpy into the next buffer, then an asynchronous copy to the
// device, then an event. Before a buffer is written again, the host waits
// for its event, i.e. for the device copy that last read it. With three
// buffers the memcpy of one chunk overlaps the DMA of the previous ones, and
// pinned memory stays small whatever the batch size.
//
// A ring belongs to one goroutine (the H2D stage, or one worker).
type stagingRing struct {
	dec    Decoder // decodes Encoded requests on the ring's stream, if any
	bufs   []engine.HostBuffer
	fences []engine.Event
	armed  []bool // the fence has been recorded since the buffer was last reused
	next   int
	chunk  int
}

// newStagingRing allocates count pinned buffers of chunk bytes. On error the
// partial ring is returned so the caller can release it.
func newStagingRing(dev engine.Device, chunk, count int) (*stagingRing, error) {
	r := &stagingRing{chunk: chunk}
	for i := range count {
		hb, err := dev.AllocHost(chunk)
		if err != nil {
			return r, fmt.Errorf("allocating pinned staging buffer %d (%d bytes): %w", i, chunk, err)
		}
		r.bufs = append(r.bufs, hb)
		if len(hb.Bytes()) < chunk {
			return r, fmt.Errorf("pinned staging buffer %d: got %d bytes, want %d", i, len(hb.Bytes()), chunk)
		}
		ev, err := dev.NewEvent()
		if err != nil {
			return r, fmt.Errorf("creating the event of staging buffer %d: %w", i, err)
		}
		r.fences = append(r.fences, ev)
		r.armed = append(r.armed, false)
	}
	return r, nil
}

// copyIn enqueues the copy of src to dst at offset at, on st.
func (r *stagingRing) copyIn(st engine.Stream, dst engine.Buffer, at int, src []byte) error {
	if at+len(src) > dst.Size() {
		return fmt.Errorf("%d bytes at offset %d do not fit the %d-byte device buffer", len(src), at, dst.Size())
	}
	for off := 0; off < len(src); {
		m := min(r.chunk, len(src)-off)
		i := r.next
		r.next = (i + 1) % len(r.bufs)
		if r.armed[i] {
			if err := r.fences[i].Synchronize(); err != nil {
				return fmt.Errorf("waiting for staging buffer %d: %w", i, err)
			}
			r.armed[i] = false
		}
		b := r.bufs[i].Bytes()[:m]
		copy(b, src[off:off+m])
		if err := st.CopyToDevice(dst, at+off, b); err != nil {
			return fmt.Errorf("copying %d bytes to device offset %d: %w", m, at+off, err)
		}
		if err := st.Record(r.fences[i]); err != nil {
			// Without its fence the buffer is free only once the stream is.
			if serr := st.Synchronize(); serr != nil {
				return errors.Join(fmt.Errorf("recording staging event %d: %w", i, err), serr)
			}
			return fmt.Errorf("recording staging event %d: %w", i, err)
		}
		r.armed[i] = true
		off += m
	}
	return nil
}

// release waits for pending copies and frees the ring.
func (r *stagingRing) release() error {
	var errs []error
	for i, ev := range r.fences {
		if r.armed[i] {
			errs = append(errs, ev.Synchronize())
		}
		errs = append(errs, ev.Close())
	}
	for _, b := range r.bufs {
		errs = append(errs, b.Free())
	}
	return errors.Join(errs...)
}
