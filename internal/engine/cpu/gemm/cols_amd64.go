//go:build amd64 && !purego

package gemm

// colsDot1 (cols_amd64.s, AVX-512) accumulates n chunks of 48 products:
// out[i] = sum over chunks c of a[48c+i] * b[48c+i].
//
//go:noescape
func colsDot1(n int, a, b, out *float32)

func colsFast() bool { return useAVX512 && MR*colsChunk == 48 && ColsMax == 1 }

func colsDot(n int, a, b, out *float32) {
	if colsFast() {
		colsDot1(n, a, b, out)
		return
	}
	colsDotGo(n, a, b, out)
}
