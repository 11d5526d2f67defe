package vec

import "fmt"

// Interleave sets dst[(r*dstRow+p)*DWLanes+c] = src[c*plane+r*srcRow+p]
// for r < rows, p < n and c < nc: rows of n pixels of nc channel planes
// into channel-blocked order (DWTile's input tile, whose rows are dstRow
// pixels apart). Lanes nc and up of those pixels are left unspecified. It
// panics unless 0 < nc <= DWLanes, the rows do not overlap and the
// operands hold the elements named.
func Interleave(dst, src []float32, nc, plane, rows, n, srcRow, dstRow int) {
	if n <= 0 || rows <= 0 {
		return
	}
	if nc <= 0 || nc > DWLanes || srcRow < n || dstRow < n || plane < (rows-1)*srcRow+n ||
		len(dst) < ((rows-1)*dstRow+n)*DWLanes || len(src) < (nc-1)*plane+(rows-1)*srcRow+n {
		panic(fmt.Sprintf("vec.Interleave: %d channels of %dx%d pixels (rows %d and %d apart, plane %d) from %d floats into %d",
			nc, rows, n, srcRow, dstRow, plane, len(src), len(dst)))
	}
	interleave(dst, src, nc, plane, rows, n, srcRow, dstRow)
}

// Deinterleave sets dst[c*plane+p] = src[p*DWLanes+c] for c < nc and p <
// n: the inverse of Interleave (DWTile's output back to planes). src
// holds n whole pixels (the vector paths read all their lanes). It panics
// unless 0 < nc <= DWLanes and the operands hold the elements named.
func Deinterleave(dst, src []float32, nc, plane, n int) {
	if n <= 0 {
		return
	}
	if nc <= 0 || nc > DWLanes || plane < n || len(src) < n*DWLanes || len(dst) < (nc-1)*plane+n {
		panic(fmt.Sprintf("vec.Deinterleave: %d channels of %d pixels (plane %d) from %d floats into %d", nc, n, plane, len(src), len(dst)))
	}
	deinterleave(dst, src, nc, plane, n)
}

func interleaveGo(dst, src []float32, nc, plane, rows, n, srcRow, dstRow int) {
	for r := 0; r < rows; r++ {
		for c := 0; c < nc; c++ {
			s := src[c*plane+r*srcRow : c*plane+r*srcRow+n]
			d := dst[r*dstRow*DWLanes+c : (r*dstRow+n-1)*DWLanes+c+1]
			for p, v := range s {
				d[p*DWLanes] = v
			}
		}
	}
}

func deinterleaveGo(dst, src []float32, nc, plane, n int) {
	for c := 0; c < nc; c++ {
		d := dst[c*plane : c*plane+n]
		s := src[c : (n-1)*DWLanes+c+1]
		for p := range d {
			d[p] = s[p*DWLanes]
		}
	}
}
