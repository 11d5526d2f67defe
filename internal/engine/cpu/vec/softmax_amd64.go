//go:build amd64 && !purego

package vec

import "math"

// softmaxRowAVX512 is SoftmaxRow with zmm registers, the row's tail
// (n mod 16) under a mask: three passes (maximum; e^(x-m) stored and
// summed; scaled by 1/sum) over a row that stays in L1.
//
//go:noescape
func softmaxRowAVX512(dst, src *float32, n int)

func softmaxRow(dst, src []float32) {
	if useAVX512 {
		softmaxRowAVX512(&dst[0], &src[0], len(dst))
		return
	}
	softmaxRowGo(dst, src)
}

// softmaxNegInf starts the assembly's running maximum.
var softmaxNegInf = float32(math.Inf(-1))
