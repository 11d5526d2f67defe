package irexec

import (
	"context"
	"fmt"
	"strings"
	"time"

	"goinfer/internal/engine"
)

// StepTime is one planned step's share of a forward, as Profile measures
// it.
type StepTime struct {
	// Names and Ops are the graph nodes the step computes (several where
	// the planner fused them), joined with "+": "features.4.block.1.0+..."
	// and "Conv+GlobalAveragePool".
	Names, Ops string
	// Step is the kernel the planner chose, with its shape where that
	// says which path runs: "dwBlockStep 5x5/2 72ch 56x56".
	Step string
	Time time.Duration // per forward
}

// Profile runs iters forwards like Run, timing each step with the wall
// clock, and returns each step's median over the forwards in plan order:
// on a shared machine a step that loses its core for a scheduler tick
// would otherwise carry the tick. Run
// itself reads no clock: profiling costs nothing when it is off. A step's
// time includes handing its tasks to the pool and waiting for the last
// worker, the costs between small steps that a sum of kernel times misses.
func (x *Exec) Profile(ctx context.Context, in, out [][]byte, iters int) ([]StepTime, error) {
	if iters < 1 {
		return nil, fmt.Errorf("irexec: Profile of %d forwards", iters)
	}
	times := make([][]time.Duration, iters)
	for it := range times {
		times[it] = make([]time.Duration, len(x.p.steps))
		if err := x.runTimed(ctx, in, out, times[it]); err != nil {
			return nil, err
		}
	}
	return x.p.stepTimes(engine.MedianTimes(times, 1)), nil
}

// runTimed is Run adding each step's wall time to sum[step].
func (x *Exec) runTimed(ctx context.Context, in, out [][]byte, sum []time.Duration) error {
	if err := x.checkIO(in, out); err != nil {
		return err
	}
	p := x.p
	for i, v := range p.inputs {
		copy(x.views[v], in[i])
	}
	for i, s := range p.steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		if err := s.s.run(x); err != nil {
			return fmt.Errorf("irexec: %s: %w", s.node, err)
		}
		sum[i] += time.Since(t0)
	}
	for i, v := range p.outputs {
		copy(out[i], x.views[v])
	}
	return nil
}

// stepTimes names each step's time.
func (p *Plan) stepTimes(t []time.Duration) []StepTime {
	res := make([]StepTime, len(p.steps))
	for i, s := range p.steps {
		names, ops := splitNode(s.node)
		res[i] = StepTime{Names: names, Ops: ops, Step: describeStep(s.s), Time: t[i]}
	}
	return res
}

// Profile runs iters forwards of n images like Run, each worker timing
// the steps of its chunks, and returns per step the median over the
// forwards of the time all chunks spent in it divided by the workers: its
// share of the forward's wall time while
// every worker is busy (the workers never wait on each other inside a
// forward, so there is no hand-off to time).
func (s *Split) Profile(ctx context.Context, in, out [][]byte, n, iters int) ([]StepTime, error) {
	if iters < 1 {
		return nil, fmt.Errorf("irexec: Profile of %d forwards", iters)
	}
	workers := len(s.execs)
	sums := make([][]time.Duration, workers)
	for w := range sums {
		sums[w] = make([]time.Duration, len(s.p.steps))
	}
	s.job.prof = sums
	defer func() { s.job.prof = nil }()
	times := make([][]time.Duration, iters)
	for it := range times {
		for _, sw := range sums {
			clear(sw)
		}
		if err := s.Run(ctx, in, out, n); err != nil {
			return nil, err
		}
		times[it] = make([]time.Duration, len(s.p.steps))
		for _, sw := range sums {
			for i, d := range sw {
				times[it][i] += d
			}
		}
	}
	return s.p.stepTimes(engine.MedianTimes(times, workers)), nil
}

// splitNode parses a step's node description (ir.Node.String, joined
// with " + " by the fusions) into node names and op kinds, each joined
// with "+".
func splitNode(node string) (names, ops string) {
	var ns, ks []string
	for _, part := range strings.Split(node, " + ") {
		name, kind := "", part
		if rest, ok := strings.CutPrefix(part, "node "); ok {
			if i := strings.LastIndex(rest, " ("); i >= 0 && strings.HasSuffix(rest, ")") {
				name, kind = strings.Trim(rest[:i], `"`), rest[i+2:len(rest)-1]
			}
		} else if rest, ok := strings.CutPrefix(part, "a "); ok {
			kind = strings.TrimSuffix(rest, " node")
		}
		ns, ks = append(ns, name), append(ks, kind)
	}
	return strings.Join(ns, "+"), strings.Join(ks, "+")
}

// describeStep names a step's kernel and, for convolutions, the shape
// that decides its path.
func describeStep(s step) string {
	t := strings.TrimPrefix(fmt.Sprintf("%T", s), "*irexec.")
	t = strings.TrimPrefix(t, "irexec.")
	var g *convGeom
	switch c := s.(type) {
	case *convStep:
		g = &c.convGeom
	case *dwStep:
		g = &c.convGeom
	case *dwBlockStep:
		g = &c.convGeom
	case *tapsConvStep:
		g = &c.convGeom
	case *stemPoolStep:
		g = &c.conv.convGeom
	case *winoStep:
		return fmt.Sprintf("%s %dch %dx%d", t, c.l.C, c.l.OH, c.l.OW)
	case *pwdwStep:
		pw, dw := c.pw, c.dw
		return fmt.Sprintf("%s 1x1 %d->%d %dx%d + dw %dx%d/%d %dch %dx%d, bands of %d rows", t, pw.inC, pw.outC, pw.oh, pw.ow,
			dw.kh, dw.kw, dw.sh, dw.outC, dw.oh, dw.ow, c.band)
	case *mmStep:
		return fmt.Sprintf("%s %dx%dx%d", t, c.rows, c.k, c.cols)
	case *mmGemvStep:
		return fmt.Sprintf("%s %dx%dx%d", t, c.rows, c.k, c.cols)
	}
	if g == nil {
		return t
	}
	if g.groups > 1 && g.groups == g.inC {
		return fmt.Sprintf("%s %dx%d/%d %dch %dx%d", t, g.kh, g.kw, g.sh, g.outC, g.oh, g.ow)
	}
	return fmt.Sprintf("%s %dx%d/%d %d->%d %dx%d", t, g.kh, g.kw, g.sh, g.inC, g.outC, g.oh, g.ow)
}
