//go:build !amd64 || purego

package gemm

func colsFast() bool { return false }

func kernelCols(kc int, a, b, out *float32) { panic("gemm: kernelCols without its assembly") }
