//go:build amd64 && !purego

package gemm

// colsDot1 (cols_amd64.s, AVX-512) accumulates n chunks of 48 products:
// out[i] = sum over chunks c of a[48c+i] * b[48c+i].
//
//go:noescape
func colsDot1(n int, a, b, out *float32)

// colsDotAVX2 is colsDot1 in AVX2/FMA; n >= 1.
//
//go:noescape
func colsDotAVX2(n int, a, b, out *float32)

func colsFast() bool { return useAsm && MR*colsChunk == 48 && ColsMax == 1 }

func colsDot(n int, a, b, out *float32) {
	switch {
	case useAVX512 && colsFast():
		colsDot1(n, a, b, out)
	case colsFast():
		colsDotAVX2(n, a, b, out)
	default:
		colsDotGo(n, a, b, out)
	}
}
