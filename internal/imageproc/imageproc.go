// Package imageproc turns image files into network inputs the way
// torchvision's ImageNet evaluation transform does on PIL images:
//
//	Resize(256)        shorter side to 256, PIL bilinear (antialiased)
//	CenterCrop(224)
//	ToTensor()         CHW, /255
//	Normalize(mean, std)
//
// The resampling is a port of PIL's fixed-point two-pass algorithm, so PNG
// inputs give the same bytes as PIL. JPEGs are decoded by internal/jpeg,
// whose inverse DCT rounds as libjpeg's integer transform does, and
// converted with libjpeg's chroma upsampling and color conversion, which
// PIL gets from libjpeg-turbo.
package imageproc

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"

	"goinfer/internal/jpeg"
)

// ImageNet statistics torchvision normalizes with.
var (
	Mean = [3]float32{0.485, 0.456, 0.406}
	Std  = [3]float32{0.229, 0.224, 0.225}
)

// MaxPixels bounds a decoded image (width x height), so that a small file
// claiming a huge size cannot make the decoder allocate gigabytes.
const MaxPixels = 100 << 20

// ErrTooManyPixels marks an image whose header declares more pixels than
// the decoder's limit: a decompression bomb, or a photo too large to serve.
var ErrTooManyPixels = errors.New("more pixels than allowed")

// maxFileBytes bounds how much of an input is read.
const maxFileBytes = 512 << 20

// RGB is an 8-bit RGB image: H rows of W pixels, each pixel R, G, B.
type RGB struct {
	W, H int
	Pix  []uint8 // len 3*W*H, row-major, interleaved (HWC)
}

// NewRGB returns a black image.
func NewRGB(w, h int) *RGB { return &RGB{W: w, H: h, Pix: make([]uint8, 3*w*h)} }

// Decode reads a PNG or JPEG image (told apart by content) into RGB, as
// PIL's Image.open(...).convert("RGB") does: alpha is dropped, gray is
// replicated, 16-bit samples keep their high byte.
func Decode(r io.Reader) (*RGB, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("image file is over %d MiB", maxFileBytes>>20)
	}
	return DecodeBytes(data, MaxPixels)
}

// DecodeBytes is Decode of an image in memory, refusing (by its header,
// before decoding) images of more than maxPixels pixels (width x height).
func DecodeBytes(data []byte, maxPixels int) (*RGB, error) {
	var (
		decode func(io.Reader) (image.Image, error)
		config func(io.Reader) (image.Config, error)
		format string
	)
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		decode, config, format = png.Decode, png.DecodeConfig, "PNG"
	case bytes.HasPrefix(data, []byte("\xff\xd8")):
		decode = func(io.Reader) (image.Image, error) { return jpeg.Decode(data, maxPixels) }
		config = func(io.Reader) (image.Config, error) {
			c, err := jpeg.DecodeConfig(data)
			return image.Config{Width: c.Width, Height: c.Height}, err
		}
		format = "JPEG"
	case len(data) == 0:
		return nil, errors.New("the image file is empty")
	default:
		return nil, errors.New("unsupported image format: want PNG or JPEG")
	}
	cfg, err := config(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("corrupt %s: %w", format, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || int64(cfg.Width)*int64(cfg.Height) > int64(maxPixels) {
		return nil, fmt.Errorf("%s is %dx%d pixels: %w (%d)", format, cfg.Width, cfg.Height, ErrTooManyPixels, maxPixels)
	}
	img, err := decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("corrupt %s: %w", format, err)
	}
	return FromImage(img), nil
}

// DecodeFile reads a PNG or JPEG file.
func DecodeFile(path string) (*RGB, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// FromImage converts any image to RGB. JPEG's YCbCr images are converted
// the way libjpeg does (see ycbcr.go).
func FromImage(img image.Image) *RGB {
	b := img.Bounds()
	out := NewRGB(b.Dx(), b.Dy())
	switch m := img.(type) {
	case *image.YCbCr:
		ycbcrToRGB(m, out)
	case *image.RGBA: // opaque for decoded files; PIL drops alpha
		for y := 0; y < out.H; y++ {
			src := m.Pix[(y)*m.Stride:]
			dst := out.Pix[3*y*out.W:]
			for x := 0; x < out.W; x++ {
				dst[3*x], dst[3*x+1], dst[3*x+2] = src[4*x], src[4*x+1], src[4*x+2]
			}
		}
	case *image.NRGBA:
		for y := 0; y < out.H; y++ {
			src := m.Pix[y*m.Stride:]
			dst := out.Pix[3*y*out.W:]
			for x := 0; x < out.W; x++ {
				dst[3*x], dst[3*x+1], dst[3*x+2] = src[4*x], src[4*x+1], src[4*x+2]
			}
		}
	case *image.Gray:
		for y := 0; y < out.H; y++ {
			src := m.Pix[y*m.Stride:]
			dst := out.Pix[3*y*out.W:]
			for x := 0; x < out.W; x++ {
				v := src[x]
				dst[3*x], dst[3*x+1], dst[3*x+2] = v, v, v
			}
		}
	default:
		// 16-bit, paletted, CMYK, ...: through color.NRGBA64, keeping the
		// high byte of each sample (non-premultiplied, i.e. alpha dropped).
		i := 0
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.NRGBA64Model.Convert(img.At(x, y)).(color.NRGBA64)
				out.Pix[i], out.Pix[i+1], out.Pix[i+2] = uint8(c.R>>8), uint8(c.G>>8), uint8(c.B>>8)
				i += 3
			}
		}
	}
	return out
}

// Transform is torchvision's Compose([Resize(Resize), CenterCrop(Crop)]).
type Transform struct {
	Resize int // the shorter side after resizing
	Crop   int // the square crop taken from the center
}

// ImageNetEval is the standard evaluation transform: Resize(256),
// CenterCrop(224).
var ImageNetEval = Transform{Resize: 256, Crop: 224}

// Apply resizes and crops m.
func (t Transform) Apply(m *RGB) *RGB {
	w, h := ResizedSize(m.W, m.H, t.Resize)
	return m.ResizeCrop(w, h, Bilinear, t.Crop, t.Crop)
}

// Preprocess applies ImageNetEval and returns the pixels in CHW order
// ([3, 224, 224]), the layout a uint8 network input takes.
func Preprocess(m *RGB) []uint8 { return ImageNetEval.Apply(m).CHW() }

// ResizedSize is torchvision's Resize(size) output for a w x h image: the
// shorter side becomes size and the longer int(size * long / short).
func ResizedSize(w, h, size int) (int, int) {
	if w <= h {
		return size, int(float64(size) * float64(h) / float64(w))
	}
	return int(float64(size) * float64(w) / float64(h)), size
}

// CenterCrop cuts a w x h window from the center, with torchvision's
// rounding (round half to even of the offsets) and, when the image is
// smaller than the window, its zero padding.
func (m *RGB) CenterCrop(w, h int) *RGB {
	if w > m.W || h > m.H {
		left, top := 0, 0
		if w > m.W {
			left = (w - m.W) / 2
		}
		if h > m.H {
			top = (h - m.H) / 2
		}
		pw, ph := max(w, m.W), max(h, m.H)
		padded := NewRGB(pw, ph)
		for y := 0; y < m.H; y++ {
			copy(padded.Pix[3*((y+top)*pw+left):], m.Pix[3*y*m.W:3*(y+1)*m.W])
		}
		m = padded
	}
	if w == m.W && h == m.H {
		return m
	}
	top := int(math.RoundToEven(float64(m.H-h) / 2))
	left := int(math.RoundToEven(float64(m.W-w) / 2))
	out := NewRGB(w, h)
	for y := 0; y < h; y++ {
		copy(out.Pix[3*y*w:3*(y+1)*w], m.Pix[3*((y+top)*m.W+left):])
	}
	return out
}

// CHW returns the pixels planar: all R, then all G, then all B.
func (m *RGB) CHW() []uint8 {
	n := m.W * m.H
	out := make([]uint8, 3*n)
	for i := 0; i < n; i++ {
		out[i], out[n+i], out[2*n+i] = m.Pix[3*i], m.Pix[3*i+1], m.Pix[3*i+2]
	}
	return out
}

// Normalize converts CHW pixels to the network's float input:
// (p/255 - mean[c]) / std[c], in float32 arithmetic as torchvision's
// ToTensor and Normalize compute it.
func Normalize(chw []uint8) []float32 {
	out := make([]float32, len(chw))
	NormalizeInto(out, chw)
	return out
}

// NormalizeInto is Normalize writing into dst (len(dst) >= len(chw)), for
// callers that reuse buffers. chw holds 3 planes of equal size.
func NormalizeInto(dst []float32, chw []uint8) {
	plane := len(chw) / 3
	for c := 0; c < 3; c++ {
		mean, std := Mean[c], Std[c]
		var lut [256]float32
		for i := range lut {
			lut[i] = (float32(i)/255 - mean) / std
		}
		for i, p := range chw[c*plane : (c+1)*plane] {
			dst[c*plane+i] = lut[p]
		}
	}
}
