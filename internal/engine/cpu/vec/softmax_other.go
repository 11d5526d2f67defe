//go:build !amd64 || purego

package vec

func softmaxRow(dst, src []float32) { softmaxRowGo(dst, src) }
