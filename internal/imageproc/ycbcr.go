package imageproc

import "image"

// libjpeg's YCbCr to RGB conversion (jdcolor.c): 16-bit fixed point with
// per-value tables, and "fancy" chroma upsampling (jdsample.c), a triangle
// filter weighting the nearer chroma sample 3/4. PIL decodes JPEG through
// libjpeg with these defaults; internal/jpeg leaves chroma subsampled (as
// image.YCbCr holds it), and color.YCbCrToRGB rounds differently, so both
// are done here the libjpeg way.

const (
	scaleBits = 16
	oneHalf   = 1 << (scaleBits - 1)
)

func fix(x float64) int32 { return int32(x*(1<<scaleBits) + 0.5) }

var crR, cbB, crG, cbG = func() (crR, cbB, crG, cbG [256]int32) {
	for i := range 256 {
		x := int32(i - 128)
		crR[i] = (fix(1.40200)*x + oneHalf) >> scaleBits
		cbB[i] = (fix(1.77200)*x + oneHalf) >> scaleBits
		crG[i] = -fix(0.71414) * x
		cbG[i] = -fix(0.34414)*x + oneHalf
	}
	return
}()

func clamp255(v int32) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// ycbcrToRGB converts m into out (same size).
func ycbcrToRGB(m *image.YCbCr, out *RGB) {
	w, h := out.W, out.H
	cb := make([]uint8, w)
	cr := make([]uint8, w)
	for y := 0; y < h; y++ {
		upsampleRow(m, y, m.Cb, cb)
		upsampleRow(m, y, m.Cr, cr)
		yrow := m.Y[y*m.YStride : y*m.YStride+w]
		dst := out.Pix[3*y*w : 3*(y+1)*w]
		for x, yy := range yrow {
			Y := int32(yy)
			dst[3*x] = clamp255(Y + crR[cr[x]])
			dst[3*x+1] = clamp255(Y + (cbG[cb[x]]+crG[cr[x]])>>scaleBits)
			dst[3*x+2] = clamp255(Y + cbB[cb[x]])
		}
	}
}

// upsampleRow fills dst with one full-resolution row y of a chroma plane.
// m's rectangle starts at the origin (internal/jpeg's always does).
func upsampleRow(m *image.YCbCr, y int, plane []uint8, dst []uint8) {
	w := len(dst)
	cw := (w + 1) / 2 // chroma samples per row when halved horizontally
	ch := (m.Rect.Dy() + 1) / 2
	row := func(cy int) []uint8 { return plane[cy*m.CStride:] }
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
		copy(dst, row(y)[:w])
	case image.YCbCrSubsampleRatio422:
		h2v1(dst, row(y)[:cw])
	case image.YCbCrSubsampleRatio420:
		// Output row y lies between chroma rows y/2 (weight 3) and the
		// neighbour on its side (weight 1); the edges repeat themselves.
		cy := y / 2
		ny := cy - 1
		if y%2 == 1 {
			ny = cy + 1
		}
		ny = min(max(ny, 0), ch-1)
		h2v2(dst, row(cy)[:cw], row(ny)[:cw])
	case image.YCbCrSubsampleRatio440:
		// libjpeg-turbo's h1v2_fancy_upsample: the vertical half of h2v2.
		cy := y / 2
		ny, bias := cy-1, 1
		if y%2 == 1 {
			ny, bias = cy+1, 2
		}
		ny = min(max(ny, 0), ch-1)
		near, far := row(cy)[:w], row(ny)[:w]
		for x := range dst {
			dst[x] = uint8((int(near[x])*3 + int(far[x]) + bias) >> 2)
		}
	default:
		// 4:1:1 and 4:1:0: libjpeg replicates the nearest sample.
		for x := range dst {
			dst[x] = plane[m.COffset(x, y)]
		}
	}
}

// h2v1 is libjpeg's h2v1_fancy_upsample for one row.
func h2v1(dst, in []uint8) {
	n := len(in)
	if n == 1 {
		for i := range dst {
			dst[i] = in[0]
		}
		return
	}
	out := make([]uint8, 0, 2*n)
	out = append(out, in[0], uint8((int(in[0])*3+int(in[1])+2)>>2))
	for i := 1; i < n-1; i++ {
		v := int(in[i]) * 3
		out = append(out, uint8((v+int(in[i-1])+1)>>2), uint8((v+int(in[i+1])+2)>>2))
	}
	out = append(out, uint8((int(in[n-1])*3+int(in[n-2])+1)>>2), in[n-1])
	copy(dst, out)
}

// h2v2 is libjpeg's h2v2_fancy_upsample for one output row: near is the
// chroma row the output row lies in, far its other neighbour.
func h2v2(dst, near, far []uint8) {
	n := len(near)
	col := func(i int) int { return int(near[i])*3 + int(far[i]) }
	if n == 1 {
		v := uint8((col(0)*4 + 8) >> 4)
		for i := range dst {
			dst[i] = v
		}
		return
	}
	put := func(i int, v int) {
		if i < len(dst) {
			dst[i] = uint8(v)
		}
	}
	this, next := col(0), col(1)
	put(0, (this*4+8)>>4)
	put(1, (this*3+next+7)>>4)
	last := this
	this = next
	for i := 1; i < n-1; i++ {
		next = col(i + 1)
		put(2*i, (this*3+last+8)>>4)
		put(2*i+1, (this*3+next+7)>>4)
		last, this = this, next
	}
	put(2*(n-1), (this*3+last+8)>>4)
	put(2*(n-1)+1, (this*4+7)>>4)
}
