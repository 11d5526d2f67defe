//go:build !amd64 || purego

package gemm

func colsFast() bool { return false }

func colsDot(n int, a, b, out *float32) { colsDotGo(n, a, b, out) }
