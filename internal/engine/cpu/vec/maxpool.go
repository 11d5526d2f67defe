package vec

import "math"

// MaxWindows sets dst[i] to the maximum of the k floats
// src[i*stride + t*dil] for t < k (NaN if any of them is NaN). src must
// hold (len(dst)-1)*stride + (k-1)*dil + 1 floats; k, stride and dil are
// positive. Strides 1 and 2 run in assembly where the CPU has AVX2.
func MaxWindows(dst, src []float32, k, stride, dil int) {
	if len(dst) == 0 {
		return
	}
	if k < 1 || stride < 1 || dil < 1 {
		panic("vec: MaxWindows with a non-positive kernel, stride or dilation")
	}
	src = src[:(len(dst)-1)*stride+(k-1)*dil+1]
	maxWindows(dst, src, k, stride, dil)
}

// maxWindowsGo uses the builtin max (NaN if either is): branch-free,
// where a compare and branch per tap mispredicts on real data.
func maxWindowsGo(dst, src []float32, k, stride, dil int) {
	if k == 3 && dil == 1 { // the common 3-wide window, unrolled
		for i := range dst {
			w := src[i*stride : i*stride+3]
			dst[i] = max(w[0], w[1], w[2])
		}
		return
	}
	for i := range dst {
		w := src[i*stride:]
		m := w[0]
		for t := 1; t < k; t++ {
			m = max(m, w[t*dil])
		}
		dst[i] = m
	}
}

// MaxPool2D is a 2-D max pooling's geometry over one plane: windows of
// KH x KW taps, DH and DW apart, placed SH and SW apart, starting PadT
// rows above and PadL columns left of the plane. Taps outside the plane
// are -inf (ONNX's and PyTorch's padding), so a window wholly outside
// gives -inf. Bottom and right padding (and ceil mode) need no field:
// OutH and OutW say how far the windows go.
type MaxPool2D struct {
	InH, InW, OutH, OutW   int
	KH, KW, SH, SW, DH, DW int
	PadT, PadL             int
}

// ScratchLen is the floats of scratch Plane needs: one padded input row
// (and a float the stride-2 kernel may read past its last tap).
func (g *MaxPool2D) ScratchLen() int {
	return max(g.PadL+g.InW, (g.OutW-1)*g.SW+(g.KW-1)*g.DW+1) + 1
}

// Plane max-pools the InH x InW plane in into the OutH x OutW plane out,
// with tmp (ScratchLen floats) as workspace. Each output row first reduces
// its window's input rows to one row of column maxima in tmp (between the
// -inf padding), then MaxWindows takes the columns' windows, so every
// output pixel costs a few vector operations whatever its position.
func (g *MaxPool2D) Plane(out, in, tmp []float32) { g.Rows(out, in, tmp, 0, g.OutH) }

// Rows is Plane for output rows [oy0, oy1) of out (the whole plane).
func (g *MaxPool2D) Rows(out, in, tmp []float32, oy0, oy1 int) {
	in, out = in[:g.InH*g.InW], out[:g.OutH*g.OutW]
	tmp = tmp[:g.ScratchLen()]
	ninf := float32(math.Inf(-1))
	fill(tmp[:g.PadL], ninf)
	fill(tmp[g.PadL+g.InW:], ninf)
	row := tmp[g.PadL : g.PadL+g.InW]
	for oy := max(oy0, 0); oy < min(oy1, g.OutH); oy++ {
		orow := out[oy*g.OutW : (oy+1)*g.OutW]
		y, ky := oy*g.SH-g.PadT, 0
		if y < 0 {
			ky = (-y + g.DH - 1) / g.DH
			y += ky * g.DH
		}
		if ky >= g.KH || y >= g.InH {
			fill(orow, ninf)
			continue
		}
		rows := min(g.KH-ky, (g.InH-y+g.DH-1)/g.DH)
		maxRows(row, in[y*g.InW:(y+(rows-1)*g.DH+1)*g.InW], rows, g.DH*g.InW)
		maxWindows(orow, tmp, g.KW, g.SW, g.DW)
	}
}

// maxRowsGo sets dst[i] to the maximum of src[r*stride+i] for r < rows.
func maxRowsGo(dst, src []float32, rows, stride int) {
	n := len(dst)
	if rows == 3 { // the common 3-high window in one pass
		a, b, c := src[:n], src[stride:stride+n], src[2*stride:2*stride+n]
		for i := range dst {
			dst[i] = max(a[i], b[i], c[i])
		}
		return
	}
	copy(dst, src[:n])
	for r := 1; r < rows; r++ {
		maxGo(dst, src[r*stride:r*stride+n])
	}
}

func fill(v []float32, x float32) {
	for i := range v {
		v[i] = x
	}
}
