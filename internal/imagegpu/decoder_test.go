package imagegpu

import (
	"strings"
	"testing"

	"goinfer/internal/preprocess"
)

func TestSpecFor(t *testing.T) {
	s, err := SpecFor(preprocess.ImageNet(224, 224))
	if err != nil || s != ImageNet {
		t.Errorf("SpecFor(ImageNet) = %+v, %v; want %+v", s, err, ImageNet)
	}
	bicubic := preprocess.ImageNet(224, 224)
	bicubic.Interpolation = preprocess.Bicubic
	if s, err := SpecFor(bicubic); err != nil || !s.Bicubic {
		t.Errorf("bicubic: %+v, %v", s, err)
	}
	nearest := preprocess.ImageNet(224, 224)
	nearest.Interpolation = preprocess.Nearest
	if _, err := SpecFor(nearest); err == nil || !strings.Contains(err.Error(), "nearest") {
		t.Errorf("nearest: %v", err)
	}
	noResize := preprocess.ImageNet(224, 224)
	noResize.Resize = 0
	if _, err := SpecFor(noResize); err == nil {
		t.Error("a spec without a resize was accepted")
	}
}
