package imagegpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"

	"goinfer/internal/backend"
	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/topk"
)

// PairSize is the bytes of one ranked class on the device: its index
// (int32) and value (float32), as backend.Postprocessor writes them.
const PairSize = backend.TopPairBytes

// Ranker is a classifier's post-processing on the GPU (images.cu's
// softmax_topk): the softmax of each row of logits and its k best
// classes, ranked as package topk ranks them, so that only k pairs per
// image cross to the host instead of the whole row. The logits are left
// as they are. Launch is safe for concurrent use.
type Ranker struct {
	rt     *cu.Runtime
	drv    *cu.Driver
	device int
	mod    cu.Module
	fn     cu.Function
}

// NewRanker loads the kernel on a device.
func NewRanker(libs *cu.Libs, device int) (*Ranker, error) {
	if libs == nil || libs.Runtime == nil || libs.Driver == nil {
		return nil, errors.New("imagegpu: the CUDA runtime and driver are needed")
	}
	t := &Ranker{rt: libs.Runtime, drv: libs.Driver, device: device}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := t.rt.SetDevice(device); err != nil {
		return nil, err
	}
	var err error
	if t.mod, err = loadModule(t.drv); err != nil {
		return nil, fmt.Errorf("imagegpu: loading the kernels: %w", err)
	}
	if t.fn, err = t.drv.ModuleFunction(t.mod, "softmax_topk"); err != nil {
		t.drv.ModuleUnload(t.mod)
		return nil, err
	}
	return t, nil
}

// Launch enqueues on s the k best classes of each of the rows rows of
// `classes` float32 logits at logits into dst (rows*k pairs of PairSize
// bytes, best first): ranked and valued by the softmax with softmax set,
// by the logits otherwise. k must be 1 to classes.
func (t *Ranker) Launch(logits cu.DevPtr, rows, classes, k int, softmax bool, dst cu.DevPtr, s cu.Stream) error {
	if rows < 1 || classes < 1 || k < 1 || k > classes {
		return fmt.Errorf("imagegpu: top %d of %d rows of %d classes", k, rows, classes)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := t.rt.SetDevice(t.device); err != nil {
		return err
	}
	sm := 0
	if softmax {
		sm = 1
	}
	// On the heap: the driver reads the argument pointers during the call.
	a := new(cu.KernelArgs)
	a.Reset().Ptr(logits).Int(classes).Int(k).Int(sm).Ptr(dst)
	// softmax_topk's block is fixed at 256 threads (TKB).
	return t.drv.Launch(t.fn, rows, 256, s, a)
}

// Close unloads the kernel.
func (t *Ranker) Close() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := t.rt.SetDevice(t.device); err != nil {
		return err
	}
	return t.drv.ModuleUnload(t.mod)
}

// TopK is Launch behind the engine interfaces, which makes a Ranker a
// backend.Postprocessor.
func (t *Ranker) TopK(logits engine.Buffer, rows, classes, k int, softmax bool, dst engine.Buffer, st engine.Stream) error {
	lp, ok1 := logits.(interface{ Ptr() cu.DevPtr })
	dp, ok2 := dst.(interface{ Ptr() cu.DevPtr })
	if !ok1 || !ok2 {
		return errors.New("imagegpu: the buffers are not CUDA device memory")
	}
	h, ok := st.(interface{ Handle() cu.Stream })
	if !ok {
		return errors.New("imagegpu: the stream is not a CUDA stream")
	}
	return t.Launch(lp.Ptr(), rows, classes, k, softmax, dp.Ptr(), h.Handle())
}

var _ backend.Postprocessor = (*Ranker)(nil)

// Pairs decodes len(dst) pairs that Launch wrote (copied to the host).
func Pairs(dst []topk.Class, b []byte) {
	le := binary.LittleEndian
	for i := range dst {
		dst[i] = topk.Class{Index: int(int32(le.Uint32(b[PairSize*i:]))), Value: math.Float32frombits(le.Uint32(b[PairSize*i+4:]))}
	}
}
