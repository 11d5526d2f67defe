package vec

import "math"

// SoftmaxRow sets dst[i] = e^(src[i]-m) / sum_j e^(src[j]-m), m the
// row's maximum: softmax over one contiguous row (the scores of one query
// in attention). A NaN anywhere makes the whole row NaN. dst may be src.
func SoftmaxRow(dst, src []float32) {
	if len(dst) == 0 {
		return
	}
	src = src[:len(dst)]
	softmaxRow(dst, src)
}

func softmaxRowGo(dst, src []float32) {
	m := float32(math.Inf(-1))
	for _, v := range src {
		m = max(m, v)
	}
	ExpShift(dst, src, m)
	ScaleShift(dst, dst, 1/Sum(dst), 0)
}
