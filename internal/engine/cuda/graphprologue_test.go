package cuda

import (
	"testing"

	"goinfer/internal/ir"
)

// TestPreOK checks which activations a depthwise prologue takes: those
// graph.cu's pre_fast computes that keep zero (padding) zero.
func TestPreOK(t *testing.T) {
	for _, tc := range []struct {
		name   string
		act    int
		p0, p1 float32
		want   bool
	}{
		{"silu", ewSiLU, 0, 0, true},
		{"hardswish", ewHardSwish, 0, 0, true},
		{"relu6", ewClip, 0, 6, true},
		{"clip around zero", ewClip, -1, 1, true},
		{"clip above zero", ewClip, 1, 6, false},
		{"relu (fused by cuDNN)", ewRelu, 0, 0, false},
		{"identity", ewCopy, 0, 0, false},
		{"sigmoid", ewSigmoid, 0, 0, false},
		{"gelu", ewGELU, 0, 0, false},
	} {
		if got := preOK(tc.act, tc.p0, tc.p1); got != tc.want {
			t.Errorf("%s: preOK = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestGraphPlanPrologue plans MobileNetV3 and EfficientNet with depthwise
// prologues, with the depthwise convolutions on graph.cu's kernels, on
// cuDNN, and mixed, checks where the activations went and simulates each
// plan against the float64 reference.
func TestGraphPlanPrologue(t *testing.T) {
	for _, c := range opCases() {
		if c.name != "expand_prologue" {
			continue
		}
		b, _, err := ir.Optimize(c.g, 2)
		if err != nil {
			t.Fatal(err)
		}
		cands := prologueCandidates(b, true)
		if len(cands) != 3 {
			t.Errorf("%s: %d prologue candidates, want 3", c.name, len(cands))
		}
		p, err := planGraphWith(b, 2, 4, true, planOptions{dwPrologue: true})
		if err != nil {
			t.Fatal(err)
		}
		checkPrologues(t, p, cands, nil)
		in := randInput(b.Inputs[0].Type.Shape, 2)
		want := evalRef(t, c.g, 2, in)
		got := simulate(t, p, in.Data)
		if e := relErr64(got[0], want[0].Data); e > 1e-5 {
			t.Errorf("%s: relative error %.3g > 1e-5", c.name, e)
		}
	}
	for _, tc := range []struct {
		c     modelCase
		pairs int // expansions with SiLU / hard swish feeding a depthwise convolution
	}{
		// Hard swish blocks features.7 to features.15; the ReLU ones stay
		// with cuDNN's fused call.
		{modelCase{arch: "mobilenet_v3_large", size: 16}, 9},
		// The stem and the 15 expansions, all SiLU.
		{modelCase{arch: "efficientnet_b0", size: 16}, 16},
	} {
		t.Run(tc.c.arch, func(t *testing.T) {
			g := modelGraph(t, tc.c)
			const batch = 2
			b, _, err := ir.Optimize(g, batch)
			if err != nil {
				t.Fatal(err)
			}
			if got := prologueCandidates(b, false); len(got) != 0 {
				t.Errorf("%d prologues in a channels-first plan, want none", len(got))
			}
			cands := prologueCandidates(b, true)
			if len(cands) != tc.pairs {
				t.Errorf("%d prologue candidates, want %d", len(cands), tc.pairs)
			}
			for r, c := range cands {
				if r.Inputs[0] != c.src.Outputs[0] || !preOK(c.act.op, c.act.p0, c.act.p1) {
					t.Errorf("%s <- %s: not a prologue pair (act %d)", r.Name, c.src.Name, c.act.op)
				}
			}
			shapes := depthwiseShapes(b, cands)
			all, some := map[dwShape]dwTimed{}, map[dwShape]dwTimed{}
			for k, s := range shapes {
				all[s] = dwTimed{CuDNN: true}
				some[s] = dwTimed{CuDNN: k%2 == 0}
			}
			for _, lc := range []struct {
				name string
				lib  map[dwShape]dwTimed
			}{{"goinfer", nil}, {"cudnn", all}, {"mixed", some}} {
				t.Run(lc.name, func(t *testing.T) {
					p, err := planGraphWith(b, batch, 4, true, planOptions{dw: lc.lib, dwPrologue: true})
					if err != nil {
						t.Fatal(err)
					}
					checkPrologues(t, p, cands, lc.lib)
					in := randInput(b.Inputs[0].Type.Shape, uint64(batch))
					want := evalRef(t, g, batch, in)
					got := simulate(t, p, in.Data)
					for k := range want {
						if e := relErr64(got[k], want[k].Data); e > 1e-5 {
							t.Errorf("output %d: relative error %.3g > 1e-5", k, e)
						}
					}
				})
			}
		})
	}
}

// checkPrologues checks plan p's steps for the candidates cands under the
// depthwise choices lib: a depthwise convolution on graph.cu's kernel
// applies its producer's activation, which then runs no kernel of its
// own, and one on cuDNN reads activated input.
func checkPrologues(t *testing.T, p *gplan, cands map[*ir.Node]prologue, lib map[dwShape]dwTimed) {
	t.Helper()
	byNode := map[string][]*gstep{}
	for _, s := range p.steps {
		byNode[s.node] = append(byNode[s.node], s)
	}
	moved := 0
	for r, c := range cands {
		rg := withPre(convGeomIR(r), c.act)
		own := !lib[rg.dwShape()].CuDNN
		var dw, conv *gstep
		affine := 0
		for _, s := range byNode[r.Name] {
			if s.kind == stDW || (s.kind == stConv && s.conv.isDepthwise()) {
				dw = s
			}
		}
		for _, s := range byNode[c.src.Name] {
			switch s.kind {
			case stConv, stFC: // 1x1 images at small sizes: the dense kernel
				conv = s
			case stAffine:
				affine++
			}
		}
		if dw == nil || conv == nil {
			t.Errorf("%s <- %s: steps missing", r.Name, c.src.Name)
			continue
		}
		if !own {
			if dw.kind != stConv || affine+b2i(conv.op == c.act.op) == 0 {
				t.Errorf("%s on cuDNN: its producer %s does not apply its activation", r.Name, c.src.Name)
			}
			continue
		}
		moved++
		if dw.kind != stDW || dw.meta[dwMetaPre] != int32(c.act.op) {
			t.Errorf("%s: prologue %d, want %d", r.Name, dw.meta[dwMetaPre], c.act.op)
		}
		if (conv.kind == stConv && !conv.fused) || conv.op != ewCopy || affine != 0 {
			t.Errorf("%s: %s fused %v op %d with %d epilogue kernels; want the identity, bias fused, alone", c.src.Name, conv.kind, conv.fused, conv.op, affine)
		}
	}
	if lib == nil && moved != len(cands) {
		t.Errorf("%d of %d prologues applied with every depthwise convolution on graph.cu's kernel", moved, len(cands))
	}
}

// TestGraphPlanIdentityConv checks the opt-in identity routing: each
// convolution with an activation cuDNN's fused call lacks runs that call
// with the identity and its activation as a kernel after it, and the
// plan computes the model.
func TestGraphPlanIdentityConv(t *testing.T) {
	c := modelCase{arch: "mobilenet_v3_large", size: 16}
	g := modelGraph(t, c)
	const batch = 2
	b, _, err := ir.Optimize(g, batch)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range []bool{false, true} {
		p, err := planGraphWith(b, batch, 4, cl, planOptions{identityConv: true})
		if err != nil {
			t.Fatal(err)
		}
		plain, fused := 0, 0
		for k, s := range p.steps {
			if s.kind != stConv || s.conv.isDepthwise() {
				continue
			}
			if !s.fused {
				plain++
				continue
			}
			fused++
			if s.op != ewCopy && s.op != ewRelu {
				t.Errorf("%s: fused call with activation %d", s.node, s.op)
			}
			if next := p.steps[min(k+1, len(p.steps)-1)]; s.op == ewCopy && next.kind == stAffine && next.node == s.node && next.shift != nil {
				t.Errorf("%s: the bias left to a kernel", s.node)
			}
		}
		if plain != 0 || fused == 0 {
			t.Errorf("channels-last %v: %d plain and %d fused convolutions; want none plain", cl, plain, fused)
		}
		in := randInput(b.Inputs[0].Type.Shape, uint64(batch))
		want := evalRef(t, g, batch, in)
		got := simulate(t, p, in.Data)
		for k := range want {
			if e := relErr64(got[k], want[k].Data); e > 1e-5 {
				t.Errorf("channels-last %v, output %d: relative error %.3g > 1e-5", cl, k, e)
			}
		}
	}
}

// TestFuseOptions checks the parsing of engine.Options.GraphExperiments.
func TestFuseOptions(t *testing.T) {
	for _, tc := range []struct {
		env                  string
		identity, prol, math bool
	}{
		{"", true, true, true},
		{"noidentity", false, true, true},
		{"noprologue", true, false, true},
		{"noidentity, noprologue", false, false, true},
		{"nofindmath,noprologue", true, false, false},
		{"bogus", true, true, true},
	} {
		o := fuseOptions(planOptions{chains: true}, tc.env)
		if o.identityConv != tc.identity || o.dwPrologue != tc.prol || o.findMath != tc.math || !o.chains {
			t.Errorf("%q: identity %v prologue %v findmath %v chains %v", tc.env, o.identityConv, o.dwPrologue, o.findMath, o.chains)
		}
		if got := hasExperiment(tc.env, "nofindmath"); got == tc.math {
			t.Errorf("%q: hasExperiment(nofindmath) = %v", tc.env, got)
		}
	}
}
