package imageproc

import "math"

// PIL's fixed-point resampling of 8-bit images (libImaging/Resample.c):
// filter weights are computed in float64, normalized to sum to one,
// scaled to integers with precisionBits fractional bits, and each pass
// rounds and clamps its result to 8 bits. Reproducing those steps exactly
// is what makes the output match PIL's byte for byte.
const precisionBits = 32 - 8 - 2

// bilinear is PIL's triangle filter with support 1.
func bilinear(x float64) float64 {
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return 1 - x
	}
	return 0
}

// bicubic is PIL's cubic convolution filter (a = -0.5) with support 2.
func bicubic(x float64) float64 {
	const a = -0.5
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return ((a+2)*x-(a+3))*x*x + 1
	}
	if x < 2 {
		return (((x-5)*x+8)*x - 4) * a
	}
	return 0
}

// Filter is one of PIL's resampling filters: its kernel and support (in
// input pixels at scale 1; downscaling stretches it, which antialiases).
type Filter struct {
	name    string
	support float64
	kernel  func(float64) float64
}

// The filters torchvision's transforms use on PIL images.
var (
	Bilinear = Filter{"bilinear", 1, bilinear}
	Bicubic  = Filter{"bicubic", 2, bicubic}
)

func (f Filter) String() string { return f.name }

// orBilinear is f, or Bilinear for the zero Filter.
func (f Filter) orBilinear() Filter {
	if f.kernel == nil {
		return Bilinear
	}
	return f
}

// coeffs are one pass's filter taps: output pixel i reads input pixels
// bounds[2i] .. bounds[2i]+bounds[2i+1]-1 with weights k[i*ksize:].
type coeffs struct {
	ksize  int
	bounds []int
	k      []int32
}

// precompute is PIL's precompute_coeffs followed by normalize_coeffs_8bpc
// for resampling inSize pixels (the box [in0, in1)) to outSize with f.
// When downscaling, the filter is stretched by the scale factor: that is
// the antialiasing.
func precompute(inSize int, in0, in1 float32, outSize int, f Filter) coeffs {
	scale := float64(in1-in0) / float64(outSize)
	filterscale := max(scale, 1)
	support := f.support * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	c := coeffs{ksize: ksize, bounds: make([]int, 2*outSize), k: make([]int32, outSize*ksize)}
	w := make([]float64, ksize)
	for xx := 0; xx < outSize; xx++ {
		center := float64(in0) + (float64(xx)+0.5)*scale
		ss := 1 / filterscale
		xmin := int(center - support + 0.5) // C's truncation toward zero
		if xmin < 0 {
			xmin = 0
		}
		xmax := int(center + support + 0.5)
		if xmax > inSize {
			xmax = inSize
		}
		xmax -= xmin
		var ww float64
		for x := 0; x < xmax; x++ {
			w[x] = f.kernel((float64(x+xmin) - center + 0.5) * ss)
			ww += w[x]
		}
		k := c.k[xx*ksize : (xx+1)*ksize]
		for x := 0; x < xmax; x++ {
			v := w[x]
			if ww != 0 {
				v /= ww
			}
			if v < 0 {
				k[x] = int32(-0.5 + v*(1<<precisionBits))
			} else {
				k[x] = int32(0.5 + v*(1<<precisionBits))
			}
		}
		c.bounds[2*xx], c.bounds[2*xx+1] = xmin, xmax
	}
	return c
}

// clip8 is PIL's clip8: drop the fractional bits and clamp to 0..255.
func clip8(v int32) uint8 {
	v >>= precisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// Resize resamples m to w x h with PIL's BILINEAR filter, as
// Image.resize((w, h), Image.BILINEAR) does on an RGB image: a horizontal
// pass over the rows the vertical pass needs, then a vertical pass, each
// rounded to 8 bits.
func (m *RGB) Resize(w, h int) *RGB { return m.ResizeWith(w, h, Bilinear) }

// ResizeWith is Resize with filter f (the zero Filter is Bilinear), as
// Image.resize((w, h), filter) does.
func (m *RGB) ResizeWith(w, h int, f Filter) *RGB {
	f = f.orBilinear()
	if w <= 0 || h <= 0 || m.W <= 0 || m.H <= 0 {
		return NewRGB(max(w, 0), max(h, 0))
	}
	needH := w != m.W
	needV := h != m.H
	if !needH && !needV {
		return &RGB{W: m.W, H: m.H, Pix: append([]uint8(nil), m.Pix...)}
	}
	vert := precompute(m.H, 0, float32(m.H), h, f)
	src := m
	if needH {
		// Only rows [first, last) feed the vertical pass.
		first := vert.bounds[0]
		last := vert.bounds[2*h-2] + vert.bounds[2*h-1]
		for i := 0; i < h; i++ {
			vert.bounds[2*i] -= first
		}
		horiz := precompute(m.W, 0, float32(m.W), w, f)
		tmp := NewRGB(w, last-first)
		resampleHorizontal(tmp, m, first, horiz)
		src = tmp
	}
	if !needV {
		return src
	}
	out := NewRGB(src.W, h)
	resampleVertical(out, src, vert)
	return out
}

func resampleHorizontal(dst, src *RGB, rowOffset int, c coeffs) {
	const half = 1 << (precisionBits - 1)
	for y := 0; y < dst.H; y++ {
		in := src.Pix[3*(y+rowOffset)*src.W : 3*(y+rowOffset+1)*src.W]
		out := dst.Pix[3*y*dst.W : 3*(y+1)*dst.W]
		for x := 0; x < dst.W; x++ {
			xmin, n := c.bounds[2*x], c.bounds[2*x+1]
			k := c.k[x*c.ksize : x*c.ksize+n]
			p := in[3*xmin : 3*(xmin+n)]
			s0, s1, s2 := int32(half), int32(half), int32(half)
			for i, kv := range k {
				s0 += int32(p[3*i]) * kv
				s1 += int32(p[3*i+1]) * kv
				s2 += int32(p[3*i+2]) * kv
			}
			out[3*x], out[3*x+1], out[3*x+2] = clip8(s0), clip8(s1), clip8(s2)
		}
	}
}

func resampleVertical(dst, src *RGB, c coeffs) {
	const half = 1 << (precisionBits - 1)
	row := 3 * src.W
	for y := 0; y < dst.H; y++ {
		ymin, n := c.bounds[2*y], c.bounds[2*y+1]
		k := c.k[y*c.ksize : y*c.ksize+n]
		out := dst.Pix[y*row : (y+1)*row]
		for x := range out {
			s := int32(half)
			for i, kv := range k {
				s += int32(src.Pix[(ymin+i)*row+x]) * kv
			}
			out[x] = clip8(s)
		}
	}
}

// FixedPointBits is the number of fractional bits of Taps' weights: a pass
// sums pixel*weight in int32 from 1<<(FixedPointBits-1), shifts right by
// FixedPointBits and clamps to 0..255.
const FixedPointBits = precisionBits

// Taps are one pass of a resize exactly as Resize computes it, for
// resamplers outside this package (the GPU image kernel) that must give
// the same bytes: output pixel i reads Bounds[2i+1] input pixels from
// Bounds[2i] with the weights K[i*KSize:].
type Taps struct {
	KSize  int
	Bounds []int
	K      []int32
}

// ResizeTaps returns the taps of resizing an axis of inSize pixels to
// outSize with f (the zero Filter is Bilinear).
func ResizeTaps(inSize, outSize int, f Filter) Taps {
	c := precompute(inSize, 0, float32(inSize), outSize, f.orBilinear())
	return Taps{KSize: c.ksize, Bounds: c.bounds, K: c.k}
}

// ResizeCrop is m.ResizeWith(w, h, f).CenterCrop(cw, ch), computing only the
// pixels the crop keeps: each output pixel of a pass depends on its own taps
// alone, so the bytes are the same, and ImageNet's eval transform (resize to
// 256, crop 224) resamples about 40% fewer pixels. A crop larger than the
// resized image (zero padding) takes the two-step path.
func (m *RGB) ResizeCrop(w, h int, f Filter, cw, ch int) *RGB {
	f = f.orBilinear()
	if cw > w || ch > h || w <= 0 || h <= 0 || m.W <= 0 || m.H <= 0 || cw <= 0 || ch <= 0 {
		return m.ResizeWith(w, h, f).CenterCrop(cw, ch)
	}
	top := int(math.RoundToEven(float64(h-ch) / 2))
	left := int(math.RoundToEven(float64(w-cw) / 2))
	needH, needV := w != m.W, h != m.H
	// Source rows [first, last) feed the kept output rows.
	first, last := top, top+ch
	var vert coeffs
	if needV {
		vert = precompute(m.H, 0, float32(m.H), h, f).window(top, ch)
		first = vert.bounds[0]
		last = vert.bounds[2*ch-2] + vert.bounds[2*ch-1]
		for i := 0; i < ch; i++ {
			vert.bounds[2*i] -= first
		}
	}
	tmp := NewRGB(cw, last-first)
	if needH {
		resampleHorizontal(tmp, m, first, precompute(m.W, 0, float32(m.W), w, f).window(left, cw))
	} else {
		for y := range tmp.H {
			copy(tmp.Pix[3*y*cw:3*(y+1)*cw], m.Pix[3*((y+first)*m.W+left):])
		}
	}
	if !needV {
		return tmp
	}
	out := NewRGB(cw, ch)
	resampleVertical(out, tmp, vert)
	return out
}

// window is the taps of outputs [from, from+n).
func (c coeffs) window(from, n int) coeffs {
	return coeffs{ksize: c.ksize, bounds: c.bounds[2*from : 2*(from+n)], k: c.k[from*c.ksize : (from+n)*c.ksize]}
}
