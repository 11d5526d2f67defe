package torchvision

import (
	"strings"
	"testing"

	"goinfer/internal/preprocess"
)

func TestFromFileName(t *testing.T) {
	for _, tc := range []struct {
		path, arch, name string
		crop, resize     int
		interp           preprocess.Interpolation
	}{
		{"/models/mobilenet_v3_large-5c1a4163.pth", "mobilenet_v3_large", "IMAGENET1K_V2", 224, 232, preprocess.Bilinear},
		{"mobilenet_v3_large-8738ca79.pth", "mobilenet_v3_large", "IMAGENET1K_V1", 224, 256, preprocess.Bilinear},
		{"vit_b_16-c867db91.pth", "vit_b_16", "IMAGENET1K_V1", 224, 256, preprocess.Bilinear},
		{"vit_b_16_swag-9ac1b537.pth", "vit_b_16", "IMAGENET1K_SWAG_E2E_V1", 384, 384, preprocess.Bicubic},
		{"efficientnet_b3_rwightman-cf984f9c.pth", "efficientnet_b3", "IMAGENET1K_V1", 300, 320, preprocess.Bicubic},
		{"resnet18-f37072fd.pth", "resnet18", "IMAGENET1K_V1", 224, 256, preprocess.Bilinear},
		{"shufflenetv2_x0.5-f707e7126e.pth", "shufflenet_v2_x0_5", "IMAGENET1K_V1", 224, 256, preprocess.Bilinear},
	} {
		w, ok, err := FromFileName(tc.path)
		if err != nil || !ok {
			t.Errorf("%s: ok=%v err=%v", tc.path, ok, err)
			continue
		}
		if w.Arch != tc.arch || w.Name != tc.name || w.Preprocess.Height != tc.crop || w.Preprocess.Width != tc.crop || w.Preprocess.Resize != tc.resize || w.Preprocess.Interpolation != tc.interp {
			t.Errorf("%s: got %s.%s %v", tc.path, w.Arch, w.Name, w.Preprocess)
		}
		if err := w.Preprocess.Validate(); err != nil {
			t.Errorf("%s: %v", tc.path, err)
		}
		if !strings.HasPrefix(w.URL(), "https://download.pytorch.org/models/") {
			t.Errorf("%s: URL %s", tc.path, w.URL())
		}
	}
	// A known stem with an unknown hash is an error, not a guess.
	if _, _, err := FromFileName("vit_b_16-00000000.pth"); err == nil || !strings.Contains(err.Error(), "vit_b_16-c867db91.pth") {
		t.Errorf("unknown hash: error %v should name the known files", err)
	}
	for _, p := range []string{"model.pth", "my_resnet-12345678.pth", "resnet18.safetensors", ""} {
		if _, ok, err := FromFileName(p); ok || err != nil {
			t.Errorf("%q: ok=%v err=%v, want not recognised", p, ok, err)
		}
	}
}

func TestWeightsTable(t *testing.T) {
	files := map[string]bool{}
	for _, w := range AllWeights() {
		if !Known(w.Arch) {
			t.Errorf("%s: weights of %s, which Build does not know", w.File, w.Arch)
		}
		if files[w.File] {
			t.Errorf("file %s listed twice", w.File)
		}
		files[w.File] = true
		if !strings.Contains(w.File, w.SHA256Prefix) {
			t.Errorf("%s: hash %s not in the name", w.File, w.SHA256Prefix)
		}
		if err := w.Preprocess.Validate(); err != nil {
			t.Errorf("%s: %v", w.File, err)
		}
		if d, ok := DefaultWeights(w.Arch); !ok || d.Arch != w.Arch {
			t.Errorf("%s: no default weights", w.Arch)
		}
	}
}
