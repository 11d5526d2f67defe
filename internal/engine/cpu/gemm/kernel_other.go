//go:build !amd64 || purego

package gemm

const useAsm = false

func kernel(kc int, a, b, c *float32, ldc int, flags int, bias, res *float32, ldr int) {
	kernelGo(kc, a, b, c, ldc, flags, bias, res, ldr)
}

func kernelNarrow(kc int, a, b, c *float32, cols int) { kernelGo(kc, a, b, c, NR, 0, nil, nil, 0) }
