package onnx

import (
	"fmt"

	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

// Resize and its predecessor Upsample map to one IR op. Upsample (7-9)
// and Resize-10 sample asymmetrically (output x reads input x/scale) and
// take the input sample at or left of it; they read X and scales only
// (Upsample before 9 holds scales as an attribute).

func init() {
	register("Resize", importResize)
	register("Upsample", importUpsample)
}

// legacyMode reads Upsample's and Resize-10's mode ("bilinear" is an
// older spelling of linear).
func legacyMode(t *tensorAttrs, op string) string {
	switch m := t.string("mode", "nearest"); m {
	case "nearest":
		return m
	case "linear", "bilinear":
		return "linear"
	default:
		t.keep(fmt.Errorf("%s's mode %q is not nearest or linear", op, m))
		return m
	}
}

func legacyResize(mode string) *ir.Resize {
	return &ir.Resize{
		Mode: mode, CoordinateTransformMode: "asymmetric", NearestMode: "floor",
		CubicCoeffA: -0.75, KeepAspectRatioPolicy: "stretch", ScalesOnly: true,
	}
}

func importUpsample(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	op := legacyResize(legacyMode(t, "Upsample"))
	var extra []ExtraInput
	if opset < 9 {
		t.required("Upsample", "scales")
		s, err := a.Floats("scales", nil)
		t.keep(err)
		v, err := tensor.FromFloat32(tensor.Shape{len(s)}, s)
		if err != nil {
			return nil, nil, fmt.Errorf("Upsample's scales: %w", err)
		}
		extra = append(extra, ExtraInput{Index: 1, Value: v})
	}
	return op, extra, t.err
}

func importResize(a Attrs, opset int) (ir.Op, []ExtraInput, error) {
	t := &tensorAttrs{a: a}
	if opset < 11 {
		return legacyResize(legacyMode(t, "Resize")), nil, t.err
	}
	op := &ir.Resize{
		Mode:                    t.string("mode", "nearest"),
		CoordinateTransformMode: t.string("coordinate_transformation_mode", "half_pixel"),
		NearestMode:             t.string("nearest_mode", "round_prefer_floor"),
		CubicCoeffA:             t.float("cubic_coeff_a", -0.75),
		ExcludeOutside:          t.bool("exclude_outside", false),
		ExtrapolationValue:      t.float("extrapolation_value", 0),
		Antialias:               t.bool("antialias", false),
		Axes:                    t.ints("axes"),
		KeepAspectRatioPolicy:   t.string("keep_aspect_ratio_policy", "stretch"),
	}
	if opset < 18 && (op.Antialias || len(op.Axes) != 0 || op.KeepAspectRatioPolicy != "stretch") {
		t.keep(fmt.Errorf("Resize-%d has no antialias, axes or keep_aspect_ratio_policy (they come with opset 18)", opset))
	}
	if opset < 19 && op.CoordinateTransformMode == "half_pixel_symmetric" {
		t.keep(fmt.Errorf("Resize-%d has no half_pixel_symmetric mode (it comes with opset 19)", opset))
	}
	if opset >= 18 && op.CoordinateTransformMode == "tf_half_pixel_for_nn" {
		t.keep(fmt.Errorf("Resize-%d dropped tf_half_pixel_for_nn (opset 18)", opset))
	}
	return op, nil, t.err
}
