package gemm

import "unsafe"

// colsDotGo is colsDot1 in Go, for ColsMax columns.
func colsDotGo(n int, a, b, out *float32) {
	const m = MR * colsChunk
	as := unsafe.Slice(a, n*m)
	bs := unsafe.Slice(b, n*ColsMax*m)
	os := unsafe.Slice(out, ColsMax*m)
	clear(os)
	for c := range n {
		for j := range ColsMax {
			for i := range m {
				os[j*m+i] += as[c*m+i] * bs[(c*ColsMax+j)*m+i]
			}
		}
	}
}
