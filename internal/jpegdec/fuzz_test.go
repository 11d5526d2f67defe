package jpegdec

import (
	"bytes"
	"image"
	"image/jpeg"
	"os"
	"testing"
)

// FuzzDecode: jpegdec accepts and refuses what image/jpeg does (only the
// IDCT differs), never panics, and decodes to the same kind and size of
// image.
func FuzzDecode(f *testing.F) {
	for _, p := range []string{"../../testdata/golden/image.jpg", "../../testdata/photos/rocket_progressive.jpg"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	var small bytes.Buffer
	jpeg.Encode(&small, image.NewRGBA(image.Rect(0, 0, 9, 7)), &jpeg.Options{Quality: 50})
	f.Add(small.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := DecodeConfig(bytes.NewReader(data))
		if err != nil || cfg.Width*cfg.Height > 1<<16 {
			return
		}
		got, gerr := Decode(bytes.NewReader(data))
		want, werr := jpeg.Decode(bytes.NewReader(data))
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("jpegdec: %v; image/jpeg: %v", gerr, werr)
		}
		if gerr == nil && (got.Bounds() != want.Bounds() || got.ColorModel() != want.ColorModel()) {
			t.Fatalf("jpegdec %T %v, image/jpeg %T %v", got, got.Bounds(), want, want.Bounds())
		}
	})
}
