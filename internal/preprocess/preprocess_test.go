package preprocess

import (
	"math"
	"strings"
	"testing"
)

func TestImageNet(t *testing.T) {
	s := ImageNet()
	if err := s.Validate(3); err != nil {
		t.Fatal(err)
	}
	scale, shift := s.ScaleShift()
	for c := range scale {
		// 0..255 pixels through the affine map equal (p/255 - mean)/std.
		for _, p := range []float64{0, 128, 255} {
			got := p*float64(scale[c]) + float64(shift[c])
			want := (p/255 - s.Mean[c]) / s.Std[c]
			if math.Abs(got-want) > 1e-5 {
				t.Errorf("channel %d pixel %v: %v, want %v", c, p, got, want)
			}
		}
	}
	if w := s.WithCrop(448); w.Crop != 448 || w.Resize != 512 {
		t.Errorf("WithCrop(448) of ImageNet's: %+v, want resize 512", w)
	}
	if w := (Spec{}).WithCrop(448); w.Resize != 512 {
		t.Errorf("WithCrop(448) resize %d, want 512", w.Resize)
	}
	if !s.Equal(ImageNet()) || s.Equal(s.WithCrop(100)) {
		t.Error("Equal")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Spec)
		want string
	}{
		{func(s *Spec) { s.Crop = 0 }, "crop"},
		{func(s *Spec) { s.Std[1] = 0 }, "standard deviation"},
		{func(s *Spec) { s.Mean = s.Mean[:2] }, "2 means"},
		{func(s *Spec) { s.Interpolation = "lanczos" }, "lanczos"},
		{func(s *Spec) { s.Mean[0] = math.NaN() }, "mean"},
	} {
		s := ImageNet()
		tc.mod(&s)
		if err := s.Validate(3); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one mentioning %q", err, tc.want)
		}
	}
	if err := ImageNet().Validate(1); err == nil {
		t.Error("3 channel statistics accepted for a 1-channel input")
	}
	if _, err := ParseInterpolation("BICUBIC"); err != nil {
		t.Error(err)
	}
}
