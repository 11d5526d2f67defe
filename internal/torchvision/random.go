package torchvision

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"

	"goinfer/internal/checkpoint"
	"goinfer/internal/tensor"
)

// RandomStateDict returns a state dict of arch (torchvision's
// configuration with the given class count) filled with seeded
// pseudo-random values; see RandomStateDictFor.
func RandomStateDict(arch string, classes int, seed uint32) (*checkpoint.StateDict, error) {
	cfg, err := NamedConfig(arch, classes)
	if err != nil {
		return nil, err
	}
	size := 224
	if w, ok := DefaultWeights(arch); ok {
		size = w.ImageSize()
	}
	return RandomStateDictFor(cfg, size, seed)
}

// RandomStateDictFor returns a state dict for cfg at the given image size
// whose values are a pure function of (seed, key, index), so that
// tools/torchvision_fixtures.py computes the very same weights without
// shipping them: element i of tensor key is u = mix(fnv1a32(seed:key) ^
// i*0x9E3779B1) / 2^32, then
//   - running variances and 1-D norm scales: 0.5 + u;
//   - other 1-D tensors (biases, running means): 0.2u - 0.1;
//   - the rest: (2u - 1) * sqrt(3 / fan_in), fan_in the product of the
//     dimensions after the first, so activations keep their scale;
//
// and integer buffers are their fixed content (num_batches_tracked 0).
func RandomStateDictFor(cfg Config, size int, seed uint32) (*checkpoint.StateDict, error) {
	specs, err := ParamSpecs(cfg, size)
	if err != nil {
		return nil, err
	}
	sd := checkpoint.NewStateDict()
	for _, s := range specs {
		if s.Int {
			t := tensor.New(tensor.Int64, s.Shape...)
			for i, v := range s.IntValues {
				putInt64(t.Data[8*i:], v)
			}
			sd.Set(s.Key, t)
			continue
		}
		v := make([]float32, s.Shape.NumElements())
		if s.Buffer {
			copy(v, s.FloatValues)
		} else {
			fillRandom(v, s.Key, s.Shape, seed)
		}
		t, err := tensor.FromFloat32(s.Shape, v)
		if err != nil {
			return nil, fmt.Errorf("torchvision: %s: %w", s.Key, err)
		}
		sd.Set(s.Key, t)
	}
	return sd, nil
}

func fillRandom(v []float32, key string, shape tensor.Shape, seed uint32) {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d:%s", seed, key)
	base := h.Sum32()
	scale, shift := 0.0, 0.0
	switch {
	case strings.HasSuffix(key, ".running_var") || len(shape) == 1 && strings.HasSuffix(key, ".weight"):
		scale, shift = 1, 0.5
	case len(shape) <= 1:
		scale, shift = 0.2, -0.1
	default:
		fanIn := 1
		for _, d := range shape[1:] {
			fanIn *= d
		}
		bound := math.Sqrt(3 / float64(fanIn))
		scale, shift = 2*bound, -bound
	}
	for i := range v {
		u := float64(mix32(base^(uint32(i)*0x9E3779B1))) / (1 << 32)
		// The explicit conversion rounds the product, ruling out a fused
		// multiply-add that Python's arithmetic would not do.
		v[i] = float32(float64(u*scale) + shift)
	}
}

// mix32 is a 32-bit integer hash (Chris Wellons' lowbias32).
func mix32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}
