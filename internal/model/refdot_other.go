//go:build !amd64 || purego

package model

// useRefDot32 is false where refDot32 has no vector code: the per-channel
// loop is as fast.
var (
	useRefDot32       = false
	useRefDot32AVX512 = false
)

func refDot32(acc *[refLanes]float64, vals []float64, offs []int32, w []float32) {
	refDot32Go(acc, vals, offs, w)
}
