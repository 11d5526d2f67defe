package jpeg

import (
	"image"
)

// image wraps the decoded planes in the image type their color space and
// sampling layout call for, following libjpeg's rules for the color
// space: a JFIF or Adobe marker decides, else the component ids do.
func (d *decoder) image() (image.Image, error) {
	d.finish()
	rect := image.Rect(0, 0, d.width, d.height)
	c := d.comps
	switch len(c) {
	case 1:
		return &image.Gray{Pix: c[0].pix, Stride: c[0].bw * 8, Rect: rect}, nil
	case 3:
		rgb := !d.jfif && (d.adobe && d.transform == 0 ||
			!d.adobe && c[0].id == 'R' && c[1].id == 'G' && c[2].id == 'B')
		if rgb {
			m := image.NewRGBA(rect)
			planes := d.fullPlanes()
			for i := 0; i < d.width*d.height; i++ {
				m.Pix[4*i], m.Pix[4*i+1], m.Pix[4*i+2], m.Pix[4*i+3] = planes[0][i], planes[1][i], planes[2][i], 255
			}
			return m, nil
		}
		if r, ok := d.subsampleRatio(); ok {
			return &image.YCbCr{
				Y: c[0].pix, Cb: c[1].pix, Cr: c[2].pix,
				YStride: c[0].bw * 8, CStride: c[1].bw * 8,
				SubsampleRatio: r, Rect: rect,
			}, nil
		}
		planes := d.fullPlanes()
		return &image.YCbCr{
			Y: planes[0], Cb: planes[1], Cr: planes[2],
			YStride: d.width, CStride: d.width,
			SubsampleRatio: image.YCbCrSubsampleRatio444, Rect: rect,
		}, nil
	default:
		return d.cmyk(rect), nil
	}
}

// subsampleRatio reports the image.YCbCr layout of a luma plane at full
// resolution and two chroma planes sampled alike.
func (d *decoder) subsampleRatio() (image.YCbCrSubsampleRatio, bool) {
	y, cb, cr := d.comps[0], d.comps[1], d.comps[2]
	if y.h != d.hmax || y.v != d.vmax || cb.h != cr.h || cb.v != cr.v {
		return 0, false
	}
	switch [2]int{y.h / cb.h, y.v / cb.v} {
	case [2]int{1, 1}:
		return image.YCbCrSubsampleRatio444, true
	case [2]int{2, 1}:
		return image.YCbCrSubsampleRatio422, true
	case [2]int{2, 2}:
		return image.YCbCrSubsampleRatio420, true
	case [2]int{1, 2}:
		return image.YCbCrSubsampleRatio440, true
	case [2]int{4, 1}:
		return image.YCbCrSubsampleRatio411, true
	case [2]int{4, 2}:
		return image.YCbCrSubsampleRatio410, true
	}
	return 0, false
}

// fullPlanes returns every component at full resolution (width x height,
// no padding), upsampled as libjpeg does.
func (d *decoder) fullPlanes() [][]uint8 {
	out := make([][]uint8, len(d.comps))
	for i := range d.comps {
		c := &d.comps[i]
		out[i] = make([]uint8, d.width*d.height)
		upsamplePlane(out[i], d.width, d.height, c.pix, c.bw*8, d.hmax/c.h, d.vmax/c.v)
	}
	return out
}

// cmyk converts four components to an image.CMYK as PIL presents them:
// Adobe files store inverted CMYK (PIL's "CMYK;I"), and YCCK (Adobe
// transform 2) is first taken back to inverted CMY with libjpeg's YCbCr
// arithmetic.
func (d *decoder) cmyk(rect image.Rectangle) *image.CMYK {
	planes := d.fullPlanes()
	m := image.NewCMYK(rect)
	ycck := d.adobe && d.transform != 0
	for i := 0; i < d.width*d.height; i++ {
		c, mm, y, k := planes[0][i], planes[1][i], planes[2][i], planes[3][i]
		if ycck {
			r, g, b := yccToRGB(c, mm, y)
			c, mm, y = 255-r, 255-g, 255-b
		}
		if d.adobe {
			c, mm, y, k = 255-c, 255-mm, 255-y, 255-k
		}
		m.Pix[4*i], m.Pix[4*i+1], m.Pix[4*i+2], m.Pix[4*i+3] = c, mm, y, k
	}
	return m
}

// yccToRGB is libjpeg's fixed-point YCbCr to RGB conversion (16 bits of
// fraction, each term rounded as its tables are).
func yccToRGB(y, cb, cr uint8) (r, g, b uint8) {
	const half = 1 << 15
	fix := func(x float64) int32 { return int32(x*(1<<16) + 0.5) }
	Y, Cb, Cr := int32(y), int32(cb)-128, int32(cr)-128
	r = clamp(Y + (fix(1.40200)*Cr+half)>>16)
	g = clamp(Y + (-fix(0.34414)*Cb-fix(0.71414)*Cr+half)>>16)
	b = clamp(Y + (fix(1.77200)*Cb+half)>>16)
	return
}

func clamp(v int32) uint8 {
	return uint8(min(max(v, 0), 255))
}
