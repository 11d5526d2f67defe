//go:build !amd64 || purego

package gemm

func packGather(dst, src []float32, g *Gather) { packGatherGo(dst, src, g) }
