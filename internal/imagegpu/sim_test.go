package imagegpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"testing"

	"goinfer/internal/imageproc"
	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
)

// The simulations below run images.cu's ycc_to_rgb and preprocess kernels
// on the CPU, statement for statement, over the descriptors and taps
// batchMeta lays out, with scratch at address 0 and the meta buffer at
// simMeta. They check the layout and the kernels' arithmetic against the
// CPU path without a GPU; the GPU tests check the kernels themselves.

const simMeta = 1 << 40

// simMemory resolves a device address of the simulation.
type simMemory struct{ scratch, meta []byte }

func (m simMemory) at(addr uint64) []byte {
	if addr >= simMeta {
		return m.meta[addr-simMeta:]
	}
	return m.scratch[addr:]
}

func i32(b []byte, i int) int { return int(int32(binary.LittleEndian.Uint32(b[4*i:]))) }

func simClip8(v int32) int32 {
	v >>= imageproc.FixedPointBits
	return min(max(v, 0), 255)
}

// simPreprocess is the preprocess kernel for n images into float32.
func simPreprocess(mem simMemory, n, cropW, cropH int, lut []float32) []float32 {
	le := binary.LittleEndian
	plane := cropW * cropH
	out := make([]float32, n*3*plane)
	const half = 1 << (imageproc.FixedPointBits - 1)
	for img := 0; img < n; img++ {
		d := mem.meta[img*descSize:]
		base, planeStride := le.Uint64(d[0:]), int(le.Uint64(d[8:]))
		xtab, ytab := mem.at(le.Uint64(d[16:])), mem.at(le.Uint64(d[24:]))
		pitch, xs, ys, valid := i32(d, 8), i32(d, 9), i32(d, 10), i32(d, 11)
		for p := 0; p < plane; p++ {
			o := out[img*3*plane+p:]
			if valid == 0 {
				for c := 0; c < 3; c++ {
					o[c*plane] = lut[c*256]
				}
				continue
			}
			ox, oy := p%cropW, p/cropW
			tx, ty := xtab[4*ox*xs:], ytab[4*oy*ys:]
			x0, nx, y0, ny := i32(tx, 0), i32(tx, 1), i32(ty, 0), i32(ty, 1)
			for c := 0; c < 3; c++ {
				src := mem.at(base + uint64(c*planeStride+y0*pitch+x0))
				acc := int32(half)
				for j := 0; j < ny; j++ {
					row := src[j*pitch:]
					h := int32(half)
					for i := 0; i < nx; i++ {
						h += int32(row[i]) * int32(i32(tx, 2+i))
					}
					acc += simClip8(h) * int32(i32(ty, 2+j))
				}
				o[c*plane] = lut[c*256+int(simClip8(acc))]
			}
		}
	}
	return out
}

// simChroma is the kernel's chroma().
func simChroma(p []byte, pitch, x, y, cw, ch, mode int) int {
	if mode == ycc444 {
		return int(p[y*pitch+x])
	}
	i := x >> 1
	if mode == ycc422 {
		r := p[y*pitch:]
		if x&1 == 1 {
			return (3*int(r[i]) + int(r[min(i+1, cw-1)]) + 2) >> 2
		}
		return (3*int(r[i]) + int(r[max(i-1, 0)]) + 1) >> 2
	}
	cy := y >> 1
	fy := cy - 1
	if y&1 == 1 {
		fy = cy + 1
	}
	fy = min(max(fy, 0), ch-1)
	nr, fr := p[cy*pitch:], p[fy*pitch:]
	c := 3*int(nr[i]) + int(fr[i])
	if cw == 1 {
		return (4*c + 8) >> 4
	}
	if x&1 == 1 {
		j := min(i+1, cw-1)
		return (3*c + 3*int(nr[j]) + int(fr[j]) + 7) >> 4
	}
	j := max(i-1, 0)
	return (3*c + 3*int(nr[j]) + int(fr[j]) + 8) >> 4
}

// simYCC is the ycc_to_rgb kernel over the n YccDescs at meta[at:].
func simYCC(mem simMemory, at, n int) {
	le := binary.LittleEndian
	clamp := func(v int) byte { return byte(min(max(v, 0), 255)) }
	for k := 0; k < n; k++ {
		d := mem.meta[at+k*yccDescSize:]
		yp, cb, cr, rgb := mem.at(le.Uint64(d[0:])), mem.at(le.Uint64(d[8:])), mem.at(le.Uint64(d[16:])), mem.at(le.Uint64(d[24:]))
		ps := int(le.Uint64(d[32:]))
		ypitch, cpitch, pitch, w, h, cw, ch, mode := i32(d, 10), i32(d, 11), i32(d, 12), i32(d, 13), i32(d, 14), i32(d, 15), i32(d, 16), i32(d, 17)
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				Y := int(yp[y*ypitch+x])
				b := simChroma(cb, cpitch, x, y, cw, ch, mode) - 128
				r := simChroma(cr, cpitch, x, y, cw, ch, mode) - 128
				o := y*pitch + x
				rgb[o] = clamp(Y + ((91881*r + 32768) >> 16))
				rgb[o+ps] = clamp(Y + ((-22554*b + 32768 - 46802*r) >> 16))
				rgb[o+2*ps] = clamp(Y + ((116130*b + 32768) >> 16))
			}
		}
	}
}

// noise is a w x h image of smooth gradients, edges and noise, so that
// every tap and rounding matters.
func noise(w, h int, seed uint64) *imageproc.RGB {
	r := rand.New(rand.NewPCG(seed, 7))
	m := imageproc.NewRGB(w, h)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			for c := 0; c < 3; c++ {
				v := (x*(c+1)*255/max(w, 1) + y*255/max(h, 1)) / 2
				if (x/7+y/5)%3 == c {
					v = 255 - v
				}
				v += r.IntN(41) - 20
				m.Pix[3*(y*w+x)+c] = uint8(min(max(v, 0), 255))
			}
		}
	}
	return m
}

func encodePNG(t testing.TB, m *imageproc.RGB) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, m.W, m.H))
	for i := 0; i < m.W*m.H; i++ {
		copy(img.Pix[4*i:], m.Pix[3*i:3*i+3])
		img.Pix[4*i+3] = 255
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// resizeCases are image sizes and transforms: downscales of every
// aspect, identity and upscales, a large downscale (wide filters), crops
// larger than the resized image (torchvision's zero padding), bicubic.
var resizeCases = []struct {
	w, h int
	spec Spec
}{
	{500, 375, ImageNet},
	{375, 500, ImageNet},
	{256, 256, ImageNet},
	{224, 224, ImageNet},
	{100, 80, ImageNet},
	{700, 389, ImageNet},
	{130, 520, ImageNet},
	{5, 3, ImageNet},
	{451, 300, Spec{Resize: 200, CropW: 224, CropH: 231, Mean: imageproc.Mean, Std: imageproc.Std}},
	{350, 233, Spec{Resize: 232, CropW: 224, CropH: 224, Mean: [3]float32{0.5, 0.5, 0.5}, Std: [3]float32{0.5, 0.5, 0.5}, Bicubic: true}},
	{300, 301, Spec{Resize: 256, CropW: 240, CropH: 200, Mean: imageproc.Mean, Std: imageproc.Std, Bicubic: true}},
}

// small is spec at a quarter of its resize and crop (at least 1), so that
// the simulations, which run with -race in CI, stay fast while taking the
// same paths (down- and upscales, padding, both filters).
func small(spec Spec) Spec {
	spec.Resize, spec.CropW, spec.CropH = max(spec.Resize/4, 1), max(spec.CropW/4, 1), max(spec.CropH/4, 1)
	return spec
}

// cpuPath is the CPU preprocessing of images under spec, float32.
func cpuPath(t testing.TB, spec Spec, images [][]byte) []float32 {
	t.Helper()
	return tensor.BytesF32(cpuPathBytes(t, spec, images, tensor.Float32))
}

// cpuPathBytes is the CPU preprocessing of images under spec, in dt.
func cpuPathBytes(t testing.TB, spec Spec, images [][]byte, dt tensor.DType) []byte {
	t.Helper()
	ps := preprocess.ImageNet(spec.CropH, spec.CropW)
	ps.Resize, ps.Mean, ps.Std = spec.Resize, spec.Mean, spec.Std
	if spec.Bicubic {
		ps.Interpolation = preprocess.Bicubic
	}
	cpu, err := preprocess.NewCPU(ps, preprocess.CPUOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(images)*3*spec.CropW*spec.CropH*dt.Size())
	for i, err := range cpu.Preprocess(context.Background(), images, dt, out) {
		if err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
	}
	return out
}

func lutF32(spec Spec) []float32 {
	b, _ := normLUTs(spec.Mean, spec.Std)
	return tensor.BytesF32(b)
}

// firstDiff describes the first element where got and want differ.
func firstDiff(got, want []float32) string {
	n := 0
	first := -1
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			n++
			if first < 0 {
				first = i
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d values differ, the first at %d: %v, want %v", n, len(want), first, got[first], want[first])
}

// TestSimulatedResizeMatchesCPU runs the preprocess kernel's arithmetic
// over batchMeta's tables for images of every case, one batch per spec,
// and wants the CPU path's float32 input bit for bit.
func TestSimulatedResizeMatchesCPU(t *testing.T) {
	for ci, tc := range resizeCases {
		tc.spec = small(tc.spec)
		tc.w, tc.h = max(tc.w/2, 1), max(tc.h/2, 1)
		t.Run(fmt.Sprintf("%dx%d/%d", tc.w, tc.h, ci), func(t *testing.T) {
			m := noise(tc.w, tc.h, uint64(ci))
			p := &Preprocessor{opts: Options{Spec: tc.spec}, taps: tapCache{filter: tc.spec.filter()}}
			// A failed image beside it: its slot is the normalised zero.
			pl := plan{route: routeCPU, w: m.W, h: m.H, pitch: (m.W + 3) &^ 3, ycc: yccNone}
			scratch := make([]byte, 3*pl.pitch*pl.h)
			toPlanes(scratch, m, pl.pitch)
			meta, nycc := p.batchMeta(nil, []plan{pl, {route: routeFailed, ycc: yccNone}}, 0, simMeta)
			if nycc != 0 {
				t.Fatalf("%d YCbCr descriptors for RGB images", nycc)
			}
			got := simPreprocess(simMemory{scratch, meta}, 2, tc.spec.CropW, tc.spec.CropH, lutF32(tc.spec))
			want := cpuPath(t, tc.spec, [][]byte{encodePNG(t, m)})
			per := 3 * tc.spec.CropW * tc.spec.CropH
			if d := firstDiff(got[:per], want); d != "" {
				t.Error(d)
			}
			lut := lutF32(tc.spec)
			for c := 0; c < 3; c++ {
				for _, v := range got[per+c*per/3 : per+(c+1)*per/3] {
					if v != lut[c*256] {
						t.Fatalf("failed image: channel %d holds %v, want %v", c, v, lut[c*256])
					}
				}
			}
		})
	}
}

// yccImage is a random YCbCr image of the given subsampling, as Go's JPEG
// decoder returns them.
func yccImage(w, h int, ratio image.YCbCrSubsampleRatio, seed uint64) *image.YCbCr {
	r := rand.New(rand.NewPCG(seed, 11))
	m := image.NewYCbCr(image.Rect(0, 0, w, h), ratio)
	for i := range m.Y {
		m.Y[i] = uint8(r.IntN(256))
	}
	for i := range m.Cb {
		// Saturated chroma too, so that the conversion clamps.
		m.Cb[i], m.Cr[i] = uint8(r.IntN(256)), uint8(r.IntN(256))
	}
	return m
}

// yccCases are subsamplings and sizes, odd ones and one- and two-pixel
// edges included.
var yccCases = []struct {
	w, h  int
	ratio image.YCbCrSubsampleRatio
	mode  int
}{
	{500, 375, image.YCbCrSubsampleRatio420, ycc420},
	{451, 300, image.YCbCrSubsampleRatio444, ycc444},
	{375, 501, image.YCbCrSubsampleRatio422, ycc422},
	{1, 1, image.YCbCrSubsampleRatio420, ycc420},
	{2, 3, image.YCbCrSubsampleRatio420, ycc420},
	{3, 2, image.YCbCrSubsampleRatio422, ycc422},
	{1, 5, image.YCbCrSubsampleRatio422, ycc422},
	{17, 9, image.YCbCrSubsampleRatio420, ycc420},
}

// yccPlan lays m out in scratch as nvJPEG's planar YCbCr output would be,
// after the RGB planes it converts into.
func yccPlan(m *image.YCbCr, mode int, at int64) (plan, []byte) {
	w, h := m.Rect.Dx(), m.Rect.Dy()
	pl := plan{route: routeGPU, w: w, h: h, pitch: (w + 3) &^ 3, ycc: mode, off: at}
	pl.cw, pl.ch = chromaSize(w, h, mode)
	pl.cpitch = (pl.cw + 3) &^ 3
	pl.yoff = at + int64(3*pl.pitch*h)
	buf := make([]byte, 3*pl.pitch*h+pl.pitch*h+2*pl.cpitch*pl.ch)
	ys := buf[3*pl.pitch*h:]
	for y := 0; y < h; y++ {
		copy(ys[y*pl.pitch:], m.Y[y*m.YStride:y*m.YStride+w])
	}
	cb := ys[pl.pitch*h:]
	cr := cb[pl.cpitch*pl.ch:]
	for y := 0; y < pl.ch; y++ {
		copy(cb[y*pl.cpitch:], m.Cb[y*m.CStride:y*m.CStride+pl.cw])
		copy(cr[y*pl.cpitch:], m.Cr[y*m.CStride:y*m.CStride+pl.cw])
	}
	return pl, buf
}

// TestSimulatedYCbCrMatchesImageproc converts YCbCr images of every
// subsampling with the ycc_to_rgb kernel's arithmetic and wants
// imageproc's libjpeg conversion byte for byte.
func TestSimulatedYCbCrMatchesImageproc(t *testing.T) {
	for ci, tc := range yccCases {
		m := yccImage(tc.w, tc.h, tc.ratio, uint64(ci))
		if got := imageproc.FromImage(m); got.W != tc.w {
			t.Fatal("FromImage changed the size")
		}
		pl, scratch := yccPlan(m, tc.mode, 0)
		p := &Preprocessor{opts: Options{Spec: ImageNet}, taps: tapCache{filter: imageproc.Bilinear}}
		meta, nycc := p.batchMeta(nil, []plan{pl}, 0, simMeta)
		if nycc != 1 {
			t.Fatalf("%d YCbCr descriptors, want 1", nycc)
		}
		simYCC(simMemory{scratch, meta}, descSize, 1)
		want := imageproc.FromImage(m)
		bad := 0
		for y := 0; y < tc.h; y++ {
			for x := 0; x < tc.w; x++ {
				for c := 0; c < 3; c++ {
					g, w := scratch[c*pl.pitch*tc.h+y*pl.pitch+x], want.Pix[3*(y*tc.w+x)+c]
					if g != w {
						if bad < 3 {
							t.Errorf("%dx%d %v: pixel (%d,%d) channel %d: %d, want %d", tc.w, tc.h, tc.ratio, x, y, c, g, w)
						}
						bad++
					}
				}
			}
		}
		if bad > 0 {
			t.Errorf("%dx%d %v: %d values differ", tc.w, tc.h, tc.ratio, bad)
		}
	}
}

func TestCropOffset(t *testing.T) {
	for _, tc := range []struct{ size, crop, want int }{
		{256, 224, 16}, {341, 224, 58}, {342, 224, 59}, {225, 224, 0}, {227, 224, 2},
		{224, 224, 0}, {223, 224, 0}, {221, 224, -1}, {200, 224, -12}, {199, 224, -12},
	} {
		if got := cropOffset(tc.size, tc.crop); got != tc.want {
			t.Errorf("cropOffset(%d, %d) = %d, want %d", tc.size, tc.crop, got, tc.want)
		}
	}
}
