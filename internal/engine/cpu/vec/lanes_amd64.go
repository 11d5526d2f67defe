//go:build amd64 && !purego

package vec

// interleaveT8 and deinterleaveT8 move 8x8 blocks through AVX2
// transposes (transpose_amd64.s); offs are byte offsets, mask an 8-lane
// load/store mask for the last n mod 8 pixels.
//
//go:noescape
func interleaveT8(dst, src *float32, offs *int, n int, mask *int32, rows, srcRow, dstRow int)

//go:noescape
func deinterleaveT8(dst, src *float32, nc, plane, n int, mask *int32)

// tailMasks[8-r:][:8] selects the first r of 8 lanes.
var tailMasks = [16]int32{-1, -1, -1, -1, -1, -1, -1, -1}

func interleave(dst, src []float32, nc, plane, rows, n, srcRow, dstRow int) {
	if !useAsm {
		interleaveGo(dst, src, nc, plane, rows, n, srcRow, dstRow)
		return
	}
	// Lanes past nc repeat the last channel: no reads outside src.
	var offs [DWLanes]int
	for c := range offs {
		offs[c] = min(c, nc-1) * plane * 4
	}
	interleaveT8(&dst[0], &src[0], &offs[0], n, &tailMasks[8-n%8], rows, srcRow, dstRow)
}

func deinterleave(dst, src []float32, nc, plane, n int) {
	if !useAsm {
		deinterleaveGo(dst, src, nc, plane, n)
		return
	}
	deinterleaveT8(&dst[0], &src[0], nc, plane, n, &tailMasks[8-n%8])
}
