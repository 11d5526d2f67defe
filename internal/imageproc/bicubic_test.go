package imageproc

import (
	"bytes"
	"fmt"
	"testing"

	"goinfer/internal/tensor"
)

// TestBicubicGolden compares ResizeWith(Bicubic) with what PIL's
// Image.resize(size, BICUBIC) made of the same PNG
// (tools/golden/make_bicubic.py): byte for byte, downscaling and
// upscaling.
func TestBicubicGolden(t *testing.T) {
	m, err := DecodeFile(golden + "image.png")
	if err != nil {
		t.Fatal(err)
	}
	corner := NewRGB(40, 30)
	for y := 0; y < 30; y++ {
		copy(corner.Pix[3*40*y:3*40*(y+1)], m.Pix[3*m.W*y:3*m.W*y+3*40])
	}
	for _, tc := range []struct {
		src  *RGB
		w, h int
	}{{m, 73, 55}, {corner, 97, 61}} {
		ref, err := tensor.LoadNPY(fmt.Sprintf("%simage_png_bicubic_%dx%d.npy", golden, tc.w, tc.h))
		if err != nil {
			t.Fatal(err)
		}
		got := tc.src.ResizeWith(tc.w, tc.h, Bicubic)
		if got.W != tc.w || got.H != tc.h || !bytes.Equal(got.Pix, ref.Data) {
			maxd, mean := diff(got.Pix, ref.Data)
			t.Errorf("%dx%d -> %dx%d: max |diff| %d, mean %.4f; want PIL's bytes", tc.src.W, tc.src.H, tc.w, tc.h, maxd, mean)
		}
		// Bilinear gives other bytes: the filter is really switched.
		if bytes.Equal(tc.src.Resize(tc.w, tc.h).Pix, ref.Data) {
			t.Errorf("%dx%d: bilinear matches PIL's bicubic", tc.w, tc.h)
		}
	}
	var zero Filter
	if got := m.ResizeWith(73, 55, zero); !bytes.Equal(got.Pix, m.Resize(73, 55).Pix) || zero.orBilinear().String() != "bilinear" {
		t.Error("the zero Filter is not Bilinear")
	}
}
