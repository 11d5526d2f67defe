package cuda

import (
	"strings"

	"goinfer/internal/ir"
)

// A depthwise convolution's prologue: MobileNetV3's and EfficientNet's
// inverted residual blocks expand the channels with a 1x1 convolution
// whose SiLU, hard swish or ReLU6 cuDNN's fused call cannot apply (it
// takes ReLU and identity only), so the activation ran as a kernel of its
// own over the expanded tensor, the largest of the block, between the
// convolution and the depthwise convolution that is its one reader. With
// a prologue the convolution writes conv + bias only (the fused call, its
// activation the identity) and graph.cu's depthwise kernels apply the
// activation to each input they load: one pass over the expanded tensor
// less, and the convolution on the precomputed implicit GEMM the fused
// call runs (graphinstance.go).

// preAct is the activation a depthwise step applies to its input as it
// loads it (graph.cu's dw_pre): an op code among preOK's, and Clip's
// bounds.
type preAct struct {
	op     int
	p0, p1 float32
}

// preOK reports whether graph.cu's prologue (pre_fast) computes act and
// act(0) = 0, so that the zeros the kernels stand in for padding may go
// through it. ReLU is left to the fused cuDNN call, where it costs
// nothing.
func preOK(act int, p0, p1 float32) bool {
	switch act {
	case ewSiLU, ewHardSwish:
		return true
	case ewClip:
		return p0 <= 0 && p1 >= 0
	}
	return false
}

// prologue pairs a convolution with the depthwise convolution that
// applies its activation.
type prologue struct {
	src *ir.Node // the convolution whose activation moves
	act preAct
}

// prologueCandidates lists, by depthwise node, the convolutions of a bound
// graph whose activation that depthwise convolution can apply as a
// prologue: a convolution (not itself depthwise) with a constant filter
// and a SiLU, hard swish or clip epilogue without residual, whose output
// is no graph output and has the depthwise convolution's input as its one
// use. Only channels-last plans run graph.cu's depthwise kernels; whether
// a pair becomes a prologue also depends on the measured lowering of the
// depthwise convolution (prologueActs).
func prologueCandidates(g *ir.Graph, channelsLast bool) map[*ir.Node]prologue {
	if !channelsLast {
		return nil
	}
	uses := map[*ir.Value]int{}
	reader := map[*ir.Value]*ir.Node{}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v != nil {
				uses[v]++
				reader[v] = n
			}
		}
	}
	for _, v := range g.Outputs {
		uses[v]++
	}
	out := map[*ir.Node]prologue{}
	for _, n := range g.Nodes {
		op, ok := n.Op.(*ir.Conv)
		if !ok || op.Epilogue.Residual || !constConv(n) {
			continue
		}
		act, p0, p1, err := actCode(op.Epilogue)
		if err != nil || !preOK(act, p0, p1) {
			continue
		}
		if g := convGeomIR(n); g == nil || g.isDepthwise() {
			continue
		}
		v := n.Outputs[0]
		r := reader[v]
		if uses[v] != 1 || r == nil || r.Inputs[0] != v || !constConv(r) {
			continue
		}
		if rg := convGeomIR(r); rg == nil || !rg.isDepthwise() {
			continue
		}
		out[r] = prologue{src: n, act: preAct{op: act, p0: p0, p1: p1}}
	}
	return out
}

// constConv reports whether n is a convolution with a constant filter and
// an output, as the planner lowers.
func constConv(n *ir.Node) bool {
	_, ok := n.Op.(*ir.Conv)
	return ok && len(n.Inputs) >= 2 && len(n.Outputs) >= 1 && n.Inputs[0] != nil && n.Inputs[1] != nil &&
		n.Inputs[1].Const != nil && n.Outputs[0] != nil
}

// convGeomIR is a Conv node's geometry from its bound types, or nil.
func convGeomIR(n *ir.Node) *convGeom {
	g, err := convGeomOf(n.Op.(*ir.Conv), n.Inputs[0].Type.Shape, n.Inputs[1].Type.Shape, n.Outputs[0].Type.Shape, -1)
	if err != nil {
		return nil
	}
	return g
}

// withPre is g's geometry carrying the prologue p (what the depthwise
// measurement and lowering are keyed on).
func withPre(g *convGeom, p preAct) *convGeom {
	c := *g
	c.pre = p
	return &c
}

// prologueActs keeps the candidates whose depthwise convolution runs
// graph.cu's kernel, as measured with the prologue (dw) or by default:
// where cuDNN's convolution was measured faster, the producer keeps its
// activation (an epilogue kernel) and the depthwise step reads activated
// input. It returns the prologue of each depthwise node and the
// convolutions whose activation moved.
func prologueActs(cands map[*ir.Node]prologue, elem int, dw map[dwShape]dwTimed) (pre map[*ir.Node]preAct, moved map[*ir.Node]bool) {
	pre, moved = map[*ir.Node]preAct{}, map[*ir.Node]bool{}
	for r, c := range cands {
		rg := convGeomIR(r)
		if rg == nil {
			continue
		}
		if lib, _ := dwLowering(withPre(rg, c.act), elem, dw); lib {
			continue
		}
		pre[r] = c.act
		moved[c.src] = true
	}
	return pre, moved
}

// fuseOptions sets o's fusion choices: identity convolutions, depthwise
// prologues and Find's math type are on (each measured faster on an H200),
// and engine.Options.GraphExperiments, a comma-separated list, turns one
// off for A/B runs ("noidentity", "noprologue", "nofindmath"; unknown names
// are ignored).
func fuseOptions(o planOptions, experiments string) planOptions {
	o.identityConv, o.dwPrologue, o.findMath = true, true, true
	for _, f := range strings.Split(experiments, ",") {
		switch strings.TrimSpace(f) {
		case "noidentity":
			o.identityConv = false
		case "noprologue":
			o.dwPrologue = false
		case "nofindmath":
			o.findMath = false
		}
	}
	return o
}

// hasExperiment reports whether the comma-separated list names e.
func hasExperiment(list, e string) bool {
	for _, f := range strings.Split(list, ",") {
		if strings.TrimSpace(f) == e {
			return true
		}
	}
	return false
}
