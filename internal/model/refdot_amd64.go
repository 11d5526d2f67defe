//go:build amd64 && !purego

package model

import "golang.org/x/sys/cpu"

// useRefDot32 runs the reference convolution 32 output channels at a time
// in AVX-512 lanes.
var useRefDot32 = cpu.X86.HasAVX512F

//go:noescape
func refDot32AVX512(acc *float64, vals *float64, offs *int32, m int, w *float32)

// refDot32 adds, tap by tap, vals[t] times the 32 weights at
// w[offs[t]*32:] (widened to float64, exactly) to acc's 32 sums.
func refDot32(acc *[refLanes]float64, vals []float64, offs []int32, w []float32) {
	if len(vals) == 0 {
		return
	}
	_ = offs[len(vals)-1]
	refDot32AVX512(&acc[0], &vals[0], &offs[0], len(vals), &w[0])
}
