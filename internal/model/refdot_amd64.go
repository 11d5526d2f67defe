//go:build amd64 && !purego

package model

import "golang.org/x/sys/cpu"

// useRefDot32 runs the reference convolution 32 output channels at a time
// in vector lanes, AVX-512 ones where the CPU has them (useRefDot32AVX512),
// else AVX ones.
var (
	useRefDot32       = cpu.X86.HasAVX512F || cpu.X86.HasAVX
	useRefDot32AVX512 = cpu.X86.HasAVX512F
)

//go:noescape
func refDot32AVX512(acc *float64, vals *float64, offs *int32, m int, w *float32)

//go:noescape
func refDot32AVX(acc *float64, vals *float64, offs *int32, m int, w *float32)

// refDot32 adds, tap by tap, vals[t] times the 32 weights at
// w[offs[t]*32:] (widened to float64, exactly) to acc's 32 sums.
func refDot32(acc *[refLanes]float64, vals []float64, offs []int32, w []float32) {
	if len(vals) == 0 {
		return
	}
	_ = offs[len(vals)-1]
	if !useRefDot32AVX512 {
		refDot32AVX(&acc[0], &vals[0], &offs[0], len(vals), &w[0])
		return
	}
	refDot32AVX512(&acc[0], &vals[0], &offs[0], len(vals), &w[0])
}
