package imagegpu

import (
	"strings"
	"testing"
)

func TestParseJPEGHeader(t *testing.T) {
	photos := readPhotos(t)
	for _, tc := range []struct {
		file        string
		w, h, comps int
		progressive bool
		hardware    bool
	}{
		{"astronaut.jpg", 512, 512, 3, false, true},
		{"coffee.jpg", 600, 400, 3, false, true},
		{"chelsea_444.jpg", 451, 300, 3, false, true},
		{"camera_gray.jpg", 512, 512, 1, false, true},
		{"rocket_progressive.jpg", 640, 427, 3, true, false},
		{"chelsea_cmyk.jpg", 451, 300, 4, false, false},
	} {
		h, err := parseJPEGHeader(photos[tc.file])
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		if h.width != tc.w || h.height != tc.h || h.components != tc.comps || h.progressive != tc.progressive || h.hardwareOK() != tc.hardware {
			t.Errorf("%s: got %dx%d, %d components, progressive %v, hardware %v; want %dx%d, %d, %v, %v",
				tc.file, h.width, h.height, h.components, h.progressive, h.hardwareOK(), tc.w, tc.h, tc.comps, tc.progressive, tc.hardware)
		}
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no SOI"},
		{"png", photos["coffee_alpha.png"], "no SOI"},
		{"soi only", []byte{0xff, 0xd8}, "no SOI"},
		{"segment past end", []byte{0xff, 0xd8, 0xff, 0xe0, 0x40, 0x00, 1, 2}, "runs past the end"},
		{"scan before frame", []byte{0xff, 0xd8, 0xff, 0xda, 0x00, 0x02}, "no JPEG frame header"},
		{"garbage after soi", []byte{0xff, 0xd8, 0x12, 0x34, 0x56, 0x78}, "expected a marker"},
		{"bomb header", bombJPEG(t, 16000, 16000), ""},
	} {
		h, err := parseJPEGHeader(tc.data)
		if tc.want == "" {
			if err != nil || h.width != 16000 || h.height != 16000 {
				t.Errorf("%s: %+v, %v", tc.name, h, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// FuzzParseJPEGHeader: any bytes give a header or an error, never a panic
// or a read past the end.
func FuzzParseJPEGHeader(f *testing.F) {
	for _, b := range readPhotos(f) {
		if len(b) > 700 {
			b = b[:700]
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseJPEGHeader(b)
		if err == nil && (h.components < 1 || h.components > 4) {
			t.Fatalf("accepted %d components", h.components)
		}
	})
}
