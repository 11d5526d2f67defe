package torchvision

import (
	"testing"
)

// TestArchitectures checks every architecture's parameter count against
// torchvision's own (the num_params of its weight metadata, which
// tools/torchvision_weights.py copied into the weights table), at the
// image size of each weights entry.
func TestArchitectures(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range AllWeights() {
		if !Known(w.Arch) {
			continue
		}
		seen[w.Arch] = true
		cfg, err := NamedConfig(w.Arch, w.Classes)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParamCount(cfg, w.ImageSize())
		if err != nil {
			t.Errorf("%s: %v", w.Arch, err)
			continue
		}
		if got != w.Params {
			t.Errorf("%s (%s): %d parameters, torchvision has %d", w.Arch, w.Name, got, w.Params)
		}
	}
	for _, a := range Archs() {
		if !seen[a] {
			t.Errorf("%s has no torchvision weights entry to check against", a)
		}
	}
}
