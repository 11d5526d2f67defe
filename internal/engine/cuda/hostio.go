package cuda

import (
	"fmt"
	"runtime"
	"unsafe"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
)

// forwardHost makes the device current and runs forward (an instance's
// enqueue of one batch) from the first inN bytes of in to the first outN
// bytes of out, page-locked host memory the device reads and writes in
// place: engine.HostIO for both instance kinds.
func (d *device) forwardHost(in []byte, inN int, out []byte, outN int, forward func(in, out cu.DevPtr) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.rt.SetDevice(d.ordinal); err != nil {
		return err
	}
	inP, outP, err := d.hostPointers(in, inN, out, outN)
	if err != nil {
		return err
	}
	return forward(inP, outP)
}

// hostPointers returns the device addresses of in's first inN bytes and
// out's first outN bytes, both page-locked host memory the device reads
// and writes in place, or an error wrapping engine.ErrNotHostMapped when
// either is not (before anything is enqueued, so the caller can copy
// instead). The device must be current.
func (d *device) hostPointers(in []byte, inN int, out []byte, outN int) (cu.DevPtr, cu.DevPtr, error) {
	if len(in) < inN || len(out) < outN || inN <= 0 || outN <= 0 {
		return 0, 0, fmt.Errorf("cuda engine: host input of %d bytes and output of %d, want %d and %d", len(in), len(out), inN, outN)
	}
	inP, err := d.rt.HostDevicePointer(unsafe.Pointer(unsafe.SliceData(in)))
	if err != nil {
		return 0, 0, err
	}
	outP, err := d.rt.HostDevicePointer(unsafe.Pointer(unsafe.SliceData(out)))
	if err != nil {
		return 0, 0, err
	}
	if inP == 0 || outP == 0 {
		return 0, 0, fmt.Errorf("cuda engine: %w", engine.ErrNotHostMapped)
	}
	return inP, outP, nil
}

var (
	_ engine.HostIO = (*instance)(nil)
	_ engine.HostIO = (*graphInstance)(nil)
)
