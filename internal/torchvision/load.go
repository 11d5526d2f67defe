package torchvision

import (
	"fmt"
	"sort"
	"strings"

	"goinfer/internal/checkpoint"
	"goinfer/internal/ir"
)

// Detect names the torchvision architecture whose state dicts have
// exactly sd's keys and shapes. It fails when none fits, naming the
// closest architecture and what differs, and when several fit (which no
// two of torchvision's standard configurations do).
func Detect(sd *checkpoint.StateDict) (string, error) {
	if sd == nil || sd.Len() == 0 {
		return "", fmt.Errorf("torchvision: cannot detect the architecture of an empty state dict")
	}
	// Only architectures whose classifier key the state dict holds can
	// fit; the others are compared only to name the closest one.
	var candidates []string
	for _, arch := range Archs() {
		if _, ok := normalizeKeys(arch, sd).Get(archs[arch].classifier); ok {
			candidates = append(candidates, arch)
		}
	}
	if len(candidates) == 0 {
		candidates = Archs()
	}
	var matches []string
	best, bestScore := "", -1
	var bestDiff []string
	for _, arch := range candidates {
		nsd := normalizeKeys(arch, sd)
		diff, score := compareSpecs(arch, nsd)
		if len(diff) == 0 {
			matches = append(matches, arch)
			continue
		}
		if score > bestScore {
			best, bestScore, bestDiff = arch, score, diff
		}
	}
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		if len(bestDiff) > 5 {
			bestDiff = append(bestDiff[:5], fmt.Sprintf("... (%d differences)", len(bestDiff)))
		}
		return "", fmt.Errorf("torchvision: the state dict (%d tensors) matches no known architecture; the closest is %s: %s", sd.Len(), best, strings.Join(bestDiff, "; "))
	}
	return "", fmt.Errorf("torchvision: the state dict fits several architectures (%s): name one", strings.Join(matches, ", "))
}

// compareSpecs lists how sd differs from arch's tensors, and how many of
// its keys fit (the closeness of a near miss).
func compareSpecs(arch string, sd *checkpoint.StateDict) (diff []string, fit int) {
	e := archs[arch]
	classes := 1000
	if t, ok := sd.Get(e.classifier); ok && len(t.Shape) >= 1 && t.Shape[0] > 0 {
		classes = t.Shape[0]
	}
	size := impliedImageSize(arch, sd)
	if size == 0 {
		size = 224
	}
	specs, err := ParamSpecs(adapt(e.config(classes), sd), size)
	if err != nil {
		return []string{err.Error()}, 0
	}
	want := map[string]bool{}
	for _, s := range specs {
		want[s.Key] = true
		t, ok := sd.Get(s.Key)
		switch {
		case !ok && !s.Optional:
			diff = append(diff, fmt.Sprintf("missing %s", s.Key))
		case ok && !s.Int && !t.Shape.Equal(s.Shape):
			diff = append(diff, fmt.Sprintf("%s has shape %v, not %v", s.Key, t.Shape, s.Shape))
		case ok:
			fit++
		}
	}
	var extra []string
	for _, k := range sd.Names() {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		diff = append(diff, "unexpected "+k)
	}
	return diff, fit
}

// Load reads a torchvision checkpoint (.pth or .safetensors) and builds
// its graph. The architecture is arch when given, else the one
// torchvision's file name implies (whose preprocessing the graph then
// carries), else Detect's. checkpoint.Load verifies the sha256 prefix a
// torch.hub file name carries.
func Load(path, arch string, opts Options) (*ir.Graph, error) {
	w, named, err := FromFileName(path)
	if err != nil {
		return nil, err
	}
	sd, err := checkpoint.Load(path)
	if err != nil {
		return nil, err
	}
	defer sd.Close()
	switch {
	case arch == "" && named:
		arch = w.Arch
	case arch == "":
		if arch, err = Detect(sd); err != nil {
			return nil, fmt.Errorf("%s: %w (pass the architecture's name)", path, err)
		}
	case named && arch != w.Arch:
		return nil, fmt.Errorf("torchvision: %s is torchvision's %s weights file, not %s", path, w.Arch, arch)
	}
	if named && opts.Weights == nil {
		opts.Weights = &w
	}
	if opts.Weights == nil && opts.Preprocess == nil {
		// A checkpoint of unknown provenance gets its architecture's
		// original weights' preprocessing (scaled to the image size when
		// one is asked for): the best guess at how it was trained.
		if d, ok := DefaultWeights(arch); ok {
			opts.Preprocess = &d.Preprocess
			if opts.ImageSize == 0 && impliedImageSize(arch, normalizeKeys(arch, sd)) == 0 {
				opts.ImageSize = d.ImageSize()
			}
		}
	}
	g, err := Build(arch, sd, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}
