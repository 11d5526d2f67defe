package cuda

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Handles are opaque pointers owned by the libraries.
type (
	DevPtr    uintptr // device memory
	Stream    uintptr // cudaStream_t (also a CUstream)
	Event     uintptr // cudaEvent_t
	Graph     uintptr // cudaGraph_t
	GraphExec uintptr // cudaGraphExec_t
)

// Memcpy directions (cudaMemcpyKind).
const (
	memcpyHostToDevice   = 1
	memcpyDeviceToHost   = 2
	memcpyDeviceToDevice = 3
)

// Device attributes (cudaDeviceAttr) goinfer reads.
const (
	AttrMultiProcessorCount    = 16
	AttrPCIBusID               = 33
	AttrComputeCapabilityMajor = 75
	AttrComputeCapabilityMinor = 76
)

// Stream capture modes (cudaStreamCaptureMode).
const (
	CaptureModeGlobal      = 0
	CaptureModeThreadLocal = 1
	CaptureModeRelaxed     = 2
)

// Runtime is the CUDA runtime API (libcudart). Its calls act on the calling
// OS thread's current device: callers that use several devices, or goroutines
// that may move between threads, call SetDevice first (it is cheap).
type Runtime struct {
	lib *library

	getErrorName   func(code int32) string
	getErrorString func(code int32) string

	runtimeGetVersion  func(v *int32) int32
	driverGetVersion   func(v *int32) int32
	getDeviceCount     func(n *int32) int32
	deviceGetAttribute func(v *int32, attr int32, dev int32) int32
	memGetInfo         func(free, total *uint64) int32
	malloc             func(p *uintptr, n uint64) int32
	free               func(p uintptr) int32
	hostAlloc          func(p *unsafe.Pointer, n uint64, flags uint32) int32
	freeHost           func(p unsafe.Pointer) int32
	hostRegister       func(p unsafe.Pointer, n uint64, flags uint32) int32
	hostUnregister     func(p unsafe.Pointer) int32
	memsetAsync        func(p uintptr, v int32, n uint64, s uintptr) int32
	streamCreate       func(s *uintptr, flags uint32) int32
	streamDestroy      func(s uintptr) int32
	streamSynchronize  func(s uintptr) int32
	eventCreate        func(e *uintptr, flags uint32) int32
	eventSynchronize   func(e uintptr) int32
	eventElapsedTime   func(ms *float32, start, end uintptr) int32
	eventDestroy       func(e uintptr) int32
	streamBeginCapture func(s uintptr, mode int32) int32
	streamEndCapture   func(s uintptr, g *uintptr) int32
	graphInstantiate   func(e *uintptr, g uintptr, flags uint64) int32
	graphUpload        func(e uintptr, s uintptr) int32
	graphExecDestroy   func(e uintptr) int32
	graphDestroy       func(g uintptr) int32
	deviceSynchronize  func() int32
	getLastError       func() int32
	memcpyDtoH         func(dst unsafe.Pointer, src uintptr, n uint64, kind int32) int32
	memcpyHtoD         func(dst uintptr, src unsafe.Pointer, n uint64, kind int32) int32

	// Hot-path functions are called through purego.SyscallN, which does
	// not allocate.
	setDevice       uintptr
	memcpyAsync     uintptr
	streamWaitEvent uintptr
	eventRecord     uintptr
	eventQuery      uintptr
	graphLaunch     uintptr
	hostDevPtr      uintptr
}

func newRuntime(l *library) (*Runtime, error) {
	r := &Runtime{lib: l}
	err := l.bind(map[string]any{
		"cudaGetErrorName":              &r.getErrorName,
		"cudaGetErrorString":            &r.getErrorString,
		"cudaRuntimeGetVersion":         &r.runtimeGetVersion,
		"cudaDriverGetVersion":          &r.driverGetVersion,
		"cudaGetDeviceCount":            &r.getDeviceCount,
		"cudaDeviceGetAttribute":        &r.deviceGetAttribute,
		"cudaMemGetInfo":                &r.memGetInfo,
		"cudaMalloc":                    &r.malloc,
		"cudaFree":                      &r.free,
		"cudaHostAlloc":                 &r.hostAlloc,
		"cudaFreeHost":                  &r.freeHost,
		"cudaHostRegister":              &r.hostRegister,
		"cudaHostUnregister":            &r.hostUnregister,
		"cudaMemsetAsync":               &r.memsetAsync,
		"cudaStreamCreateWithFlags":     &r.streamCreate,
		"cudaStreamDestroy":             &r.streamDestroy,
		"cudaStreamSynchronize":         &r.streamSynchronize,
		"cudaEventCreateWithFlags":      &r.eventCreate,
		"cudaEventSynchronize":          &r.eventSynchronize,
		"cudaEventElapsedTime":          &r.eventElapsedTime,
		"cudaEventDestroy":              &r.eventDestroy,
		"cudaStreamBeginCapture":        &r.streamBeginCapture,
		"cudaStreamEndCapture":          &r.streamEndCapture,
		"cudaGraphInstantiateWithFlags": &r.graphInstantiate,
		"cudaGraphUpload":               &r.graphUpload,
		"cudaGraphExecDestroy":          &r.graphExecDestroy,
		"cudaGraphDestroy":              &r.graphDestroy,
		"cudaDeviceSynchronize":         &r.deviceSynchronize,
		"cudaGetLastError":              &r.getLastError,
		"cudaSetDevice":                 &r.setDevice,
		"cudaMemcpyAsync":               &r.memcpyAsync,
		"cudaStreamWaitEvent":           &r.streamWaitEvent,
		"cudaEventRecord":               &r.eventRecord,
		"cudaEventQuery":                &r.eventQuery,
		"cudaGraphLaunch":               &r.graphLaunch,
		"cudaHostGetDevicePointer":      &r.hostDevPtr,
	})
	if err != nil {
		return nil, err
	}
	// The same C function under several Go signatures.
	memcpy := l.sym("cudaMemcpy")
	if memcpy == 0 {
		return nil, fmt.Errorf("%s: symbol cudaMemcpy missing", l.info.Path)
	}
	purego.RegisterFunc(&r.memcpyDtoH, memcpy)
	purego.RegisterFunc(&r.memcpyHtoD, memcpy)
	return r, nil
}

func (r *Runtime) check(call string, code int32) error {
	if code == cudaSuccess {
		return nil
	}
	return newError(LibRuntime, call, int(code), func(c int) (string, string) {
		return r.getErrorName(int32(c)), r.getErrorString(int32(c))
	})
}

// checkHot is check for hot paths: the error path may allocate, the success
// path does not.
func (r *Runtime) checkHot(call string, code uintptr) error {
	if int32(code) == cudaSuccess {
		return nil
	}
	return r.check(call, int32(code))
}

// Path is the file the runtime was loaded from.
func (r *Runtime) Path() string { return r.lib.info.Path }

// Version is the runtime's CUDART_VERSION (13000 for 13.0).
func (r *Runtime) Version() (int, error) {
	var v int32
	err := r.check("cudaRuntimeGetVersion", r.runtimeGetVersion(&v))
	return int(v), err
}

// DriverVersion is the newest CUDA version the driver supports (13000).
func (r *Runtime) DriverVersion() (int, error) {
	var v int32
	err := r.check("cudaDriverGetVersion", r.driverGetVersion(&v))
	return int(v), err
}

// DeviceCount is the number of visible GPUs.
func (r *Runtime) DeviceCount() (int, error) {
	var n int32
	err := r.check("cudaGetDeviceCount", r.getDeviceCount(&n))
	return int(n), err
}

// SetDevice makes dev the calling thread's current device.
func (r *Runtime) SetDevice(dev int) error {
	c, _, _ := purego.SyscallN(r.setDevice, uintptr(dev))
	return r.checkHot("cudaSetDevice", c)
}

// DeviceAttribute reads one cudaDeviceAttr of dev.
func (r *Runtime) DeviceAttribute(attr, dev int) (int, error) {
	var v int32
	err := r.check("cudaDeviceGetAttribute", r.deviceGetAttribute(&v, int32(attr), int32(dev)))
	return int(v), err
}

// MemGetInfo returns the current device's free and total memory in bytes.
func (r *Runtime) MemGetInfo() (free, total uint64, err error) {
	err = r.check("cudaMemGetInfo", r.memGetInfo(&free, &total))
	return free, total, err
}

// Malloc allocates n bytes on the current device. On failure the error
// says how many bytes were asked for and how many are free.
func (r *Runtime) Malloc(n int64) (DevPtr, error) {
	if n <= 0 {
		n = 1
	}
	var p uintptr
	if err := r.check("cudaMalloc", r.malloc(&p, uint64(n))); err != nil {
		free, total, ferr := r.MemGetInfo()
		if ferr == nil {
			return 0, fmt.Errorf("%w: asked for %s, %s free of %s", err, FormatBytes(n), FormatBytes(int64(free)), FormatBytes(int64(total)))
		}
		return 0, fmt.Errorf("%w: asked for %s", err, FormatBytes(n))
	}
	return DevPtr(p), nil
}

// Free releases device memory (0 is a no-op).
func (r *Runtime) Free(p DevPtr) error {
	if p == 0 {
		return nil
	}
	return r.check("cudaFree", r.free(uintptr(p)))
}

// HostAlloc allocates n bytes of page-locked host memory, usable by
// asynchronous copies from every context.
func (r *Runtime) HostAlloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cudaHostAlloc: size %d is not positive", n)
	}
	var p unsafe.Pointer
	const portable = 1
	if err := r.check("cudaHostAlloc", r.hostAlloc(&p, uint64(n), portable)); err != nil {
		return nil, fmt.Errorf("%w: asked for %s of pinned host memory", err, FormatBytes(int64(n)))
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost releases memory from HostAlloc.
func (r *Runtime) FreeHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return r.check("cudaFreeHost", r.freeHost(unsafe.Pointer(unsafe.SliceData(b))))
}

// HostRegister page-locks memory this process allocated otherwise (a
// mapping of a shared memory object, say), for every context (portable),
// so that asynchronous copies read it directly.
func (r *Runtime) HostRegister(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("cudaHostRegister: empty range")
	}
	const portable = 1
	if err := r.check("cudaHostRegister", r.hostRegister(unsafe.Pointer(unsafe.SliceData(b)), uint64(len(b)), portable)); err != nil {
		return fmt.Errorf("%w: page-locking %s of host memory", err, FormatBytes(int64(len(b))))
	}
	return nil
}

// HostUnregister undoes HostRegister.
func (r *Runtime) HostUnregister(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return r.check("cudaHostUnregister", r.hostUnregister(unsafe.Pointer(unsafe.SliceData(b))))
}

// MemcpyHtoD copies host memory to the device synchronously: the data is
// on the device when it returns. cudaMemcpy alone does not promise that
// for pageable memory (it may return once the bytes are staged, with the
// DMA still running on the legacy stream), and work on non-blocking
// streams, which every stream here is, is not ordered after it; so it
// waits for the legacy stream too.
func (r *Runtime) MemcpyHtoD(dst DevPtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := r.check("cudaMemcpy", r.memcpyHtoD(uintptr(dst), unsafe.Pointer(unsafe.SliceData(src)), uint64(len(src)), memcpyHostToDevice)); err != nil {
		return err
	}
	return r.StreamSynchronize(0)
}

// MemcpyDtoH copies device memory to the host synchronously.
func (r *Runtime) MemcpyDtoH(dst []byte, src DevPtr) error {
	if len(dst) == 0 {
		return nil
	}
	return r.check("cudaMemcpy", r.memcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), uintptr(src), uint64(len(dst)), memcpyDeviceToHost))
}

// MemcpyHtoDAsync enqueues a host to device copy on s. src should be pinned
// (HostAlloc) for the copy to overlap; pageable memory is staged by the
// driver before the call returns.
func (r *Runtime) MemcpyHtoDAsync(dst DevPtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	c, _, _ := purego.SyscallN(r.memcpyAsync, uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), memcpyHostToDevice, uintptr(s))
	return r.checkHot("cudaMemcpyAsync", c)
}

// MemcpyDtoHAsync enqueues a device to host copy on s. dst should be pinned.
func (r *Runtime) MemcpyDtoHAsync(dst []byte, src DevPtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	c, _, _ := purego.SyscallN(r.memcpyAsync, uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src), uintptr(len(dst)), memcpyDeviceToHost, uintptr(s))
	return r.checkHot("cudaMemcpyAsync", c)
}

// MemcpyDtoDAsync enqueues a device to device copy on s.
func (r *Runtime) MemcpyDtoDAsync(dst, src DevPtr, n int64, s Stream) error {
	if n == 0 {
		return nil
	}
	c, _, _ := purego.SyscallN(r.memcpyAsync, uintptr(dst), uintptr(src), uintptr(n), memcpyDeviceToDevice, uintptr(s))
	return r.checkHot("cudaMemcpyAsync", c)
}

// MemsetAsync enqueues setting n bytes to v.
func (r *Runtime) MemsetAsync(p DevPtr, v byte, n int64, s Stream) error {
	return r.check("cudaMemsetAsync", r.memsetAsync(uintptr(p), int32(v), uint64(n), uintptr(s)))
}

// StreamCreate makes a stream that does not synchronize with the legacy
// default stream.
func (r *Runtime) StreamCreate() (Stream, error) {
	var s uintptr
	const nonBlocking = 1
	err := r.check("cudaStreamCreateWithFlags", r.streamCreate(&s, nonBlocking))
	return Stream(s), err
}

// StreamDestroy releases a stream once its work is done.
func (r *Runtime) StreamDestroy(s Stream) error {
	return r.check("cudaStreamDestroy", r.streamDestroy(uintptr(s)))
}

// StreamSynchronize blocks until s is idle.
func (r *Runtime) StreamSynchronize(s Stream) error {
	return r.check("cudaStreamSynchronize", r.streamSynchronize(uintptr(s)))
}

// StreamWaitEvent makes later work on s wait for e, on the device.
func (r *Runtime) StreamWaitEvent(s Stream, e Event) error {
	c, _, _ := purego.SyscallN(r.streamWaitEvent, uintptr(s), uintptr(e), 0)
	return r.checkHot("cudaStreamWaitEvent", c)
}

// EventCreate makes an event; timing events can measure elapsed time,
// others are cheaper to record and wait on.
func (r *Runtime) EventCreate(timing bool) (Event, error) {
	var e uintptr
	var flags uint32
	if !timing {
		const disableTiming = 2
		flags = disableTiming
	}
	err := r.check("cudaEventCreateWithFlags", r.eventCreate(&e, flags))
	return Event(e), err
}

// EventRecord marks the current end of s in e.
func (r *Runtime) EventRecord(e Event, s Stream) error {
	c, _, _ := purego.SyscallN(r.eventRecord, uintptr(e), uintptr(s))
	return r.checkHot("cudaEventRecord", c)
}

// EventQuery reports whether e's work is done.
func (r *Runtime) EventQuery(e Event) (bool, error) {
	c, _, _ := purego.SyscallN(r.eventQuery, uintptr(e))
	switch int32(c) {
	case cudaSuccess:
		return true, nil
	case cudaErrorNotReady:
		return false, nil
	}
	return false, r.check("cudaEventQuery", int32(c))
}

// EventSynchronize blocks until e's work is done.
func (r *Runtime) EventSynchronize(e Event) error {
	return r.check("cudaEventSynchronize", r.eventSynchronize(uintptr(e)))
}

// EventElapsed returns the milliseconds between two recorded events.
func (r *Runtime) EventElapsed(start, end Event) (float32, error) {
	var ms float32
	err := r.check("cudaEventElapsedTime", r.eventElapsedTime(&ms, uintptr(start), uintptr(end)))
	return ms, err
}

// EventDestroy releases an event.
func (r *Runtime) EventDestroy(e Event) error {
	return r.check("cudaEventDestroy", r.eventDestroy(uintptr(e)))
}

// StreamBeginCapture starts recording s's work into a graph instead of
// running it.
func (r *Runtime) StreamBeginCapture(s Stream, mode int) error {
	return r.check("cudaStreamBeginCapture", r.streamBeginCapture(uintptr(s), int32(mode)))
}

// StreamEndCapture ends a capture and returns the recorded graph.
func (r *Runtime) StreamEndCapture(s Stream) (Graph, error) {
	var g uintptr
	err := r.check("cudaStreamEndCapture", r.streamEndCapture(uintptr(s), &g))
	return Graph(g), err
}

// GraphInstantiate makes an executable graph.
func (r *Runtime) GraphInstantiate(g Graph) (GraphExec, error) {
	var e uintptr
	err := r.check("cudaGraphInstantiateWithFlags", r.graphInstantiate(&e, uintptr(g), 0))
	return GraphExec(e), err
}

// GraphUpload prepares an executable graph's device resources ahead of its
// first launch.
func (r *Runtime) GraphUpload(e GraphExec, s Stream) error {
	return r.check("cudaGraphUpload", r.graphUpload(uintptr(e), uintptr(s)))
}

// GraphLaunch enqueues an executable graph on s.
func (r *Runtime) GraphLaunch(e GraphExec, s Stream) error {
	c, _, _ := purego.SyscallN(r.graphLaunch, uintptr(e), uintptr(s))
	return r.checkHot("cudaGraphLaunch", c)
}

// GraphExecDestroy releases an executable graph.
func (r *Runtime) GraphExecDestroy(e GraphExec) error {
	return r.check("cudaGraphExecDestroy", r.graphExecDestroy(uintptr(e)))
}

// GraphDestroy releases a graph.
func (r *Runtime) GraphDestroy(g Graph) error {
	return r.check("cudaGraphDestroy", r.graphDestroy(uintptr(g)))
}

// DeviceSynchronize blocks until the current device is idle.
func (r *Runtime) DeviceSynchronize() error {
	return r.check("cudaDeviceSynchronize", r.deviceSynchronize())
}

// LastError returns and clears the thread's last runtime error.
func (r *Runtime) LastError() error {
	return r.check("cudaGetLastError", r.getLastError())
}

// FormatBytes prints a byte count for people: "1.50 GiB", "12.0 MiB".
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// HostDevicePointer returns the address at which the current device reads
// and writes the page-locked host memory at p in place (under unified
// addressing, p itself for cudaHostAlloc's memory), or 0 when p is not
// page-locked host memory the device can address. It asks
// cudaHostGetDevicePointer, which writes one pointer: a call that fills a
// structure would write past a Go value wherever a CUDA release grows it.
func (r *Runtime) HostDevicePointer(p unsafe.Pointer) (DevPtr, error) {
	var d uintptr
	c, _, _ := purego.SyscallN(r.hostDevPtr, uintptr(unsafe.Pointer(&d)), uintptr(p), 0)
	if c != 0 {
		// Not mapped (cudaErrorInvalidValue): clear the runtime's last
		// error so that a later check does not report it.
		r.getLastError()
		return 0, nil
	}
	return DevPtr(d), nil
}
