// Package gemm is the single-precision matrix multiply under the cpu engine's
// convolutions and linear layers: BLIS-style blocking with a register-blocked
// MR x NR micro-kernel (AVX2/FMA assembly on amd64 when the CPU has it, pure
// Go elsewhere).
//
// The engine drives the blocking itself, because its B operand is an implicit
// im2col matrix packed straight from the activations; this package provides
// the packed-A format, the micro-kernel and a plain SGEMM built from them.
package gemm

import (
	"fmt"

	"goinfer/internal/hugepage"
)

// The micro-kernel's tile: MR rows of A (output channels) by NR columns of B
// (output pixels). 6x16 keeps 12 AVX2 accumulators, two B vectors and one
// broadcast A value in the 16 ymm registers.
const (
	MR = 6
	NR = 16
)

// KCMax bounds the depth of one packed block: an NR-wide B micro-panel of
// KCMax rows (16 KiB) plus an MR-row A micro-panel (6 KiB) fit in a 32 KiB L1.
const KCMax = 256

// BlockDepth splits a reduction of depth k into equal blocks of at most
// KCMax, so that no block is a thin remainder.
func BlockDepth(k int) int {
	if k <= KCMax {
		return k
	}
	nb := (k + KCMax - 1) / KCMax
	return (k + nb - 1) / nb
}

// PackedA is an M x K row-major matrix rearranged for the micro-kernel: split
// into blocks of KC columns (the last may be shorter), each block into
// panels of MR rows stored column by column (MR values per k), rows past M
// zero-filled.
type PackedA struct {
	M, K int
	KC   int // block depth (BlockDepth(K) unless chosen otherwise)
	// Panels is the number of MR-row panels: ceil(M/MR).
	Panels int
	Data   []float32
}

// PackA packs the m x k matrix a (row stride lda) in blocks of depth kc.
func PackA(a []float32, m, k, lda, kc int) (*PackedA, error) {
	if m < 1 || k < 1 || kc < 1 || lda < k {
		return nil, fmt.Errorf("gemm: PackA of %dx%d (lda %d, kc %d): bad dimensions", m, k, lda, kc)
	}
	if need := (m-1)*lda + k; len(a) < need {
		return nil, fmt.Errorf("gemm: PackA of %dx%d (lda %d): have %d values, need %d", m, k, lda, len(a), need)
	}
	p, err := NewPackedA(m, k, kc)
	if err != nil {
		return nil, err
	}
	for k0 := 0; k0 < k; k0 += kc {
		kcb := min(kc, k-k0)
		for ip := 0; ip < p.Panels; ip++ {
			dst := p.Panel(k0/kc, ip)
			for i := 0; i < MR; i++ {
				r := ip*MR + i
				if r >= m {
					continue // zero rows
				}
				row := a[r*lda+k0 : r*lda+k0+kcb]
				for kk, v := range row {
					dst[kk*MR+i] = v
				}
			}
		}
	}
	return p, nil
}

// NewPackedA returns an all-zero m x k PackedA of block depth kc, for a
// caller that computes the matrix's values straight into the packed layout
// (Offset) instead of packing a row-major copy.
func NewPackedA(m, k, kc int) (*PackedA, error) {
	ps, err := NewPackedAs(1, m, k, kc)
	if err != nil {
		return nil, err
	}
	return ps[0], nil
}

// NewPackedAs returns n all-zero m x k PackedAs of block depth kc in one
// allocation, which the kernel can back with huge pages even where one
// matrix is smaller than a huge page (first touches of 4 KiB pages are
// slow on some VMs).
func NewPackedAs(n, m, k, kc int) ([]*PackedA, error) {
	if n < 1 || m < 1 || k < 1 || kc < 1 {
		return nil, fmt.Errorf("gemm: %d PackedAs of %dx%d (kc %d): bad dimensions", n, m, k, kc)
	}
	panels := (m + MR - 1) / MR
	size := panels * MR * k
	data := hugepage.Float32s(n * size)
	ps := make([]*PackedA, n)
	for i := range ps {
		ps[i] = &PackedA{M: m, K: k, KC: kc, Panels: panels, Data: data[i*size : (i+1)*size : (i+1)*size]}
	}
	return ps, nil
}

// Offset is the index in Data of element (r, col). Within one KC block the
// next column's element is MR further on: Offset(r, col+1) = Offset(r, col)
// + MR unless col+1 starts a block.
func (p *PackedA) Offset(r, col int) int {
	k0, kc := p.BlockK(col / p.KC)
	return k0*p.Panels*MR + (r/MR)*MR*kc + (col-k0)*MR + r%MR
}

// Blocks is the number of KC-deep blocks.
func (p *PackedA) Blocks() int { return (p.K + p.KC - 1) / p.KC }

// BlockK returns the first column and depth of block kb.
func (p *PackedA) BlockK(kb int) (k0, kc int) {
	k0 = kb * p.KC
	return k0, min(p.KC, p.K-k0)
}

// Panel returns panel ip (rows ip*MR...) of block kb: kc*MR values.
func (p *PackedA) Panel(kb, ip int) []float32 {
	k0, kc := p.BlockK(kb)
	off := k0*p.Panels*MR + ip*MR*kc
	return p.Data[off : off+MR*kc : off+MR*kc]
}

// Kernel computes the MR x NR tile C = A*B (load false) or C += A*B (load
// true) over depth kc, where a is an MR-row panel (kc*MR values, as PackedA
// stores them), b an NR-wide panel (kc*NR values, row by row) and c the
// tile's first element with row stride ldc. It uses the AVX2 kernel when the
// CPU has AVX2 and FMA.
func Kernel(kc int, a, b, c []float32, ldc int, load bool) {
	if kc < 1 || len(a) < kc*MR || len(b) < kc*NR || ldc < NR || len(c) < (MR-1)*ldc+NR {
		panic(fmt.Sprintf("gemm: Kernel(kc=%d, len a=%d, len b=%d, len c=%d, ldc=%d): operands too short", kc, len(a), len(b), len(c), ldc))
	}
	var flags int
	if load {
		flags = flagLoad
	}
	kernel(kc, &a[0], &b[0], &c[0], ldc, flags, nil, nil, 0)
}

// KernelTile computes the tile C = A*B into tile (MR x NR, row stride NR),
// of which only the first cols columns matter: panels with at most NR/2
// real columns (the ragged end of a row of output pixels) cost half.
func KernelTile(kc int, a, b, tile []float32, cols int) {
	if kc < 1 || len(a) < kc*MR || len(b) < kc*NR || len(tile) < MR*NR || cols < 1 || cols > NR {
		panic(fmt.Sprintf("gemm: KernelTile(kc=%d, len a=%d, len b=%d, len tile=%d, cols=%d): bad operands", kc, len(a), len(b), len(tile), cols))
	}
	kernelNarrow(kc, &a[0], &b[0], &tile[0], cols)
}

// Kernel flags: what happens to the finished tile before it is stored.
const (
	flagLoad = 1 << iota // add C's old values
	flagBias             // add bias[row]
	flagRes              // add the residual tile
	flagReLU             // clamp at zero
)

// Epilogue is what KernelEpilogue applies to a finished tile, in order:
// out = relu?(acc + Bias[row] + Res), the epilogue cuDNN's fused
// convolution computes.
type Epilogue struct {
	Bias  []float32 // MR values (this tile's rows), or nil
	Res   []float32 // the residual tile's first element, or nil
	LdRes int       // the residual's row stride
	ReLU  bool
}

// KernelEpilogue is Kernel followed by the epilogue e, applied while the
// tile is still in registers.
func KernelEpilogue(kc int, a, b, c []float32, ldc int, load bool, e Epilogue) {
	if kc < 1 || len(a) < kc*MR || len(b) < kc*NR || ldc < NR || len(c) < (MR-1)*ldc+NR {
		panic(fmt.Sprintf("gemm: KernelEpilogue(kc=%d, len a=%d, len b=%d, len c=%d, ldc=%d): operands too short", kc, len(a), len(b), len(c), ldc))
	}
	var flags int
	var bias, res *float32
	if load {
		flags |= flagLoad
	}
	if e.Bias != nil {
		if len(e.Bias) < MR {
			panic(fmt.Sprintf("gemm: KernelEpilogue: bias has %d values, want %d", len(e.Bias), MR))
		}
		flags |= flagBias
		bias = &e.Bias[0]
	}
	if e.Res != nil {
		if e.LdRes < NR || len(e.Res) < (MR-1)*e.LdRes+NR {
			panic(fmt.Sprintf("gemm: KernelEpilogue: residual of %d values with stride %d is too short", len(e.Res), e.LdRes))
		}
		flags |= flagRes
		res = &e.Res[0]
	}
	if e.ReLU {
		flags |= flagReLU
	}
	kernel(kc, &a[0], &b[0], &c[0], ldc, flags, bias, res, e.LdRes)
}

// ApplyEpilogue applies e to the top-left rows x cols of the tile at c (row
// stride ldc): the path for partial tiles, which the kernel computes into
// scratch.
func ApplyEpilogue(c []float32, ldc, rows, cols int, e Epilogue) {
	for i := 0; i < rows; i++ {
		o := c[i*ldc : i*ldc+cols]
		var bv float32
		if e.Bias != nil {
			bv = e.Bias[i]
		}
		if e.Res != nil {
			r := e.Res[i*e.LdRes : i*e.LdRes+cols]
			for x := range o {
				o[x] += bv + r[x]
			}
		} else if e.Bias != nil {
			for x := range o {
				o[x] += bv
			}
		}
		if e.ReLU {
			for x, v := range o {
				o[x] = max(v, 0) // NaN stays NaN, as in PyTorch

			}
		}
	}
}

// HasAsm reports whether Kernel runs the assembly micro-kernel.
func HasAsm() bool { return useAsm }

// PanelRun returns panels ip... of block kb, from panel ip to the end of the
// block: the operand of KernelPanels, whose panels are MR*kc floats apart.
func (p *PackedA) PanelRun(kb, ip int) []float32 {
	k0, kc := p.BlockK(kb)
	off := k0*p.Panels*MR + ip*MR*kc
	end := (k0 + kc) * p.Panels * MR
	return p.Data[off:end:end]
}
