package cuda

import (
	"errors"
	"fmt"
)

// Library names used in errors and reports.
const (
	LibRuntime = "cudart"
	LibDriver  = "cuda"
	LibDNN     = "cudnn"
	LibBLAS    = "cublas"
	LibBLASLt  = "cublasLt"
	LibNVML    = "nvml"
)

// ErrOutOfMemory matches (errors.Is) any allocation failure a library
// reports: cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY,
// CUDNN_STATUS_ALLOC_FAILED, CUBLAS_STATUS_ALLOC_FAILED.
var ErrOutOfMemory = errors.New("out of memory")

// ErrNotReady matches cudaErrorNotReady: queried work is still running.
var ErrNotReady = errors.New("not ready")

// ErrNotSupported matches cuDNN's CUDNN_STATUS_NOT_SUPPORTED family and
// CUBLAS_STATUS_NOT_SUPPORTED: the library cannot run this configuration,
// which callers may answer with a fallback.
var ErrNotSupported = errors.New("not supported")

// ErrNoDevice matches the status codes that mean there is no usable GPU.
var ErrNoDevice = errors.New("no CUDA device")

// Error is a failed library call: the call's name and the status the library
// returned, with the library's own name and description of it.
type Error struct {
	Lib  string // LibRuntime, LibDNN, ...
	Call string // "cudnnConvolutionForward"
	Code int    // the raw status
	Name string // "CUDNN_STATUS_BAD_PARAM", "cudaErrorMemoryAllocation"
	Msg  string // the library's description, when it has one
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = fmt.Sprintf("%s status %d", e.Lib, e.Code)
	}
	if e.Msg != "" && e.Msg != name {
		return fmt.Sprintf("%s: %s (%s)", e.Call, name, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Call, name)
}

// Is lets errors.Is(err, ErrOutOfMemory) and friends see through the codes.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrOutOfMemory:
		return e.oom()
	case ErrNotReady:
		return (e.Lib == LibRuntime && e.Code == cudaErrorNotReady) || (e.Lib == LibDriver && e.Code == cuErrorNotReady)
	case ErrNotSupported:
		return (e.Lib == LibDNN && e.Code/1000*1000 == cudnnStatusNotSupported) ||
			((e.Lib == LibBLAS || e.Lib == LibBLASLt) && e.Code == cublasStatusNotSupported)
	case ErrNoDevice:
		return (e.Lib == LibRuntime && (e.Code == cudaErrorNoDevice || e.Code == cudaErrorInsufficientDriver)) ||
			(e.Lib == LibDriver && e.Code == cuErrorNoDevice) ||
			(e.Lib == LibNVML && e.Code == nvmlErrorDriverNotLoaded)
	}
	return false
}

func (e *Error) oom() bool {
	switch e.Lib {
	case LibRuntime:
		return e.Code == cudaErrorMemoryAllocation
	case LibDriver:
		return e.Code == cuErrorOutOfMemory
	case LibDNN:
		return e.Code == cudnnStatusHostAllocFailed || e.Code == cudnnStatusDeviceAllocFailed
	case LibBLAS, LibBLASLt:
		return e.Code == cublasStatusAllocFailed
	case LibNVML:
		return e.Code == nvmlErrorMemory
	}
	return false
}

// Status codes the package interprets (from driver_types.h, cuda.h,
// cudnn_graph.h, cublas_api.h, nvml.h).
const (
	cudaSuccess                 = 0
	cudaErrorMemoryAllocation   = 2
	cudaErrorInsufficientDriver = 35
	cudaErrorNoDevice           = 100
	cudaErrorNotReady           = 600

	cuSuccess          = 0
	cuErrorOutOfMemory = 2
	cuErrorNoDevice    = 100
	cuErrorNotReady    = 600

	cudnnStatusSuccess           = 0
	cudnnStatusNotSupported      = 3000 // a category: 3000..3999
	cudnnStatusHostAllocFailed   = 4003
	cudnnStatusDeviceAllocFailed = 4004

	cublasStatusSuccess      = 0
	cublasStatusAllocFailed  = 3
	cublasStatusNotSupported = 15

	nvmlSuccess              = 0
	nvmlErrorDriverNotLoaded = 9
	nvmlErrorMemory          = 20
)

// statusNamer turns a status into a name and a description; each library
// binding provides one from its own string functions.
type statusNamer func(code int) (name, msg string)

// newError builds the error of a failed call. A nil namer (the library's
// string function is missing) leaves the raw code in the message.
func newError(lib, call string, code int, namer statusNamer) *Error {
	e := &Error{Lib: lib, Call: call, Code: code}
	if namer != nil {
		e.Name, e.Msg = namer(code)
	}
	return e
}
