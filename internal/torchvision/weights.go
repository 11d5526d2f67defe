package torchvision

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"goinfer/internal/preprocess"
)

// Weights is one of torchvision's published weight files for an
// architecture: its enum name (IMAGENET1K_V1, ...), the file name its URL
// ends in (torch.hub's "<name>-<sha256 prefix>.pth"), and what the weights
// imply: the class count, torchvision's parameter count and the
// evaluation transform they were trained for.
type Weights struct {
	Arch         string
	Name         string
	File         string
	SHA256Prefix string
	Classes      int
	Params       int64
	Preprocess   preprocess.Spec
}

// URL is where torchvision downloads the file from.
func (w Weights) URL() string { return "https://download.pytorch.org/models/" + w.File }

// ImageSize is the square input size the weights were evaluated at (the
// crop), which fixes the sequence length of a ViT's position embedding.
func (w Weights) ImageSize() int { return w.Preprocess.Height }

// AllWeights returns every weights entry goinfer knows, in the order of
// torchvision's enums.
func AllWeights() []Weights {
	out := make([]Weights, len(weightsTable))
	copy(out, weightsTable)
	return out
}

// DefaultWeights is the first (original) weights entry of arch, whose
// preprocessing a checkpoint of that arch gets when nothing else says.
func DefaultWeights(arch string) (Weights, bool) {
	for _, w := range weightsTable {
		if w.Arch == arch {
			return w, true
		}
	}
	return Weights{}, false
}

// hubName splits torch.hub's "<stem>-<hex>.<ext>" file names.
var hubName = regexp.MustCompile(`^(.+)-([0-9a-f]{8,64})\.(pth|pt)$`)

// FromFileName recognises torchvision's own file names
// ("mobilenet_v3_large-5c1a4163.pth", "vit_b_16-c867db91.pth"), returning
// the weights entry
// and so the architecture and preprocessing. The sha256 prefix in the name
// must be that entry's: a name whose stem is known but whose hash is not
// is an error naming the hashes known for it, not a silent guess. ok is
// false for names that are not torchvision's.
func FromFileName(path string) (w Weights, ok bool, err error) {
	base := filepath.Base(path)
	m := hubName.FindStringSubmatch(base)
	if m == nil {
		return Weights{}, false, nil
	}
	stem, hash := m[1], m[2]
	var same []string
	for _, e := range weightsTable {
		es := hubName.FindStringSubmatch(e.File)
		if es == nil || es[1] != stem {
			continue
		}
		if es[2] == hash {
			return e, true, nil
		}
		same = append(same, e.File)
	}
	if len(same) > 0 {
		return Weights{}, false, fmt.Errorf("torchvision: %s names torchvision weights, but no %s weights have sha256 prefix %s (known: %s)", base, stem, hash, strings.Join(same, ", "))
	}
	return Weights{}, false, nil
}
