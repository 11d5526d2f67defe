//go:build amd64 && !purego

package gemm

import "golang.org/x/sys/cpu"

// useAsm is fixed at start-up from the CPU's features.
var useAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// kernelAVX2 is kernelGo in AVX2/FMA assembly (kernel_amd64.s).
//
//go:noescape
func kernelAVX2(kc int, a, b, c *float32, ldc int, flags int, bias, res *float32, ldr int)

// kernelHalfAVX2 computes the left half (NR/2 columns) of a tile into
// scratch of row stride NR.
//
//go:noescape
func kernelHalfAVX2(kc int, a, b, c *float32)

func kernelNarrow(kc int, a, b, c *float32, cols int) {
	if useAsm && cols <= NR/2 {
		kernelHalfAVX2(kc, a, b, c)
		return
	}
	kernel(kc, a, b, c, NR, 0, nil, nil, 0)
}

func kernel(kc int, a, b, c *float32, ldc int, flags int, bias, res *float32, ldr int) {
	if useAsm {
		kernelAVX2(kc, a, b, c, ldc, flags, bias, res, ldr)
		return
	}
	kernelGo(kc, a, b, c, ldc, flags, bias, res, ldr)
}
