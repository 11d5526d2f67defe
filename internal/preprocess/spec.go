// Package preprocess describes how an image becomes a model's input: the
// resize, the center crop, the interpolation and the per-channel
// normalisation a model was trained with. The spec travels with the model
// (ir.Graph carries it), so that clients, the server and predict prepare
// images the way that model expects instead of assuming ImageNet's
// defaults.
package preprocess

import (
	"fmt"
	"math"
	"strings"

	"goinfer/internal/imageproc"
)

// Interpolation is the resampling filter of the resize step, named as
// torchvision's InterpolationMode values are.
type Interpolation string

// The interpolations torchvision's classification weights use. The zero
// value means Bilinear.
const (
	Bilinear Interpolation = "bilinear"
	Bicubic  Interpolation = "bicubic"
	Nearest  Interpolation = "nearest"
)

// ParseInterpolation accepts torchvision's names, in any case.
func ParseInterpolation(s string) (Interpolation, error) {
	switch i := Interpolation(strings.ToLower(s)); i {
	case Bilinear, Bicubic, Nearest:
		return i, nil
	}
	return "", fmt.Errorf("unknown interpolation %q (want bilinear, bicubic or nearest)", s)
}

// Spec is how an image becomes one model input, torchvision's evaluation
// transform: Resize(Resize) of the shorter side with Interpolation (and
// antialiasing), CenterCrop(Height, Width), ToTensor and Normalize(Mean,
// Std).
type Spec struct {
	Resize        int
	Height, Width int
	// Interpolation is the resize filter; empty means Bilinear.
	Interpolation Interpolation
	Mean, Std     [3]float32
}

// ImageNet statistics, which torchvision's weights normalise with (all but
// EfficientNetV2-L's). They are imageproc's, the one place they are
// written down.
var (
	ImageNetMean = imageproc.Mean
	ImageNetStd  = imageproc.Std
)

// ImageNet is the ImageNet evaluation transform for a model of h x w
// inputs: the shorter side resized bilinearly to 256/224 of the crop (256
// for 224, as torchvision's reference scripts do), ImageNet's mean and
// std.
func ImageNet(h, w int) Spec {
	return Spec{
		Resize: int(math.Round(float64(min(h, w)) * 256 / 224)),
		Height: h, Width: w,
		Interpolation: Bilinear,
		Mean:          ImageNetMean, Std: ImageNetStd,
	}
}

// Filter is the spec's interpolation, Bilinear when unset.
func (s Spec) Filter() Interpolation {
	if s.Interpolation == "" {
		return Bilinear
	}
	return s.Interpolation
}

// WithSize returns s for a model whose input is h x w: the resize keeps
// its ratio to the crop's shorter side.
func (s Spec) WithSize(h, w int) Spec {
	if old := min(s.Height, s.Width); s.Resize > 0 && old > 0 {
		s.Resize = int(math.Round(float64(s.Resize) * float64(min(h, w)) / float64(old)))
	} else {
		s.Resize = int(math.Round(float64(min(h, w)) * 256 / 224))
	}
	s.Height, s.Width = h, w
	return s
}

// Validate reports a spec that cannot be applied.
func (s Spec) Validate() error {
	if s.Resize < 1 || s.Height < 1 || s.Width < 1 {
		return fmt.Errorf("preprocess: resize %d and crop %dx%d must be positive", s.Resize, s.Height, s.Width)
	}
	if _, err := ParseInterpolation(string(s.Filter())); err != nil {
		return fmt.Errorf("preprocess: %w", err)
	}
	for c, sd := range s.Std {
		if !(sd > 0) || math.IsInf(float64(sd), 0) {
			return fmt.Errorf("preprocess: std[%d] is %v; want > 0 and finite", c, sd)
		}
		if m := float64(s.Mean[c]); math.IsNaN(m) || math.IsInf(m, 0) {
			return fmt.Errorf("preprocess: mean[%d] is %v; want a finite value", c, m)
		}
	}
	return nil
}

// ScaleShift returns the affine map from 0..255 pixels to the normalised
// input, x*scale[c] + shift[c], which is how engines normalise uint8
// input on the device.
func (s Spec) ScaleShift() (scale, shift [3]float32) {
	for c := range s.Std {
		scale[c] = float32(1 / (255 * float64(s.Std[c])))
		shift[c] = float32(-float64(s.Mean[c]) / float64(s.Std[c]))
	}
	return scale, shift
}

// String is the transform in torchvision's terms, for reports and
// `model inspect`.
func (s Spec) String() string {
	return fmt.Sprintf("resize %d (%s), center crop %dx%d, mean %v, std %v", s.Resize, s.Filter(), s.Height, s.Width, s.Mean, s.Std)
}
