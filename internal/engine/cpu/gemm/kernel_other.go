//go:build !amd64 || purego

package gemm

// useAsm and useAVX512 are variables, as on amd64, for the tests.
var useAsm, useAVX512, useAVX512DQ = false, false, false

func kernel(kc int, a, b, c *float32, ldc int, flags int, bias, res *float32, ldr int) {
	kernelGo(kc, a, b, c, ldc, flags, bias, res, ldr)
}

func kernelNarrow(kc int, a, b, c *float32, cols int) { kernelGo(kc, a, b, c, NR, 0, nil, nil, 0) }

func widePanels() int { return 1 }

func kernelPanels(np, kc int, a *float32, pstride int, b *float32, t *zTile) bool { return false }

func kernelStrided(kc int, a, b, c *float32, ldc int, flags int, bias, res *float32, ldb int) bool {
	return false
}

func kernelPairs(kc int, a *float32, pstride int, b *float32, bstep int, c *float32, ld int, npair int, load int) {
	panic("gemm: no 12 x 32 kernel on this CPU")
}

func kernelWide(np, nv, kc int, a *float32, pstride int, b *float32, t *zTile) bool { return false }
