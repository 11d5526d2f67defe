package preprocess

import (
	"math"
	"strings"
	"testing"
)

func TestSpecImageNet(t *testing.T) {
	s := ImageNet(224, 224)
	if s.Resize != 256 || s.Filter() != Bilinear {
		t.Errorf("ImageNet(224, 224) = %+v", s)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	scale, shift := s.ScaleShift()
	for c := range scale {
		// 0..255 pixels through the affine map equal (p/255 - mean)/std.
		for _, p := range []float64{0, 128, 255} {
			got := p*float64(scale[c]) + float64(shift[c])
			want := (p/255 - float64(s.Mean[c])) / float64(s.Std[c])
			if math.Abs(got-want) > 1e-5 {
				t.Errorf("channel %d pixel %v: %v, want %v", c, p, got, want)
			}
		}
	}
	if w := s.WithSize(448, 448); w.Height != 448 || w.Resize != 512 {
		t.Errorf("WithSize(448) of ImageNet's: %+v, want resize 512", w)
	}
	if w := (Spec{Resize: 232, Height: 224, Width: 224}).WithSize(112, 112); w.Resize != 116 {
		t.Errorf("WithSize keeps the ratio: %+v", w)
	}
	if w := (Spec{}).WithSize(448, 448); w.Resize != 512 {
		t.Errorf("WithSize of an empty spec: resize %d, want 512", w.Resize)
	}
}

func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Spec)
		want string
	}{
		{func(s *Spec) { s.Height = 0 }, "crop"},
		{func(s *Spec) { s.Std[1] = 0 }, "std[1]"},
		{func(s *Spec) { s.Interpolation = "lanczos" }, "lanczos"},
		{func(s *Spec) { s.Mean[0] = float32(math.NaN()) }, "mean[0]"},
	} {
		s := ImageNet(224, 224)
		tc.mod(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one mentioning %q", err, tc.want)
		}
	}
	if _, err := ParseInterpolation("BICUBIC"); err != nil {
		t.Error(err)
	}
}
