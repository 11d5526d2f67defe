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
	if _, err := SpecFor(bicubic); err == nil || !strings.Contains(err.Error(), "bicubic") {
		t.Errorf("bicubic: %v", err)
	}
	noResize := preprocess.ImageNet(224, 224)
	noResize.Resize = 0
	if _, err := SpecFor(noResize); err == nil {
		t.Error("a spec without a resize was accepted")
	}
}
