package cuda

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// LtHandle is a cublasLtHandle_t.
type LtHandle uintptr

// cuBLASLt enums (cublasLt.h).
const (
	ltDescTransA      = 3
	ltDescTransB      = 4
	ltDescEpilogue    = 7
	ltDescBiasPointer = 8
	ltPrefMaxWS       = 1

	// Epilogues: D = act(alpha op(A) op(B) + beta C + bias).
	LtEpilogueDefault  = 1
	LtEpilogueReLU     = 2
	LtEpilogueBias     = 4
	LtEpilogueReLUBias = 6
	LtEpilogueGELU     = 32 // cuBLASLt's GELU is the tanh approximation
	LtEpilogueGELUBias = 36
)

// BLASLt is the part of cuBLASLt goinfer uses: products with their
// epilogue (bias, activation, an added C) in one call.
type BLASLt struct {
	lib *library

	create           func(h *uintptr) int32
	destroy          func(h uintptr) int32
	descCreate       func(d *uintptr, compute, scale int32) int32
	descDestroy      func(d uintptr) int32
	descSetAttribute func(d uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	layoutCreate     func(l *uintptr, typ int32, rows, cols uint64, ld int64) int32
	layoutDestroy    func(l uintptr) int32
	prefCreate       func(p *uintptr) int32
	prefDestroy      func(p uintptr) int32
	prefSetAttribute func(p uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	algoGetHeuristic func(h, op, a, b, c, d, pref uintptr, n int32, res unsafe.Pointer, count *int32) int32
	getStatusName    func(code int32) string
	matmul           uintptr // hot
}

func newBLASLt(l *library) (*BLASLt, error) {
	b := &BLASLt{lib: l}
	err := l.bind(map[string]any{
		"cublasLtCreate":                       &b.create,
		"cublasLtDestroy":                      &b.destroy,
		"cublasLtMatmulDescCreate":             &b.descCreate,
		"cublasLtMatmulDescDestroy":            &b.descDestroy,
		"cublasLtMatmulDescSetAttribute":       &b.descSetAttribute,
		"cublasLtMatrixLayoutCreate":           &b.layoutCreate,
		"cublasLtMatrixLayoutDestroy":          &b.layoutDestroy,
		"cublasLtMatmulPreferenceCreate":       &b.prefCreate,
		"cublasLtMatmulPreferenceDestroy":      &b.prefDestroy,
		"cublasLtMatmulPreferenceSetAttribute": &b.prefSetAttribute,
		"cublasLtMatmulAlgoGetHeuristic":       &b.algoGetHeuristic,
		"cublasLtGetStatusName":                &b.getStatusName,
		"cublasLtMatmul":                       &b.matmul,
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (b *BLASLt) check(call string, code int32) error {
	if code == cublasStatusSuccess {
		return nil
	}
	return newError(LibBLASLt, call, int(code), func(c int) (string, string) {
		n := b.getStatusName(int32(c))
		return n, n
	})
}

// Create makes a cuBLASLt handle.
func (b *BLASLt) Create() (LtHandle, error) {
	var h uintptr
	if err := b.check("cublasLtCreate", b.create(&h)); err != nil {
		return 0, err
	}
	return LtHandle(h), nil
}

// Destroy frees a handle (0 is ignored).
func (b *BLASLt) Destroy(h LtHandle) {
	if h != 0 {
		b.destroy(uintptr(h))
	}
}

// LtProblem is one column-major product D[m,n] = act(alpha op(A)[m,k]
// op(B)[k,n] + beta C + bias[m]), C and D of one layout (ld LdC).
type LtProblem struct {
	TransA, TransB bool
	M, N, K        int
	LdA, LdB, LdC  int
	Type           int    // CudaR16F, CudaR16BF or CudaR32F: A, B, C, D and the bias
	Compute        int    // cublasComputeType_t
	Epilogue       int    // LtEpilogue*
	Bias           DevPtr // with a bias epilogue
	Workspace      uint64 // bytes the algorithm may use
}

// LtMatmul is a planned product: its descriptors and algorithm.
type LtMatmul struct {
	desc, a, b, c uintptr
	algo          LtAlgo
}

// NewMatmul describes p and picks cuBLASLt's first heuristic algorithm;
// an error (ErrNotSupported where no algorithm fits) leaves nothing to
// free.
func (b *BLASLt) NewMatmul(h LtHandle, p LtProblem) (mm *LtMatmul, err error) {
	mm = &LtMatmul{}
	defer func() {
		if err != nil {
			b.DestroyMatmul(mm)
			mm = nil
		}
	}()
	if err = b.check("cublasLtMatmulDescCreate", b.descCreate(&mm.desc, int32(p.Compute), CudaR32F)); err != nil {
		return
	}
	set := func(attr int32, v unsafe.Pointer, n uint64) error {
		return b.check("cublasLtMatmulDescSetAttribute", b.descSetAttribute(mm.desc, attr, v, n))
	}
	ta, tb := int32(OpN), int32(OpN)
	ar, ac, br, bc := p.M, p.K, p.K, p.N
	if p.TransA {
		ta, ar, ac = OpT, p.K, p.M
	}
	if p.TransB {
		tb, br, bc = OpT, p.N, p.K
	}
	epi := uint32(p.Epilogue)
	bias := uintptr(p.Bias)
	if err = set(ltDescTransA, unsafe.Pointer(&ta), 4); err != nil {
		return
	}
	if err = set(ltDescTransB, unsafe.Pointer(&tb), 4); err != nil {
		return
	}
	if err = set(ltDescEpilogue, unsafe.Pointer(&epi), 4); err != nil {
		return
	}
	if p.Bias != 0 {
		if err = set(ltDescBiasPointer, unsafe.Pointer(&bias), 8); err != nil {
			return
		}
	}
	for _, l := range []struct {
		dst        *uintptr
		rows, cols int
		ld         int
	}{{&mm.a, ar, ac, p.LdA}, {&mm.b, br, bc, p.LdB}, {&mm.c, p.M, p.N, p.LdC}} {
		if err = b.check("cublasLtMatrixLayoutCreate", b.layoutCreate(l.dst, int32(p.Type), uint64(l.rows), uint64(l.cols), int64(l.ld))); err != nil {
			return
		}
	}
	var algos []LtAlgo
	if algos, err = b.Algos(h, mm, p.Workspace, 1); err != nil {
		return
	}
	mm.algo = algos[0]
	return mm, nil
}

// LtAlgo is a cublasLtMatmulAlgo_t: one way cuBLASLt runs a planned product.
type LtAlgo [64]byte

// Algos returns up to n algorithms cuBLASLt's heuristic ranks for mm's
// product within a workspace of ws bytes, best first; an error wrapping
// ErrNotSupported where none fits.
func (b *BLASLt) Algos(h LtHandle, mm *LtMatmul, ws uint64, n int) ([]LtAlgo, error) {
	var pref uintptr
	if err := b.check("cublasLtMatmulPreferenceCreate", b.prefCreate(&pref)); err != nil {
		return nil, err
	}
	defer b.prefDestroy(pref)
	if err := b.check("cublasLtMatmulPreferenceSetAttribute", b.prefSetAttribute(pref, ltPrefMaxWS, unsafe.Pointer(&ws), 8)); err != nil {
		return nil, err
	}
	// cublasLtMatmulHeuristicResult_t: the algorithm (64 bytes), its
	// workspace size (8), state (4), waves count (4) and 4 reserved ints.
	const resultSize = 96
	res := make([]byte, resultSize*max(n, 1))
	var got int32
	if err := b.check("cublasLtMatmulAlgoGetHeuristic", b.algoGetHeuristic(uintptr(h), mm.desc, mm.a, mm.b, mm.c, mm.c, pref, int32(max(n, 1)), unsafe.Pointer(&res[0]), &got)); err != nil {
		return nil, err
	}
	var out []LtAlgo
	for i := 0; i < int(got); i++ {
		r := res[i*resultSize : (i+1)*resultSize]
		if state := int32(binary.LittleEndian.Uint32(r[72:76])); state != cublasStatusSuccess {
			continue
		}
		var a LtAlgo
		copy(a[:], r[:64])
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cuda: cuBLASLt has no algorithm for this product: %w", ErrNotSupported)
	}
	return out, nil
}

// SetAlgo makes mm run with a, one of Algos' answers for it.
func (mm *LtMatmul) SetAlgo(a LtAlgo) { mm.algo = a }

// Algo is the algorithm mm runs with.
func (mm *LtMatmul) Algo() LtAlgo { return mm.algo }

// DestroyMatmul frees a planned product's descriptors (nil is ignored).
func (b *BLASLt) DestroyMatmul(mm *LtMatmul) {
	if mm == nil {
		return
	}
	if mm.desc != 0 {
		b.descDestroy(mm.desc)
	}
	for _, l := range []uintptr{mm.a, mm.b, mm.c} {
		if l != 0 {
			b.layoutDestroy(l)
		}
	}
	*mm = LtMatmul{}
}

// Matmul enqueues D = act(alpha op(A) op(B) + beta C + bias) on stream;
// alpha and beta are read when the call is enqueued (or captured).
func (b *BLASLt) Matmul(h LtHandle, mm *LtMatmul, alpha, beta *float32, a, bm, c, d DevPtr, ws DevPtr, wsSize uint64, s Stream) error {
	r, _, _ := purego.SyscallN(b.matmul, uintptr(h), mm.desc, uintptr(unsafe.Pointer(alpha)), uintptr(a), mm.a, uintptr(bm), mm.b,
		uintptr(unsafe.Pointer(beta)), uintptr(c), mm.c, uintptr(d), mm.c, uintptr(unsafe.Pointer(&mm.algo[0])), uintptr(ws), uintptr(wsSize), uintptr(s))
	if int32(r) != cublasStatusSuccess {
		return b.check("cublasLtMatmul", int32(r))
	}
	return nil
}
