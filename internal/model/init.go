package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"goinfer/internal/checkpoint"
	"goinfer/internal/hugepage"
	"goinfer/internal/tensor"
)

// calibrationSize is the image side used to calibrate batch norm statistics
// of random models: big enough that every stage sees more than one pixel.
const calibrationSize = 64

// Init returns a state dict of seeded random weights for arch, with
// torchvision's key names. Convolutions get Kaiming-normal weights (fan-out,
// as torchvision initializes them); batch norms get random affine parameters
// and running statistics calibrated on a random batch, so activations keep a
// realistic scale through the whole network (fp16 engines need that) while
// every batch norm still does non-trivial arithmetic. The same seed gives the
// same weights on every machine.
func Init(ctx context.Context, a Arch, seed uint64) (*checkpoint.StateDict, error) {
	sd, _, err := InitGraph(ctx, a, seed)
	return sd, err
}

// InitGraph is Init that also returns the eager graph of the weights, as
// FromStateDict(sd) would build it, without building it a second time. The
// graph shares the state dict's memory: a change to either shows in the
// other.
func InitGraph(ctx context.Context, a Arch, seed uint64) (*checkpoint.StateDict, *Graph, error) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	params := map[string][]float32{}
	specs := a.Params()
	// One block for all the weights: one allocation the kernel can back
	// with huge pages.
	total := 0
	for _, p := range specs {
		if !p.Optional {
			total += p.Shape.NumElements()
		}
	}
	block := hugepage.Float32s(total)
	for _, p := range specs {
		if p.Optional {
			continue
		}
		n := p.Shape.NumElements()
		v := block[:n:n]
		block = block[n:]
		switch {
		case len(p.Shape) == 4: // conv weight
			std := math.Sqrt(2 / float64(p.Shape[0]*p.Shape[2]*p.Shape[3]))
			for i := range v {
				v[i] = float32(rng.NormFloat64() * std)
			}
		case p.Name == "fc.weight" || p.Name == "fc.bias":
			bound := 1 / math.Sqrt(float64(a.lastOut()))
			for i := range v {
				v[i] = float32((2*rng.Float64() - 1) * bound)
			}
		case hasSuffix(p.Name, ".weight"): // bn gamma
			for i := range v {
				v[i] = float32(0.5 + rng.Float64())
			}
		case hasSuffix(p.Name, ".bias"): // bn beta
			for i := range v {
				v[i] = float32(0.1 * rng.NormFloat64())
			}
		case hasSuffix(p.Name, ".running_var"):
			for i := range v {
				v[i] = 1
			}
		}
		params[p.Name] = v
	}

	sd := checkpoint.NewStateDict()
	for _, p := range specs {
		if p.Optional {
			sd.Set(p.Name, tensor.New(tensor.Int64))
			continue
		}
		t, err := tensor.FromFloat32(p.Shape, params[p.Name])
		if err != nil {
			return nil, nil, fmt.Errorf("init %s: %w", p.Name, err)
		}
		sd.Set(p.Name, t)
	}

	g, err := build(a, sd, false)
	if err != nil {
		return nil, nil, err
	}
	x := make([]float32, 2*a.InChannels*calibrationSize*calibrationSize)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	calibrate := func(nd *Node, act []float64, d Dims, n int) {
		hw := d.H * d.W
		for c := 0; c < d.C; c++ {
			var s, s2 float64
			for b := 0; b < n; b++ {
				for _, v := range act[(b*d.C+c)*hw : (b*d.C+c+1)*hw] {
					s += v
					s2 += v * v
				}
			}
			cnt := float64(n * hw)
			mean := s / cnt
			variance := math.Max(s2/cnt-mean*mean, 1e-3)
			// Perturb, so that the stats are not exactly the batch's.
			mean += 0.1 * math.Sqrt(variance) * rng.NormFloat64()
			variance *= 0.8 + 0.45*rng.Float64()
			nd.BN.Mean[c] = float32(mean)
			// g shares params' memory: this sets the state dict's too.
			nd.BN.Var[c] = float32(variance)
		}
	}
	if _, err := g.reference(ctx, x, 2, calibrationSize, calibrationSize, calibrate); err != nil {
		return nil, nil, fmt.Errorf("calibrating batch norms: %w", err)
	}
	return sd, g, nil
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }
