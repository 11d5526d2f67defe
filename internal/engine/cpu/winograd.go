package cpu

import (
	"goinfer/internal/engine/cpu/winograd"
	"goinfer/internal/model"
)

// winoStep is a 3x3 stride-1 convolution run as Winograd F(4x4, 3x3)
// (package winograd), chosen by newPlan where it pays.
type winoStep struct {
	l             *winograd.Layer
	src, res, dst int
}

// newWinoStep returns the Winograd step for nd, or nil when nd is not a
// 3x3 stride-1 convolution of one group or mode does not choose it at
// batch chunk.
func newWinoStep(nd *model.Node, in, out model.Dims, chunk int, mode winograd.Mode) (*winoStep, error) {
	c := nd.Conv
	if c.K != 3 || c.Stride != 1 || c.Groups != 1 {
		return nil, nil
	}
	g := winograd.Conv{N: chunk, C: c.InC, K: c.OutC, IH: in.H, IW: in.W, OH: out.H, OW: out.W, PT: c.Pad, PL: c.Pad}
	if !mode.Use(&g, chunk) {
		return nil, nil
	}
	u, err := winograd.TransformWeights(c.Weight, c.OutC, c.InC)
	if err != nil {
		return nil, err
	}
	l, err := winograd.NewLayer(g, u, c.Bias, c.ReLU)
	if err != nil {
		return nil, err
	}
	s := &winoStep{l: l, src: int(nd.Inputs[0]), res: -1, dst: int(nd.Output)}
	if c.Residual {
		s.res = int(nd.Inputs[1])
	}
	return s, nil
}

func (s *winoStep) run(in *instance, n int) {
	var res []float32
	if s.res >= 0 {
		res = in.vals[s.res]
	}
	s.l.Run(in.pool, in.wino, in.vals[s.src], res, in.vals[s.dst], n)
}
