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
)

// Interpolation is the resampling filter of the resize step, named as
// torchvision's InterpolationMode values are.
type Interpolation string

// The interpolations torchvision's classification weights use.
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

// Spec is torchvision's evaluation transform, ImageClassification:
// resize the shorter side to Resize with Interpolation, take the center
// Crop x Crop window, scale pixels to [0, 1] and normalise each channel
// with (x - Mean[c]) / Std[c].
type Spec struct {
	Resize        int
	Crop          int
	Interpolation Interpolation
	Mean          []float64
	Std           []float64
}

// ImageNet is the transform torchvision's original ImageNet weights use:
// Resize(256, bilinear), CenterCrop(224) and ImageNet's channel
// statistics. Models that say nothing about their preprocessing get it.
func ImageNet() Spec {
	return Spec{
		Resize:        256,
		Crop:          224,
		Interpolation: Bilinear,
		Mean:          []float64{0.485, 0.456, 0.406},
		Std:           []float64{0.229, 0.224, 0.225},
	}
}

// WithCrop returns s for a model whose input is crop pixels square: the
// resize keeps its ratio to the crop (ImageNet's 256/224 when s has
// neither).
func (s Spec) WithCrop(crop int) Spec {
	if s.Resize > 0 && s.Crop > 0 {
		s.Resize = int(math.Round(float64(s.Resize) * float64(crop) / float64(s.Crop)))
	} else {
		s.Resize = int(math.Round(float64(crop) * 256 / 224))
	}
	s.Crop = crop
	return s
}

// Validate checks that the spec is usable for an input of the given
// channel count (0: any count).
func (s Spec) Validate(channels int) error {
	if s.Crop <= 0 {
		return fmt.Errorf("preprocess: crop size %d must be positive", s.Crop)
	}
	if s.Resize < 0 {
		return fmt.Errorf("preprocess: resize size %d must not be negative", s.Resize)
	}
	if _, err := ParseInterpolation(string(s.Interpolation)); err != nil {
		return fmt.Errorf("preprocess: %w", err)
	}
	if len(s.Mean) != len(s.Std) || len(s.Mean) == 0 {
		return fmt.Errorf("preprocess: %d means and %d standard deviations, want one of each per channel", len(s.Mean), len(s.Std))
	}
	if channels > 0 && len(s.Mean) != channels {
		return fmt.Errorf("preprocess: %d channel statistics for an input of %d channels", len(s.Mean), channels)
	}
	for c, sd := range s.Std {
		if !(sd > 0) || math.IsInf(sd, 0) {
			return fmt.Errorf("preprocess: standard deviation %v of channel %d must be positive and finite", sd, c)
		}
		if math.IsNaN(s.Mean[c]) || math.IsInf(s.Mean[c], 0) {
			return fmt.Errorf("preprocess: mean %v of channel %d must be finite", s.Mean[c], c)
		}
	}
	return nil
}

// ScaleShift returns the affine map from 0..255 pixels to the normalised
// input, x*scale[c] + shift[c], which is how engines normalise uint8
// input on the device.
func (s Spec) ScaleShift() (scale, shift []float32) {
	scale = make([]float32, len(s.Std))
	shift = make([]float32, len(s.Std))
	for c := range s.Std {
		scale[c] = float32(1 / (255 * s.Std[c]))
		shift[c] = float32(-s.Mean[c] / s.Std[c])
	}
	return scale, shift
}

// MeanStd32 returns the statistics as float32, as torchvision's Normalize
// holds them.
func (s Spec) MeanStd32() (mean, std []float32) {
	mean = make([]float32, len(s.Mean))
	std = make([]float32, len(s.Std))
	for c := range s.Mean {
		mean[c], std[c] = float32(s.Mean[c]), float32(s.Std[c])
	}
	return mean, std
}

// Equal reports whether two specs describe the same transform.
func (s Spec) Equal(o Spec) bool {
	if s.Resize != o.Resize || s.Crop != o.Crop || s.Interpolation != o.Interpolation || len(s.Mean) != len(o.Mean) || len(s.Std) != len(o.Std) {
		return false
	}
	for i := range s.Mean {
		if s.Mean[i] != o.Mean[i] {
			return false
		}
	}
	for i := range s.Std {
		if s.Std[i] != o.Std[i] {
			return false
		}
	}
	return true
}

// String is the transform in torchvision's terms, for reports and
// `model inspect`.
func (s Spec) String() string {
	return fmt.Sprintf("resize %d (%s), center crop %d, mean %v, std %v", s.Resize, s.Interpolation, s.Crop, s.Mean, s.Std)
}
