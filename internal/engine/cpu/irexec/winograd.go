package irexec

import (
	"goinfer/internal/engine/cpu/winograd"
	"goinfer/internal/ir"
)

// winoStep is a 3x3 stride-1 convolution run as Winograd F(4x4, 3x3)
// (package winograd), chosen by buildConv where it pays.
type winoStep struct {
	l             *winograd.Layer
	src, res, dst int
}

// buildWinograd returns the Winograd step for a convolution with constant
// weights wf, or nil when the convolution is not eligible or the plan's
// mode does not choose it.
func buildWinograd(nc *nodeCtx, g convGeom, wf, bias []float32, res int, ac act) (step, error) {
	if g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.dh != 1 || g.dw != 1 || g.groups != 1 ||
		ac.kind != ir.ActNone && ac.kind != ir.ActRelu || wf == nil {
		return nil, nil
	}
	wg := winograd.Conv{N: g.n, C: g.inC, K: g.outC, IH: g.ih, IW: g.iw, OH: g.oh, OW: g.ow, PT: g.pt, PL: g.pl}
	p := nc.c.p
	if !p.winoMode.Use(&wg, g.n) {
		return nil, nil
	}
	u, err := p.weights.derived(nc.n.Input(1).Const, "winograd", func(v any) int64 {
		return v.(*winograd.Weights).Bytes()
	}, func() (any, error) {
		return winograd.TransformWeights(wf, g.outC, g.inC)
	})
	if err != nil {
		return nil, err
	}
	l, err := winograd.NewLayer(wg, u.(*winograd.Weights), bias, ac.relu())
	if err != nil {
		return nil, err
	}
	p.wino = max(p.wino, l.BufferFloats(g.n))
	p.winoWorker = max(p.winoWorker, l.WorkerFloats())
	return &winoStep{l: l, src: nc.in[0], res: res, dst: nc.out[0]}, nil
}

func (s *winoStep) run(x *Exec) error {
	var res []float32
	if s.res >= 0 {
		res = x.f32(s.res)
	}
	s.l.Run(x.pool, x.wino, x.f32(s.src), res, x.f32(s.dst), s.l.N)
	return nil
}
