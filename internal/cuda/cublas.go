package cuda

import (
	"unsafe"

	"github.com/ebitengine/purego"
)

// BLASHandle is a cublasHandle_t.
type BLASHandle uintptr

// cuBLAS and CUDA library enums (cublas_api.h, library_types.h).
const (
	OpN = 0
	OpT = 1

	CudaR32F  = 0
	CudaR16F  = 2
	CudaR16BF = 14

	BLASDefaultMath        = 0
	BLASTF32TensorOpMath   = 3
	BLASComputeF32         = 68
	BLASComputeF32FastTF32 = 77
	blasGemmDefault        = -1
	libraryPropertyMajor   = 0
	libraryPropertyMinor   = 1
	libraryPropertyPatch   = 2
)

// BLAS is the part of cuBLAS goinfer uses: GemmEx for the linear layer.
type BLAS struct {
	lib *library

	getStatusName   func(code int32) string
	getStatusString func(code int32) string
	getProperty     func(kind int32, v *int32) int32
	create          func(h *uintptr) int32
	destroy         func(h uintptr) int32
	setStream       func(h, s uintptr) int32
	setWorkspace    func(h, ws uintptr, n uint64) int32
	setMathMode     func(h uintptr, mode int32) int32

	gemmEx               uintptr // hot
	gemmStridedBatchedEx uintptr // hot
}

func newBLAS(l *library) (*BLAS, error) {
	b := &BLAS{lib: l}
	err := l.bind(map[string]any{
		"cublasGetStatusName":        &b.getStatusName,
		"cublasGetStatusString":      &b.getStatusString,
		"cublasGetProperty":          &b.getProperty,
		"cublasCreate_v2":            &b.create,
		"cublasDestroy_v2":           &b.destroy,
		"cublasSetStream_v2":         &b.setStream,
		"cublasSetWorkspace_v2":      &b.setWorkspace,
		"cublasSetMathMode":          &b.setMathMode,
		"cublasGemmEx":               &b.gemmEx,
		"cublasGemmStridedBatchedEx": &b.gemmStridedBatchedEx,
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (b *BLAS) check(call string, code int32) error {
	if code == cublasStatusSuccess {
		return nil
	}
	return newError(LibBLAS, call, int(code), func(c int) (string, string) {
		return b.getStatusName(int32(c)), b.getStatusString(int32(c))
	})
}

// Path is the file cuBLAS was loaded from.
func (b *BLAS) Path() string { return b.lib.info.Path }

// Version is cuBLAS's major, minor and patch level.
func (b *BLAS) Version() (major, minor, patch int, err error) {
	var v [3]int32
	for i, k := range []int32{libraryPropertyMajor, libraryPropertyMinor, libraryPropertyPatch} {
		if err := b.check("cublasGetProperty", b.getProperty(k, &v[i])); err != nil {
			return 0, 0, 0, err
		}
	}
	return int(v[0]), int(v[1]), int(v[2]), nil
}

// Create makes a cuBLAS handle on the current device.
func (b *BLAS) Create() (BLASHandle, error) {
	var h uintptr
	err := b.check("cublasCreate_v2", b.create(&h))
	return BLASHandle(h), err
}

// Destroy releases a handle.
func (b *BLAS) Destroy(h BLASHandle) error { return b.check("cublasDestroy_v2", b.destroy(uintptr(h))) }

// SetStream makes h enqueue its work on s.
func (b *BLAS) SetStream(h BLASHandle, s Stream) error {
	return b.check("cublasSetStream_v2", b.setStream(uintptr(h), uintptr(s)))
}

// SetWorkspace gives h its own workspace, so that it never allocates while
// a CUDA graph is being captured.
func (b *BLAS) SetWorkspace(h BLASHandle, ws DevPtr, n int64) error {
	return b.check("cublasSetWorkspace_v2", b.setWorkspace(uintptr(h), uintptr(ws), uint64(n)))
}

// SetMathMode selects BLASDefaultMath or BLASTF32TensorOpMath.
func (b *BLAS) SetMathMode(h BLASHandle, mode int) error {
	return b.check("cublasSetMathMode", b.setMathMode(uintptr(h), int32(mode)))
}

// GemmEx enqueues the column-major C[m,n] = op(A)[m,k] op(B)[k,n] with
// alpha 1 and beta 0, in the given data and compute types.
func (b *BLAS) GemmEx(h BLASHandle, transA, transB, m, n, k int, a DevPtr, aType, lda int, bm DevPtr, bType, ldb int, c DevPtr, cType, ldc int, compute int) error {
	r, _, _ := purego.SyscallN(b.gemmEx, uintptr(h), uintptr(transA), uintptr(transB), uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(&scaleOne)), uintptr(a), uintptr(aType), uintptr(lda), uintptr(bm), uintptr(bType), uintptr(ldb),
		uintptr(unsafe.Pointer(&scaleZero)), uintptr(c), uintptr(cType), uintptr(ldc), uintptr(compute), blasGemmDefaultArg)
	if int32(r) != cublasStatusSuccess {
		return b.check("cublasGemmEx", int32(r))
	}
	return nil
}

// blasGemmDefaultArg is CUBLAS_GEMM_DEFAULT (-1) as the 32-bit register
// value a C enum argument takes.
const blasGemmDefaultArg = uintptr(0xFFFFFFFF)

// GemmStridedBatchedEx enqueues batch column-major products
// C_i[m,n] = alpha * op(A_i)[m,k] op(B_i)[k,n] (beta 0), the operands of
// product i at element offsets i*stride from a, bm and c (a stride of 0
// broadcasts one operand to every product). alpha is read when the call
// is enqueued (or captured), so it may live anywhere.
func (b *BLAS) GemmStridedBatchedEx(h BLASHandle, transA, transB, m, n, k int, alpha *float32, a DevPtr, aType, lda int, strideA int64,
	bm DevPtr, bType, ldb int, strideB int64, c DevPtr, cType, ldc int, strideC int64, batch, compute int) error {
	r, _, _ := purego.SyscallN(b.gemmStridedBatchedEx, uintptr(h), uintptr(transA), uintptr(transB), uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(alpha)), uintptr(a), uintptr(aType), uintptr(lda), uintptr(strideA), uintptr(bm), uintptr(bType), uintptr(ldb), uintptr(strideB),
		uintptr(unsafe.Pointer(&scaleZero)), uintptr(c), uintptr(cType), uintptr(ldc), uintptr(strideC), uintptr(batch), uintptr(compute), blasGemmDefaultArg)
	if int32(r) != cublasStatusSuccess {
		return b.check("cublasGemmStridedBatchedEx", int32(r))
	}
	return nil
}
