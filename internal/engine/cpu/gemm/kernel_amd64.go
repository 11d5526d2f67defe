//go:build amd64 && !purego

package gemm

import "golang.org/x/sys/cpu"

//go:generate go run gen_avx512.go

// useAsm and useAVX512 are fixed at start-up from the CPU's features (x/sys/cpu
// also checks that the OS saves the registers); tests switch them off to
// cover the other paths.
var (
	useAsm    = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	useAVX512 = useAsm && cpu.X86.HasAVX512F
	// useAVX512DQ adds the mask moves packing uses.
	useAVX512DQ = useAVX512 && cpu.X86.HasAVX512DQ
)

// kernelAVX2 is kernelGo in AVX2/FMA assembly (kernel_amd64.s), B's rows
// ldb floats apart.
//
//go:noescape
func kernelAVX2(kc int, a, b, c *float32, ldc int, flags int, bias, res *float32, ldr int, ldb int)

// kernelHalfAVX2 computes the left half (NR/2 columns) of a tile into
// scratch of row stride NR.
//
//go:noescape
func kernelHalfAVX2(kc int, a, b, c *float32)

// kernelZ1...kernelZ4 compute 1 to 4 consecutive A panels against one B
// panel with AVX-512 (kernel_avx512_amd64.s, generated): one zmm per tile
// row, A values broadcast from memory by the FMAs themselves; t says where
// the rows go.
//
//go:noescape
func kernelZ1(kc int, a *float32, pstride int, b *float32, t *zTile)

//go:noescape
func kernelZ2(kc int, a *float32, pstride int, b *float32, t *zTile)

//go:noescape
func kernelZ3(kc int, a *float32, pstride int, b *float32, t *zTile)

//go:noescape
func kernelZ4(kc int, a *float32, pstride int, b *float32, t *zTile)

func kernelNarrow(kc int, a, b, c *float32, cols int) {
	if useAVX512 {
		t := zTile{c: c, ld: NR, rows: MR, cols: cols, split: cols, ldb: NR}
		kernelZ1(kc, a, MR*kc, b, &t)
		return
	}
	if useAsm && cols <= NR/2 {
		kernelHalfAVX2(kc, a, b, c)
		return
	}
	kernel(kc, a, b, c, NR, 0, nil, nil, 0)
}

func kernel(kc int, a, b, c *float32, ldc int, flags int, bias, res *float32, ldr int) {
	if useAVX512 && (flags&flagRes == 0 || ldr == ldc) {
		t := zTile{c: c, res: res, bias: bias, ld: ldc, rows: MR, cols: NR, split: NR, flags: flags, ldb: NR}
		kernelZ1(kc, a, MR*kc, b, &t)
		return
	}
	if useAsm {
		kernelAVX2(kc, a, b, c, ldc, flags, bias, res, ldr, NR)
		return
	}
	kernelGo(kc, a, b, c, ldc, flags, bias, res, ldr)
}

// widePanels is how many panels kernelPanels computes per call.
func widePanels() int {
	if useAVX512 {
		return 4
	}
	return 1
}

// kernelPanels computes np <= widePanels() panels in one call; false means
// the CPU has no kernel for it.
func kernelPanels(np, kc int, a *float32, pstride int, b *float32, t *zTile) bool {
	if !useAVX512 {
		return false
	}
	switch np {
	case 1:
		kernelZ1(kc, a, pstride, b, t)
	case 2:
		kernelZ2(kc, a, pstride, b, t)
	case 3:
		kernelZ3(kc, a, pstride, b, t)
	case 4:
		kernelZ4(kc, a, pstride, b, t)
	default:
		return false
	}
	return true
}

// kernelStrided computes one MR x NR tile from B rows ldb floats apart
// with AVX2; false means the CPU has no such kernel.
func kernelStrided(kc int, a, b, c *float32, ldc int, flags int, bias, res *float32, ldb int) bool {
	if !useAsm {
		return false
	}
	kernelAVX2(kc, a, b, c, ldc, flags, bias, res, ldc, ldb)
	return true
}
