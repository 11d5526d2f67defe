package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
)

// device is one GPU. Every method that calls CUDA pins the goroutine to its
// OS thread and makes the device current there first: the runtime's current
// device (and the driver's current context) are per thread, and goroutines
// move between threads. Callers need not lock threads themselves.
type device struct {
	libs    *cu.Libs
	rt      *cu.Runtime
	ordinal int
	name    string
}

func newDevice(libs *cu.Libs, ordinal int) (*device, error) {
	n, err := libs.Runtime.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda engine: device %d does not exist (%d visible)", ordinal, n)
	}
	d := &device{libs: libs, rt: libs.Runtime, ordinal: ordinal}
	name, err := libs.Driver.DeviceName(ordinal)
	if err != nil {
		name = "GPU"
	}
	d.name = fmt.Sprintf("%s (cuda:%d)", name, ordinal)
	return d, nil
}

// enter pins the goroutine and makes the device current; the caller must
// call runtime.UnlockOSThread when done (even on error).
func (d *device) enter() error {
	runtime.LockOSThread()
	return d.rt.SetDevice(d.ordinal)
}

func (d *device) Name() string { return d.name }

// alloc is Alloc with a label for the error: which allocation failed.
func (d *device) alloc(n int64, what string) (cu.DevPtr, error) {
	p, err := d.rt.Malloc(n)
	if err != nil {
		return 0, fmt.Errorf("cuda engine: allocating %s: %w", what, err)
	}
	return p, nil
}

func (d *device) Alloc(n int) (engine.Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda engine: buffer size %d is not positive", n)
	}
	defer runtime.UnlockOSThread()
	if err := d.enter(); err != nil {
		return nil, err
	}
	p, err := d.alloc(int64(n), "a device buffer")
	if err != nil {
		return nil, err
	}
	return &buffer{d: d, ptr: p, size: n}, nil
}

func (d *device) AllocHost(n int) (engine.HostBuffer, error) {
	defer runtime.UnlockOSThread()
	if err := d.enter(); err != nil {
		return nil, err
	}
	b, err := d.rt.HostAlloc(n)
	if err != nil {
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	return &hostBuffer{d: d, b: b}, nil
}

func (d *device) NewStream() (engine.Stream, error) {
	defer runtime.UnlockOSThread()
	if err := d.enter(); err != nil {
		return nil, err
	}
	s, err := d.rt.StreamCreate()
	if err != nil {
		return nil, err
	}
	return &stream{d: d, s: s}, nil
}

func (d *device) NewEvent() (engine.Event, error) {
	defer runtime.UnlockOSThread()
	if err := d.enter(); err != nil {
		return nil, err
	}
	e, err := d.rt.EventCreate(true)
	if err != nil {
		return nil, err
	}
	return &event{d: d, e: e}, nil
}

// buffer is device memory.
type buffer struct {
	d    *device
	ptr  cu.DevPtr
	size int
	mu   sync.Mutex
}

func (b *buffer) Size() int { return b.size }

// Ptr is the device address, for code that talks to CUDA directly.
func (b *buffer) Ptr() cu.DevPtr { return b.ptr }

func (b *buffer) Free() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ptr == 0 {
		return nil
	}
	defer runtime.UnlockOSThread()
	if err := b.d.enter(); err != nil {
		return err
	}
	err := b.d.rt.Free(b.ptr)
	b.ptr = 0
	return err
}

// hostBuffer is page-locked host memory.
// RegisterHost implements engine.HostRegisterer with cudaHostRegister.
func (d *device) RegisterHost(b []byte) (engine.HostBuffer, error) {
	defer runtime.UnlockOSThread()
	if err := d.enter(); err != nil {
		return nil, err
	}
	if err := d.rt.HostRegister(b); err != nil {
		return nil, fmt.Errorf("cuda engine: %w", err)
	}
	return &hostBuffer{d: d, b: b, registered: true}, nil
}

type hostBuffer struct {
	d          *device
	b          []byte
	registered bool // RegisterHost's: unregister rather than free
}

func (h *hostBuffer) Bytes() []byte { return h.b }

func (h *hostBuffer) Free() error {
	if h.b == nil {
		return nil
	}
	defer runtime.UnlockOSThread()
	if err := h.d.enter(); err != nil {
		return err
	}
	var err error
	if h.registered {
		err = h.d.rt.HostUnregister(h.b)
	} else {
		err = h.d.rt.FreeHost(h.b)
	}
	h.b = nil
	return err
}

// stream is a non-blocking CUDA stream.
type stream struct {
	d *device
	s cu.Stream
	// borrowed streams belong to an instance, which destroys them; Close
	// on them does nothing.
	borrowed bool
}

// asBuffer checks that b is this engine's device memory and that
// [off, off+n) lies inside it.
func asBuffer(b engine.Buffer, off, n int) (*buffer, error) {
	db, ok := b.(*buffer)
	if !ok {
		return nil, fmt.Errorf("cuda engine: buffer of type %T is not cuda device memory", b)
	}
	if db.ptr == 0 {
		return nil, errors.New("cuda engine: buffer was freed")
	}
	if off < 0 || n < 0 || off+n > db.size {
		return nil, fmt.Errorf("cuda engine: range [%d, %d) is outside a %d-byte buffer", off, off+n, db.size)
	}
	return db, nil
}

// Handle is the CUDA stream, for code that talks to CUDA directly (the GPU
// image decoder writes an instance's input on its stream).
func (s *stream) Handle() cu.Stream { return s.s }

func (s *stream) CopyToDevice(dst engine.Buffer, off int, src []byte) error {
	db, err := asBuffer(dst, off, len(src))
	if err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if err := s.d.enter(); err != nil {
		return err
	}
	return s.d.rt.MemcpyHtoDAsync(db.ptr+cu.DevPtr(off), src, s.s)
}

func (s *stream) CopyToHost(dst []byte, src engine.Buffer, off int) error {
	db, err := asBuffer(src, off, len(dst))
	if err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if err := s.d.enter(); err != nil {
		return err
	}
	return s.d.rt.MemcpyDtoHAsync(dst, db.ptr+cu.DevPtr(off), s.s)
}

func (s *stream) Record(e engine.Event) error {
	ev, ok := e.(*event)
	if !ok {
		return fmt.Errorf("cuda engine: event of type %T is not a cuda event", e)
	}
	defer runtime.UnlockOSThread()
	if err := s.d.enter(); err != nil {
		return err
	}
	return s.d.rt.EventRecord(ev.e, s.s)
}

func (s *stream) Wait(e engine.Event) error {
	ev, ok := e.(*event)
	if !ok {
		return fmt.Errorf("cuda engine: event of type %T is not a cuda event", e)
	}
	defer runtime.UnlockOSThread()
	if err := s.d.enter(); err != nil {
		return err
	}
	return s.d.rt.StreamWaitEvent(s.s, ev.e)
}

func (s *stream) Synchronize() error {
	defer runtime.UnlockOSThread()
	if err := s.d.enter(); err != nil {
		return err
	}
	return s.d.rt.StreamSynchronize(s.s)
}

func (s *stream) Close() error {
	if s.s == 0 || s.borrowed {
		return nil
	}
	defer runtime.UnlockOSThread()
	if err := s.d.enter(); err != nil {
		return err
	}
	err := s.d.rt.StreamDestroy(s.s)
	s.s = 0
	return err
}

// event is a timing-capable CUDA event.
type event struct {
	d *device
	e cu.Event
}

func (e *event) Synchronize() error {
	defer runtime.UnlockOSThread()
	if err := e.d.enter(); err != nil {
		return err
	}
	return e.d.rt.EventSynchronize(e.e)
}

func (e *event) Done() (bool, error) {
	defer runtime.UnlockOSThread()
	if err := e.d.enter(); err != nil {
		return false, err
	}
	return e.d.rt.EventQuery(e.e)
}

func (e *event) Since(start engine.Event) (time.Duration, error) {
	s, ok := start.(*event)
	if !ok {
		return 0, fmt.Errorf("cuda engine: event of type %T is not a cuda event", start)
	}
	defer runtime.UnlockOSThread()
	if err := e.d.enter(); err != nil {
		return 0, err
	}
	ms, err := e.d.rt.EventElapsed(s.e, e.e)
	if err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

func (e *event) Close() error {
	if e.e == 0 {
		return nil
	}
	defer runtime.UnlockOSThread()
	if err := e.d.enter(); err != nil {
		return err
	}
	err := e.d.rt.EventDestroy(e.e)
	e.e = 0
	return err
}
