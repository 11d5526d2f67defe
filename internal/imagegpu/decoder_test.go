package imagegpu

import (
	"strings"
	"testing"

	"goinfer/internal/preprocess"
)

func TestSpecFor(t *testing.T) {
	s, err := SpecFor(preprocess.ImageNet())
	if err != nil || s != ImageNet {
		t.Errorf("SpecFor(ImageNet) = %+v, %v; want %+v", s, err, ImageNet)
	}
	bicubic := preprocess.ImageNet()
	bicubic.Interpolation = preprocess.Bicubic
	if _, err := SpecFor(bicubic); err == nil || !strings.Contains(err.Error(), "bicubic") {
		t.Errorf("bicubic: %v", err)
	}
	noResize := preprocess.ImageNet()
	noResize.Resize = 0
	if _, err := SpecFor(noResize); err == nil {
		t.Error("a spec without a resize was accepted")
	}
}
