package imageproc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"

	"goinfer/internal/tensor"
)

const golden = "../../testdata/golden/"

// diff returns the largest and mean absolute difference of two byte slices.
func diff(a, b []uint8) (maxd int, mean float64) {
	sum := 0
	for i := range a {
		d := int(a[i]) - int(b[i])
		if d < 0 {
			d = -d
		}
		maxd = max(maxd, d)
		sum += d
	}
	return maxd, float64(sum) / float64(len(a))
}

// TestGoldenImages compares Resize(256)+CenterCrop(224) with what PIL and
// torchvision produced for the same files.
func TestGoldenImages(t *testing.T) {
	tests := []struct {
		file, ref string
		// PNG is lossless, so PIL's resampling is matched exactly; JPEG
		// differs by Go's IDCT rounding only, since the conversion has
		// libjpeg's chroma upsampling and color math (with Go's YCbCr
		// conversion too it was max 19, mean 2.04).
		maxDiff  int
		meanDiff float64
	}{
		{"image.png", "image_png_u8.npy", 0, 0},
		{"image.jpg", "image_jpg_u8.npy", 3, 0.051},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			m, err := DecodeFile(golden + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := tensor.LoadNPY(golden + tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			got := ImageNetEval.Apply(m)
			if got.W != 224 || got.H != 224 || ref.Shape.String() != "[224 224 3]" {
				t.Fatalf("got %dx%d, reference %v", got.W, got.H, ref.Shape)
			}
			maxd, mean := diff(got.Pix, ref.Data)
			t.Logf("%s: max |diff| %d, mean %.4f", tt.file, maxd, mean)
			if maxd > tt.maxDiff || mean > tt.meanDiff {
				t.Errorf("max |diff| %d, mean %.4f; want <= %d, <= %g", maxd, mean, tt.maxDiff, tt.meanDiff)
			}
			// The CHW path holds the same pixels, planar.
			chw := Preprocess(m)
			if chw[0] != got.Pix[0] || chw[224*224] != got.Pix[1] || chw[2*224*224+5] != got.Pix[3*5+2] {
				t.Error("Preprocess is not the CHW layout of Apply")
			}
		})
	}
}

func TestResizedSize(t *testing.T) {
	tests := []struct{ w, h, size, wantW, wantH int }{
		{320, 240, 256, 341, 256},
		{240, 320, 256, 256, 341},
		{500, 500, 256, 256, 256},
		{1000, 3, 256, 85333, 256},
		{333, 500, 256, 256, 384}, // int(256*500/333) = int(384.38)
		{4032, 3024, 256, 341, 256},
	}
	for _, tt := range tests {
		if w, h := ResizedSize(tt.w, tt.h, tt.size); w != tt.wantW || h != tt.wantH {
			t.Errorf("ResizedSize(%d, %d, %d) = %d, %d; want %d, %d", tt.w, tt.h, tt.size, w, h, tt.wantW, tt.wantH)
		}
	}
}

// row makes a 1-row image whose red channel is v (green, blue 0).
func row(v ...uint8) *RGB {
	m := NewRGB(len(v), 1)
	for i, x := range v {
		m.Pix[3*i] = x
	}
	return m
}

func reds(m *RGB) []uint8 {
	out := make([]uint8, m.W*m.H)
	for i := range out {
		out[i] = m.Pix[3*i]
	}
	return out
}

func TestResize(t *testing.T) {
	tests := []struct {
		name string
		in   *RGB
		w    int
		want []uint8
	}{
		// Halving stretches the triangle filter to support 2: the weights
		// of pixels 0,1,2 for the first output are 3/7, 3/7, 1/7.
		{"downscale antialiased", row(0, 100, 200, 255), 2, []uint8{71, 209}},
		{"upscale", row(0, 200), 4, []uint8{0, 50, 150, 200}},
		{"same size copies", row(1, 2, 3), 3, []uint8{1, 2, 3}},
		{"constant stays constant", row(77, 77, 77, 77, 77, 77, 77), 3, []uint8{77, 77, 77}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.Resize(tt.w, 1)
			if !bytes.Equal(reds(got), tt.want) {
				t.Errorf("got %v, want %v", reds(got), tt.want)
			}
		})
	}
	// Vertical and horizontal passes are the same filter.
	col := NewRGB(1, 4)
	for i, v := range []uint8{0, 100, 200, 255} {
		col.Pix[3*i] = v
	}
	if got := reds(col.Resize(1, 2)); !bytes.Equal(got, []uint8{71, 209}) {
		t.Errorf("vertical: got %v", got)
	}
	if got := col.Resize(0, 3); got.W != 0 || len(got.Pix) != 0 {
		t.Errorf("zero width: %dx%d", got.W, got.H)
	}
}

func TestCenterCrop(t *testing.T) {
	// Each pixel's red is its x, green its y.
	m := NewRGB(341, 256)
	for y := 0; y < m.H; y++ {
		for x := 0; x < m.W; x++ {
			m.Pix[3*(y*m.W+x)], m.Pix[3*(y*m.W+x)+1] = uint8(x), uint8(y)
		}
	}
	c := m.CenterCrop(224, 224)
	// torchvision: left = round((341-224)/2) = round(58.5) = 58 (half to
	// even), top = round(16) = 16.
	if c.Pix[0] != 58 || c.Pix[1] != 16 {
		t.Errorf("crop starts at x=%d y=%d, want 58, 16", c.Pix[0], c.Pix[1])
	}
	m = NewRGB(343, 256)
	for i := 0; i < m.W*m.H; i++ {
		m.Pix[3*i] = uint8(i % m.W)
	}
	if c := m.CenterCrop(224, 224); c.Pix[0] != 60 { // round(59.5) = 60
		t.Errorf("crop starts at x=%d, want 60", c.Pix[0])
	}
	// Smaller than the crop: zero padding, (224-100)//2 = 62 on the left.
	small := NewRGB(100, 300)
	for i := range small.Pix {
		small.Pix[i] = 9
	}
	c = small.CenterCrop(224, 224)
	if c.W != 224 || c.H != 224 {
		t.Fatalf("got %dx%d", c.W, c.H)
	}
	// top = round((300-224)/2) = 38 of the padded 224x300 image.
	at := func(x, y int) uint8 { return c.Pix[3*(y*224+x)] }
	if at(61, 0) != 0 || at(62, 0) != 9 || at(161, 223) != 9 || at(162, 223) != 0 {
		t.Errorf("padding misplaced: %d %d %d %d", at(61, 0), at(62, 0), at(161, 223), at(162, 223))
	}
}

func TestNormalize(t *testing.T) {
	chw := []uint8{0, 255, 128, 0, 255, 128}
	got := Normalize(chw)
	for i, p := range chw {
		c := i / 2
		want := (float32(p)/255 - Mean[c]) / Std[c]
		if got[i] != want {
			t.Errorf("element %d: %v, want %v", i, got[i], want)
		}
	}
	if math.Abs(float64(got[0])-(-0.485/0.229)) > 1e-6 {
		t.Errorf("0 in red normalizes to %v", got[0])
	}
}

func encodePNG(t *testing.T, img image.Image) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestDecodeColorModels(t *testing.T) {
	gray := image.NewGray(image.Rect(0, 0, 2, 1))
	gray.Pix = []uint8{10, 200}
	nrgba := image.NewNRGBA(image.Rect(0, 0, 1, 1))
	copy(nrgba.Pix, []uint8{100, 150, 200, 7}) // mostly transparent: PIL drops alpha
	g16 := image.NewRGBA64(image.Rect(0, 0, 1, 1))
	g16.SetRGBA64(0, 0, color.RGBA64{0x12ff, 0x3400, 0xabcd, 0xffff})
	pal := image.NewPaletted(image.Rect(0, 0, 2, 1), color.Palette{color.RGBA{1, 2, 3, 255}, color.RGBA{250, 251, 252, 255}})
	pal.Pix = []uint8{1, 0}
	tests := []struct {
		name string
		img  image.Image
		want []uint8
	}{
		{"gray", gray, []uint8{10, 10, 10, 200, 200, 200}},
		{"rgba dropped alpha", nrgba, []uint8{100, 150, 200}},
		{"16 bit", g16, []uint8{0x12, 0x34, 0xab}},
		{"paletted", pal, []uint8{250, 251, 252, 1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode(bytes.NewReader(encodePNG(t, tt.img)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m.Pix, tt.want) {
				t.Errorf("got %v, want %v", m.Pix, tt.want)
			}
		})
	}
}

func TestDecodeJPEGShapes(t *testing.T) {
	// Odd sizes exercise the chroma edges; a flat color must come back
	// flat and equal to what Go's own conversion gives (within rounding).
	r := rand.New(rand.NewPCG(1, 2))
	for _, sz := range [][2]int{{1, 1}, {3, 5}, {17, 9}, {64, 33}} {
		for _, flat := range []bool{true, false} {
			img := image.NewRGBA(image.Rect(0, 0, sz[0], sz[1]))
			for i := range img.Pix {
				if flat {
					img.Pix[i] = []uint8{200, 120, 40, 255}[i%4]
				} else {
					img.Pix[i] = uint8(r.IntN(256))
				}
			}
			var b bytes.Buffer
			if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
				t.Fatal(err)
			}
			m, err := Decode(bytes.NewReader(b.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			if m.W != sz[0] || m.H != sz[1] {
				t.Fatalf("%v: decoded %dx%d", sz, m.W, m.H)
			}
			if !flat {
				continue
			}
			goImg, _ := jpeg.Decode(bytes.NewReader(b.Bytes()))
			for i := 0; i < m.W*m.H; i++ {
				c := color.RGBAModel.Convert(goImg.At(i%m.W, i/m.W)).(color.RGBA)
				want := []uint8{c.R, c.G, c.B}
				for k := range 3 {
					if d := int(m.Pix[3*i+k]) - int(want[k]); d > 1 || d < -1 {
						t.Fatalf("%v pixel %d: %v, Go's decoder %v", sz, i, m.Pix[3*i:3*i+3], want)
					}
				}
			}
		}
	}
}

// pngHeaderOnly is a PNG signature and IHDR claiming w x h, with a valid
// CRC, and nothing else.
func pngHeaderOnly(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, 8, 2, 0, 0, 0)
	binary.Write(&b, binary.BigEndian, uint32(len(ihdr)))
	chunk := append([]byte("IHDR"), ihdr...)
	b.Write(chunk)
	binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	return b.Bytes()
}

func TestDecodeErrors(t *testing.T) {
	good, err := os.ReadFile(golden + "image.png")
	if err != nil {
		t.Fatal(err)
	}
	jpg, err := os.ReadFile(golden + "image.jpg")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "empty"},
		{"text", []byte("hello"), "unsupported image format"},
		{"gif", []byte("GIF89a\x01\x00\x01\x00"), "unsupported image format"},
		{"truncated png", good[:len(good)/2], "corrupt PNG"},
		{"truncated jpeg", jpg[:len(jpg)/3], "corrupt JPEG"},
		{"bad jpeg", []byte("\xff\xd8\xff\xe0garbage"), "corrupt JPEG"},
		{"huge png", pngHeaderOnly(200000, 200000), "more pixels than allowed"},
		{"header only png", pngHeaderOnly(4, 4), "corrupt PNG"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(bytes.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := DecodeFile(golden + "missing.png"); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

func BenchmarkPreprocess(b *testing.B) {
	m, err := DecodeFile(golden + "image.jpg")
	if err != nil {
		b.Fatal(err)
	}
	big := m.Resize(1600, 1200)
	b.ResetTimer()
	for range b.N {
		Normalize(Preprocess(big))
	}
}

// bombJPEG is a valid 8x8 grayscale JPEG whose frame header claims w x h
// pixels.
func bombJPEG(t *testing.T, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, image.NewGray(image.Rect(0, 0, 8, 8)), nil); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	for i := 0; i+9 < len(b); i++ {
		if b[i] == 0xff && b[i+1] == 0xc0 {
			binary.BigEndian.PutUint16(b[i+5:], uint16(h))
			binary.BigEndian.PutUint16(b[i+7:], uint16(w))
			return b
		}
	}
	t.Fatal("no SOF0 marker")
	return nil
}

// TestBombRefusedBeforeAllocation: a 16,000 x 16,000 JPEG header (256 Mi
// pixels, 768 MiB of RGB) is refused by the pixel limit, read from the
// header, having allocated almost nothing.
func TestBombRefusedBeforeAllocation(t *testing.T) {
	bomb := bombJPEG(t, 16000, 16000)
	var err error
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	n := allocated(func() { _, err = DecodeBytes(bomb, 40<<20) })
	if !errors.Is(err, ErrTooManyPixels) || !strings.Contains(err.Error(), "16000x16000") {
		t.Fatalf("error %v, want ErrTooManyPixels naming the size", err)
	}
	if n > 1<<20 {
		t.Errorf("refusing the bomb allocated %d bytes", n)
	}
	t.Logf("refused having allocated %d bytes", n)
}

// TestResizeCropMatchesTwoSteps checks that resizing only the kept window
// gives the bytes of a full resize followed by the centre crop.
func TestResizeCropMatchesTwoSteps(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name         string
		srcW, srcH   int
		w, h, cw, ch int
	}{
		{"imagenet landscape", 500, 375, 341, 256, 224, 224},
		{"imagenet portrait", 375, 500, 256, 341, 224, 224},
		{"odd window", 97, 61, 50, 37, 21, 13},
		{"upscale", 20, 15, 64, 48, 33, 31},
		{"width kept", 80, 60, 80, 40, 51, 17},
		{"height kept", 80, 60, 30, 60, 11, 59},
		{"no resize", 40, 30, 40, 30, 20, 10},
		{"crop is the image", 90, 70, 45, 35, 45, 35},
		{"crop larger: padded", 40, 30, 20, 15, 24, 16},
		{"one pixel", 7, 5, 3, 3, 1, 1},
	} {
		m := NewRGB(tc.srcW, tc.srcH)
		for i := range m.Pix {
			m.Pix[i] = uint8(r.IntN(256))
		}
		for _, f := range []Filter{Bilinear, Bicubic} {
			want := m.ResizeWith(tc.w, tc.h, f).CenterCrop(tc.cw, tc.ch)
			got := m.ResizeCrop(tc.w, tc.h, f, tc.cw, tc.ch)
			if got.W != want.W || got.H != want.H || !bytes.Equal(got.Pix, want.Pix) {
				t.Errorf("%s, %s: ResizeCrop differs from ResizeWith + CenterCrop (%dx%d vs %dx%d)", tc.name, f, got.W, got.H, want.W, want.H)
			}
		}
	}
}
