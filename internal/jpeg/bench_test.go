package jpeg_test

import (
	"bytes"
	"image"
	"image/draw"
	stdjpeg "image/jpeg"
	"testing"

	"goinfer/internal/jpeg"
)

// benchJPEG is a 500x375 quality-90 4:2:0 baseline JPEG (the size of the
// issue's benchmark images), cut from a committed photo and encoded by
// image/jpeg, so nothing large is committed.
func benchJPEG(b *testing.B) []byte {
	src, err := stdjpeg.Decode(bytes.NewReader(fixtureFile(b, "../../testdata/photos/astronaut.jpg")))
	if err != nil {
		b.Fatal(err)
	}
	m := image.NewRGBA(image.Rect(0, 0, 500, 375))
	draw.Draw(m, m.Bounds(), src, image.Point{6, 60}, draw.Src)
	var buf bytes.Buffer
	if err := stdjpeg.Encode(&buf, m, &stdjpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkDecode compares this decoder with image/jpeg on the same file;
// run the two alternately (-count) on a busy machine.
func BenchmarkDecode(b *testing.B) {
	data := benchJPEG(b)
	progressive := fixtureFile(b, "../../testdata/photos/rocket_progressive.jpg")
	for _, tc := range []struct {
		name string
		data []byte
	}{{"500x375q90", data}, {"progressive", progressive}} {
		b.Run(tc.name+"/goinfer", func(b *testing.B) {
			b.SetBytes(int64(len(tc.data)))
			for b.Loop() {
				if _, err := jpeg.Decode(tc.data, 1<<30); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/imagejpeg", func(b *testing.B) {
			b.SetBytes(int64(len(tc.data)))
			for b.Loop() {
				if _, err := stdjpeg.Decode(bytes.NewReader(tc.data)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
