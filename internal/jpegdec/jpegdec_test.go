package jpegdec

import (
	"bytes"
	"image"
	"image/jpeg"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestIDCTAgainstFloat: the integer IDCT is within one level of the exact
// float64 inverse DCT (libjpeg's islow is accurate to the spec's bounds),
// a DC-only block is flat, and outputs are range-limited.
func TestIDCTAgainstFloat(t *testing.T) {
	tests := []struct {
		name string
		set  map[int]int32
	}{
		{"dc only", map[int]int32{0: 80}},
		{"dc and low frequencies", map[int]int32{0: -200, 1: 31, 8: -17, 9: 5}},
		{"high frequencies", map[int]int32{0: 10, 7: 40, 56: -40, 63: 25, 27: -13}},
		{"saturating", map[int]int32{0: 2000}},
		{"saturating low", map[int]int32{0: -2000, 1: 50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b block
			for i, v := range tt.set {
				b[i] = v
			}
			want := floatIDCT(&b)
			dst := make([]byte, 64)
			idctInto(&b, dst, 8)
			for i, w := range want {
				if d := math.Abs(float64(dst[i]) - w); d > 1 {
					t.Fatalf("sample %d: %d, exact %.2f", i, dst[i], w)
				}
			}
		})
	}
}

// floatIDCT is T.81's inverse DCT, level-shifted and clamped.
func floatIDCT(b *block) [64]float64 {
	var out [64]float64
	for y := range 8 {
		for x := range 8 {
			s := 0.0
			for v := range 8 {
				for u := range 8 {
					cu, cv := 1.0, 1.0
					if u == 0 {
						cu = 1 / math.Sqrt2
					}
					if v == 0 {
						cv = 1 / math.Sqrt2
					}
					s += cu * cv * float64(b[8*v+u]) *
						math.Cos(float64(2*x+1)*float64(u)*math.Pi/16) * math.Cos(float64(2*y+1)*float64(v)*math.Pi/16)
				}
			}
			out[8*y+x] = math.Min(255, math.Max(0, math.Round(s/4)+128))
		}
	}
	return out
}

// TestDecodeLikeImageJPEG: the photos decode to the same kind of image,
// of the same size, as with image/jpeg, and the samples differ by no more
// than IDCT rounding.
func TestDecodeLikeImageJPEG(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/photos/*.jpg")
	if len(files) == 0 {
		t.Fatal("no photos")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			want, err := jpeg.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if got.Bounds() != want.Bounds() || got.ColorModel() != want.ColorModel() {
				t.Fatalf("%T %v, image/jpeg %T %v", got, got.Bounds(), want, want.Bounds())
			}
			cfg, err := DecodeConfig(bytes.NewReader(data))
			if err != nil || cfg.Width != got.Bounds().Dx() || cfg.Height != got.Bounds().Dy() {
				t.Fatalf("DecodeConfig %+v, %v", cfg, err)
			}
			maxd := 0
			b := got.Bounds()
			for y := b.Min.Y; y < b.Max.Y; y += 3 {
				for x := b.Min.X; x < b.Max.X; x += 3 {
					r1, g1, b1, _ := got.At(x, y).RGBA()
					r2, g2, b2, _ := want.At(x, y).RGBA()
					for _, d := range []int{int(r1>>8) - int(r2>>8), int(g1>>8) - int(g2>>8), int(b1>>8) - int(b2>>8)} {
						maxd = max(maxd, abs(d))
					}
				}
			}
			if maxd > 4 {
				t.Errorf("samples differ from image/jpeg's by up to %d levels", maxd)
			}
			if _, ok := got.(*image.YCbCr); !ok && filepath.Base(f) != "camera_gray.jpg" && filepath.Base(f) != "chelsea_cmyk.jpg" {
				t.Errorf("%T, want *image.YCbCr", got)
			}
		})
	}
	for _, bad := range [][]byte{nil, []byte("\xff\xd8"), []byte("GIF89a")} {
		if _, err := Decode(bytes.NewReader(bad)); err == nil {
			t.Errorf("Decode(%q) succeeded", bad)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// BenchmarkDecode compares jpegdec with image/jpeg on a photograph.
func BenchmarkDecode(b *testing.B) {
	data, err := os.ReadFile("../../testdata/photos/astronaut.jpg")
	if err != nil {
		b.Fatal(err)
	}
	for name, decode := range map[string]func(r *bytes.Reader) (image.Image, error){
		"jpegdec":    func(r *bytes.Reader) (image.Image, error) { return Decode(r) },
		"image-jpeg": func(r *bytes.Reader) (image.Image, error) { return jpeg.Decode(r) },
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := decode(bytes.NewReader(data)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
