//go:build amd64 && !purego

package vec

//go:noescape
func maxWin1AVX2(dst, src *float32, n, k, dil int)

//go:noescape
func maxWin2AVX2(dst, src *float32, n, k, dil int)

//go:noescape
func maxRowsAVX2(dst, src *float32, n, rows, stride int)

func maxRows(dst, src []float32, rows, stride int) {
	n := len(dst) &^ 7
	if useAsm && n > 0 {
		maxRowsAVX2(&dst[0], &src[0], n, rows, 4*stride)
	} else {
		n = 0
	}
	if n < len(dst) {
		maxRowsGo(dst[n:], src[n:], rows, stride)
	}
}

func maxWindows(dst, src []float32, k, stride, dil int) {
	n := 0
	if useAsm && stride <= 2 {
		n = len(dst) &^ 7
		// A stride-2 block's loads reach one float past its last tap.
		for stride == 2 && n > 0 && 2*(n-1)+(k-1)*dil+2 > len(src) {
			n -= 8
		}
		switch {
		case n == 0:
		case stride == 1:
			maxWin1AVX2(&dst[0], &src[0], n, k, dil)
		default:
			maxWin2AVX2(&dst[0], &src[0], n, k, dil)
		}
	}
	maxWindowsGo(dst[n:], src[n*stride:], k, stride, dil)
}
