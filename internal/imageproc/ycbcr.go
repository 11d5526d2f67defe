package imageproc

import (
	"image"

	"goinfer/internal/jpeg"
)

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

// upsampleRow fills dst with one full-resolution row y of a chroma plane,
// with libjpeg's upsampling (jpeg.UpsamplePlaneRow). m's rectangle starts at
// the origin (internal/jpeg's always does).
func upsampleRow(m *image.YCbCr, y int, plane []uint8, dst []uint8) {
	fx, fy := 1, 1
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio422:
		fx = 2
	case image.YCbCrSubsampleRatio420:
		fx, fy = 2, 2
	case image.YCbCrSubsampleRatio440:
		fy = 2
	case image.YCbCrSubsampleRatio411:
		fx = 4
	case image.YCbCrSubsampleRatio410:
		fx, fy = 4, 2
	}
	jpeg.UpsamplePlaneRow(dst, y, m.Rect.Dy(), plane, m.CStride, fx, fy)
}
