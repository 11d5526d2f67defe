package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"google.golang.org/grpc/codes"

	"goinfer/internal/backend"
	"goinfer/internal/engine"
	"goinfer/internal/shm"
	"goinfer/internal/tensor"
)

// SharedMemoryRegion is a system shared memory region registered with a
// server, as its status endpoint reports it.
type SharedMemoryRegion struct {
	Name     string // the name requests use
	Key      string // the shared memory object, e.g. "/goinfer-123-0"
	Offset   uint64 // where the region starts in the object
	ByteSize uint64
}

// The tensor parameters of the shared memory extension that place a tensor
// in a registered region.
const (
	paramSHMRegion   = "shared_memory_region"
	paramSHMOffset   = "shared_memory_offset"
	paramSHMByteSize = "shared_memory_byte_size"
)

// shmSerial numbers the shared memory objects of every Client in the
// process: keys and region names must be unique per process (two clients
// of one server would otherwise register the same name), and the pid
// alone only separates processes.
var shmSerial atomic.Uint64

// shmAlign is where the output area starts past the input, rounded up so
// that the server's float32 writes are aligned.
const shmAlign = 64

// shmUnregisterTimeout bounds each best-effort unregister call, so that a
// server gone away does not hold up Close or a failed request.
const shmUnregisterTimeout = 2 * time.Second

// shmRegisterTimeout bounds AllocShared's register call, which has no
// context of its own.
const shmRegisterTimeout = 10 * time.Second

// shmSlot is one shared memory object registered with the server as one
// region: the input at offset 0 (unless it is in memory from AllocShared),
// the output past it. A request holds a slot from before it copies its
// input in until it has copied the logits out.
type shmSlot struct {
	key  string // "/goinfer-<pid>-<n>"
	name string // "goinfer_<pid>_<n>"
	m    *shm.Mapping
	// grpcIn and grpcOut cache the gRPC request parameters naming this
	// slot's areas, which stay the same from request to request at a
	// fixed batch size.
	grpcIn, grpcOut grpcSHMParams
}

// shmLayout places one request's tensors in a slot.
type shmLayout struct {
	inBytes  int64 // at offset 0; 0 when the input is in a shared buffer
	outOff   int64
	outBytes int64
}

// shmTensor is where one tensor of a request lies in shared memory.
type shmTensor struct {
	region    string
	off, size int64
	// grpc caches the gRPC parameters naming this place.
	grpc *grpcSHMParams
}

// shmIO places a request's input and output in shared memory.
type shmIO struct{ in, out shmTensor }

func newSHMLayout(inBytes, outBytes int) shmLayout {
	off := (inBytes + shmAlign - 1) &^ (shmAlign - 1)
	return shmLayout{inBytes: int64(inBytes), outOff: int64(off), outBytes: int64(outBytes)}
}

// size is the bytes a slot needs for the layout.
func (l shmLayout) size() int { return int(l.outOff + l.outBytes) }

// shmPool hands out slots: a free list of registered ones, grown on demand,
// so that there are at most as many as requests were ever in flight at
// once.
type shmPool struct {
	t    transport
	page int

	mu     sync.Mutex
	free   []*shmSlot
	closed bool

	// shared are the live buffers from AllocShared, sorted by address, for
	// requests to find whether their input lies in one. Its own lock: the
	// lookup is a read on every request.
	sharedMu     sync.RWMutex
	shared       []*sharedBuf
	sharedClosed bool
}

func newSHMPool(t transport) *shmPool {
	return &shmPool{t: t, page: os.Getpagesize()}
}

// acquire returns a registered slot of at least size bytes. A free slot
// that is too small is replaced by a bigger one.
func (p *shmPool) acquire(ctx context.Context, size int) (*shmSlot, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, backend.ErrClosed
	}
	var s *shmSlot
	if n := len(p.free); n > 0 {
		// The most recently used slot that fits (its pages are likely
		// warm), else the most recent one, to be replaced.
		i := n - 1
		for j := n - 1; j >= 0; j-- {
			if p.free[j].m.Len() >= size {
				i = j
				break
			}
		}
		s = p.free[i]
		p.free = slices.Delete(p.free, i, i+1)
	}
	p.mu.Unlock()
	if s != nil {
		if s.m.Len() >= size {
			return s, nil
		}
		// Too small (a bigger batch than before): replace it. Its
		// unregister errors do not concern this request.
		_ = p.destroy(s)
	}
	s, err := p.create(ctx, size)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		// Close ran while this slot was being registered and has not seen
		// it: undo it here.
		_ = p.destroy(s)
		return nil, backend.ErrClosed
	}
	return s, nil
}

// create makes, maps and registers a new object. On any failure nothing is
// left behind: no object in /dev/shm, no mapping, no region.
func (p *shmPool) create(ctx context.Context, size int) (*shmSlot, error) {
	size = (size + p.page - 1) &^ (p.page - 1)
	pid := os.Getpid()
	var s *shmSlot
	for tries := 0; ; tries++ {
		n := shmSerial.Add(1) - 1
		key := fmt.Sprintf("/goinfer-%d-%d", pid, n)
		m, err := shm.Create(key, size)
		if err == nil {
			s = &shmSlot{key: key, name: fmt.Sprintf("goinfer_%d_%d", pid, n), m: m}
			break
		}
		// A key left by a process that had this pid and died without
		// cleaning up: take the next number.
		if !errors.Is(err, fs.ErrExist) || tries == 15 {
			return nil, fmt.Errorf("client: shared memory: %w", err)
		}
	}
	err := p.t.registerSHM(ctx, SharedMemoryRegion{Name: s.name, Key: s.key, ByteSize: uint64(size)})
	if err != nil {
		var se *ServerError
		if !errors.As(err, &se) {
			// No answer (a cancelled or timed-out call): the server may
			// have registered the region all the same.
			_ = p.unregister(s)
		}
		errs := []error{fmt.Errorf("registering shared memory region %q (object %q, %d bytes) with the server: %w", s.name, s.key, size, err)}
		errs = append(errs, s.m.Close(), shm.Unlink(s.key))
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// release returns a slot after a request. A slot the server may still be
// using (the request ended without the server's answer: cancelled, timed
// out, connection lost) is not reused: the server could still write the
// abandoned request's logits into it, over a later request's.
func (p *shmPool) release(s *shmSlot, reuse bool) {
	p.mu.Lock()
	if reuse && !p.closed {
		p.free = append(p.free, s)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	// Nobody waits for the answer: the request's own error is what counts.
	_ = p.destroy(s)
}

// destroy unregisters the slot's region (best effort), unmaps the object
// and removes it. The server's own mapping, if it has one, stays valid
// until it lets go of it.
func (p *shmPool) destroy(s *shmSlot) error {
	err := p.unregister(s)
	return errors.Join(err, s.m.Close(), shm.Unlink(s.key))
}

func (p *shmPool) unregister(s *shmSlot) error {
	ctx, cancel := context.WithTimeout(context.Background(), shmUnregisterTimeout)
	defer cancel()
	if err := p.t.unregisterSHM(ctx, s.name); err != nil {
		return fmt.Errorf("unregistering shared memory region %q: %w", s.name, err)
	}
	return nil
}

// close destroys the free slots and the shared buffers still allocated;
// slots held by requests still running are destroyed when they are
// released. It returns the first few errors.
func (p *shmPool) close() error {
	p.mu.Lock()
	p.closed = true
	free := p.free
	p.free = nil
	p.mu.Unlock()
	p.sharedMu.Lock()
	p.sharedClosed = true
	shared := p.shared
	p.shared = nil
	p.sharedMu.Unlock()
	var errs []error
	for _, s := range free {
		if err := p.destroy(s); err != nil && len(errs) < 4 {
			errs = append(errs, err)
		}
	}
	for _, b := range shared {
		if err := b.Free(); err != nil && len(errs) < 4 {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sharedBuf is memory from AllocShared: one shared memory object,
// registered with the server as one region, that requests' inputs can lie
// in.
type sharedBuf struct {
	p    *shmPool
	s    *shmSlot
	data []byte // the n bytes asked for, at the start of the mapping
	base uintptr
	// grpc caches the parameters naming the tensor last sent from here:
	// the load generator sends the same one from each buffer every time.
	grpc  grpcSHMParams
	freed atomic.Bool
}

// Bytes is the buffer: shared memory the server reads requests' inputs
// from in place.
func (b *sharedBuf) Bytes() []byte { return b.data }

// Free unregisters the buffer's region (best effort, bounded by a short
// timeout), unmaps the object and removes it. Requests whose input lies in
// the buffer must have been answered. Only the first call does anything;
// later ones, Close's included, return nil.
func (b *sharedBuf) Free() error {
	if !b.freed.CompareAndSwap(false, true) {
		return nil
	}
	p := b.p
	p.sharedMu.Lock()
	if i := slices.Index(p.shared, b); i >= 0 {
		p.shared = slices.Delete(p.shared, i, i+1)
	}
	p.sharedMu.Unlock()
	if err := p.destroy(b.s); err != nil {
		return fmt.Errorf("client: freeing shared buffer %q: %w", b.s.key, err)
	}
	return nil
}

// AllocShared returns n bytes of system shared memory registered with the
// server as a region of their own (Options.SharedMemory only). A request
// whose input tensor lies entirely in such a buffer names the region
// instead of copying the tensor into a slot: the client places its data
// once and the server reads it in place, as Triton's perf_analyzer does
// with --shared-memory system. AllocShared fits loadgen.Shape.Alloc, so
// that request tensors are generated in such buffers. Requests whose input
// lies in a buffer must be answered before it is freed; Close frees those
// still allocated.
func (c *Client) AllocShared(n int) (engine.HostBuffer, error) {
	if c.shm == nil {
		return nil, errors.New("client: AllocShared needs Options.SharedMemory (the client was dialed without shared memory)")
	}
	if n <= 0 {
		return nil, fmt.Errorf("client: AllocShared(%d): want a positive byte count", n)
	}
	return c.shm.allocShared(n)
}

func (p *shmPool) allocShared(n int) (*sharedBuf, error) {
	p.sharedMu.RLock()
	closed := p.sharedClosed
	p.sharedMu.RUnlock()
	if closed {
		return nil, backend.ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), shmRegisterTimeout)
	defer cancel()
	s, err := p.create(ctx, n)
	if err != nil {
		return nil, err
	}
	mem := s.m.Bytes()
	b := &sharedBuf{p: p, s: s, data: mem[:n:n], base: uintptr(unsafe.Pointer(unsafe.SliceData(mem)))}
	p.sharedMu.Lock()
	if p.sharedClosed {
		// Close ran while the region was being registered and has not
		// seen this buffer: undo it here.
		p.sharedMu.Unlock()
		_ = p.destroy(s)
		return nil, backend.ErrClosed
	}
	i, _ := slices.BinarySearchFunc(p.shared, b.base, func(e *sharedBuf, base uintptr) int { return cmp.Compare(e.base, base) })
	p.shared = slices.Insert(p.shared, i, b)
	p.sharedMu.Unlock()
	return b, nil
}

// sharedFor finds the shared buffer data lies entirely in, and data's
// offset in it; nil if there is none. Data only partly in a buffer (it
// runs past the buffer's n bytes) is not in one: it is copied.
func (p *shmPool) sharedFor(data []byte) (*sharedBuf, int64) {
	if len(data) == 0 {
		return nil, 0
	}
	// Mappings are outside the Go heap and never move: their addresses
	// are stable for as long as the buffer is allocated.
	start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	p.sharedMu.RLock()
	defer p.sharedMu.RUnlock()
	// The last buffer that starts at or before data.
	i, found := slices.BinarySearchFunc(p.shared, start, func(e *sharedBuf, a uintptr) int { return cmp.Compare(e.base, a) })
	if !found {
		i--
	}
	if i < 0 {
		return nil, 0
	}
	b := p.shared[i]
	off := start - b.base
	if off >= uintptr(len(b.data)) || uintptr(len(data)) > uintptr(len(b.data))-off {
		return nil, 0
	}
	return b, int64(off)
}

// serverAnswered reports whether err is the server's answer to a request
// that it will not run further, so its slot can be reused.
func serverAnswered(err error) bool {
	var se *ServerError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code {
	case codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal, codes.Unavailable:
		// The request may still be queued or running on the server.
		return false
	}
	return true
}

// inferSHM runs one request through shared memory. An input that lies in
// a buffer from AllocShared is named where it is; any other is copied into
// a slot (part of the request's cost, as a real client must put its data
// there). The logits go to a slot, and are copied out of it once the
// server has answered.
func (c *Client) inferSHM(ctx context.Context, in *tensor.Tensor, out []float32) (result, error) {
	var r result
	n := in.Shape[0]
	if n <= 0 {
		return r, fmt.Errorf("client: input shape %v has no images", in.Shape)
	}
	classes, err := c.classes(ctx)
	if err != nil {
		return r, err
	}
	buf, off := c.shm.sharedFor(in.Data)
	inBytes := len(in.Data)
	if buf != nil {
		inBytes = 0 // the slot holds only the output
	}
	l := newSHMLayout(inBytes, 4*n*classes)
	s, err := c.shm.acquire(ctx, l.size())
	if err != nil {
		return r, err
	}
	reuse := false
	defer func() { c.shm.release(s, reuse) }()
	mem := s.m.Bytes()
	place := shmIO{out: shmTensor{region: s.name, off: l.outOff, size: l.outBytes, grpc: &s.grpcOut}}
	if buf != nil {
		place.in = shmTensor{region: buf.s.name, off: off, size: int64(len(in.Data)), grpc: &buf.grpc}
	} else {
		if _, err := shm.Copy(mem[:l.inBytes], in.Data); err != nil {
			// tmpfs reserves no pages at ftruncate: a full /dev/shm shows
			// up as a fault on first write.
			return r, fmt.Errorf("client: writing the input into shared memory object %q (is /dev/shm full?): %w", s.key, err)
		}
		c.inputCopies.Add(1)
		place.in = shmTensor{region: s.name, size: l.inBytes, grpc: &s.grpcIn}
	}
	r, elems, err := c.t.inferSHM(ctx, c, in, place)
	if err != nil {
		reuse = serverAnswered(err)
		return r, err
	}
	reuse = true
	if int64(4*elems) > l.outBytes {
		return r, fmt.Errorf("response output has %d values; region %q holds %d (%d images x %d classes)", elems, s.name, l.outBytes/4, n, classes)
	}
	logits := out
	if len(logits) < elems {
		logits = make([]float32, elems)
	}
	logits = logits[:elems]
	if _, err := shm.Copy(tensor.F32Bytes(logits), mem[l.outOff:l.outOff+int64(4*elems)]); err != nil {
		return r, fmt.Errorf("client: reading the logits from shared memory object %q: %w", s.key, err)
	}
	r.logits = logits
	return r, nil
}

// classes is the model's class count, from its metadata (fetched once).
func (c *Client) classes(ctx context.Context) (int, error) {
	md := c.md.Load()
	if md == nil {
		m, err := c.Metadata(ctx)
		if err != nil {
			return 0, err
		}
		md = &m
	}
	if md.Classes <= 0 {
		return 0, fmt.Errorf("%s: model %q metadata gives no class count (output shape ends in %d); shared memory needs it to size the output region", c.url, c.model, md.Classes)
	}
	return md.Classes, nil
}

// SharedMemoryStatus lists the system shared memory regions registered
// with the server (all of them, not only this client's), by name.
func (c *Client) SharedMemoryStatus(ctx context.Context) ([]SharedMemoryRegion, error) {
	rs, err := c.t.statusSHM(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: shared memory status: %w", c.url, err)
	}
	slices.SortFunc(rs, func(a, b SharedMemoryRegion) int { return strings.Compare(a.Name, b.Name) })
	return rs, nil
}
