package cuda

import (
	"fmt"
	"runtime"
	"sync"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
)

// devicePrep is the model-independent setup of one device made ahead of
// Load (engine.Preparer): the primary context, and one cuDNN and one cuBLAS
// handle for the first instance to take. Creating the context and the
// first handles (which load the libraries' modules into it) is a large part
// of a cold start that would otherwise wait for the model to be built.
type devicePrep struct {
	done chan struct{} // closed when the setup has finished or failed
	mu   sync.Mutex
	dnn  []cu.DNNHandle
	blas []cu.BLASHandle
}

var (
	prepMu sync.Mutex
	preps  = map[int]*devicePrep{}
)

// Prepare creates device ordinal's context and a cuDNN and a cuBLAS handle
// in the background (engine.Preparer).
func (Engine) Prepare(ordinal int) {
	prepMu.Lock()
	defer prepMu.Unlock()
	if preps[ordinal] != nil {
		return
	}
	p := &devicePrep{done: make(chan struct{})}
	preps[ordinal] = p
	go p.run(ordinal)
}

// run does the setup; a failure leaves the rest to Load, which meets the
// same error and reports it.
func (p *devicePrep) run(ordinal int) {
	defer close(p.done)
	ph := engine.StartPhases("cuda prepare")
	libs, err := cu.Load()
	if err != nil || cu.Usable() != nil {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := libs.Runtime.SetDevice(ordinal); err != nil {
		return
	}
	if _, _, err := libs.Runtime.MemGetInfo(); err != nil {
		return
	}
	ph.Done("context")
	h, err := libs.DNN.Create()
	if err != nil {
		return
	}
	ph.Done("cuDNN handle")
	b, err := libs.BLAS.Create()
	if err != nil {
		libs.DNN.Destroy(h)
		return
	}
	ph.Done("cuBLAS handle")
	warmBLAS(libs, b)
	ph.Done("cuBLAS first product")
	p.mu.Lock()
	p.dnn, p.blas = append(p.dnn, h), append(p.blas, b)
	p.mu.Unlock()
}

// warmBLAS runs one float32 product of a classifier's shape (1000 classes,
// 512 features, 256 images) on handle h: cuBLAS sets itself up on its first
// product (on the device, a first capture of ResNet-18 took 0.1 s against
// 6 ms for later instances), which is better done here than in the first
// instance's compile. Failures are left for the real product to meet.
func warmBLAS(libs *cu.Libs, h cu.BLASHandle) {
	const m, n, k = 1000, 256, 512
	rt := libs.Runtime
	buf, err := rt.Malloc(4 * (m*k + k*n + m*n))
	if err != nil {
		return
	}
	defer rt.Free(buf)
	if rt.MemsetAsync(buf, 0, 4*(m*k+k*n+m*n), 0) != nil {
		return
	}
	a, bm, c := buf, buf+4*m*k, buf+4*(m*k+k*n)
	if libs.BLAS.GemmEx(h, cu.OpT, cu.OpN, m, n, k, a, cu.CudaR32F, k, bm, cu.CudaR32F, k, c, cu.CudaR32F, m, cu.BLASComputeF32) == nil {
		rt.DeviceSynchronize()
	}
}

// waitPrepared waits for a Prepare of device ordinal to finish, if one was
// started, so that Load does not create the context beside it.
func waitPrepared(ordinal int) {
	prepMu.Lock()
	p := preps[ordinal]
	prepMu.Unlock()
	if p != nil {
		<-p.done
	}
}

// spareHandles returns a cuDNN and a cuBLAS handle that Prepare made for
// device ordinal, or ok false when none is left; the caller owns them.
func spareHandles(ordinal int) (h cu.DNNHandle, b cu.BLASHandle, ok bool) {
	prepMu.Lock()
	p := preps[ordinal]
	prepMu.Unlock()
	if p == nil {
		return 0, 0, false
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.dnn) == 0 {
		return 0, 0, false
	}
	h, b = p.dnn[len(p.dnn)-1], p.blas[len(p.blas)-1]
	p.dnn, p.blas = p.dnn[:len(p.dnn)-1], p.blas[:len(p.blas)-1]
	return h, b, true
}

// newHandles returns a cuDNN and a cuBLAS handle for device ordinal (which
// must be current): Prepare's, when one is left, else new ones.
func newHandles(libs *cu.Libs, ordinal int) (cu.DNNHandle, cu.BLASHandle, error) {
	if h, b, ok := spareHandles(ordinal); ok {
		return h, b, nil
	}
	h, err := libs.DNN.Create()
	if err != nil {
		return 0, 0, fmt.Errorf("cuda engine: creating the cuDNN handle: %w", err)
	}
	b, err := libs.BLAS.Create()
	if err != nil {
		libs.DNN.Destroy(h)
		return 0, 0, fmt.Errorf("cuda engine: creating the cuBLAS handle: %w", err)
	}
	return h, b, nil
}
