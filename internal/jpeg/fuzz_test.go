package jpeg_test

import (
	"bytes"
	"errors"
	"image"
	stdjpeg "image/jpeg"
	"os"
	"path/filepath"
	"testing"

	"goinfer/internal/jpeg"
)

// fuzzMaxPixels keeps each execution small: a mutated header can claim
// any size up to this.
const fuzzMaxPixels = 1 << 16

// FuzzDecode checks that no input panics, and that every baseline file
// image/jpeg (used here only as an oracle) decodes is decoded too, with
// the same size. The one exception is a Huffman table with more codes
// than their lengths hold: image/jpeg decodes those by letting the codes
// wrap around in its lookup table, where libjpeg and this decoder refuse
// the file.
func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob("../../testdata/jpeg/*.jpg")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := jpeg.Decode(data, fuzzMaxPixels)
		if err == nil {
			if b := m.Bounds(); b.Dx()*b.Dy() > fuzzMaxPixels {
				t.Fatalf("decoded %v past the pixel limit", b)
			}
		}
		cfg, cerr := jpeg.DecodeConfig(data)
		if cerr != nil || cfg.Progressive || cfg.Width*cfg.Height > fuzzMaxPixels {
			return
		}
		ref, rerr := stdjpeg.Decode(bytes.NewReader(data))
		if rerr != nil {
			return
		}
		if errors.Is(err, jpeg.ErrHuffmanTable) {
			return
		}
		if err != nil {
			t.Fatalf("image/jpeg decodes this baseline file (%v), we refuse it: %v", ref.Bounds(), err)
		}
		if m.Bounds() != ref.Bounds() {
			t.Fatalf("bounds %v, image/jpeg %v", m.Bounds(), ref.Bounds())
		}
		if len(cfgKinds(m)) == 0 {
			t.Fatalf("unexpected image type %T", m)
		}
	})
}

func cfgKinds(m image.Image) string {
	switch m.(type) {
	case *image.Gray:
		return "gray"
	case *image.YCbCr:
		return "ycbcr"
	case *image.RGBA:
		return "rgb"
	case *image.CMYK:
		return "cmyk"
	}
	return ""
}
