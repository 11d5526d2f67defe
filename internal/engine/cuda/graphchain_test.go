package cuda

import (
	"testing"

	"goinfer/internal/ir"
)

// TestGraphPlanChains simulates every per-op graph, concatenation case and
// the tiny ViT with elementwise chains on (channels-last, an odd batch),
// and counts the steps chains save.
func TestGraphPlanChains(t *testing.T) {
	on := planOptions{chains: true}
	cases := append(opCases(), concatCases()...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkPlannedWith(t, c.g, 3, true, 1e-5, on)
		})
	}
	for _, c := range tinyModels {
		if c.arch != "tiny_vit" {
			continue // the others have no elementwise runs left (TestGraphPlanFold)
		}
		t.Run(c.arch, func(t *testing.T) {
			g := modelGraph(t, c)
			checkPlannedWith(t, g, 2, true, 1e-5, on)
		})
	}
	// The elementwise case: Add, then Sub of it (its second operand: Sub
	// does not commute, so no chain), Pow -> Sigmoid -> Mul (of Tanh ->
	// Erf, a chain of its own), Clip -> Exp -> LeakyRelu: chains of at
	// most four ops. The outputs of ops of a row-major input stay
	// row-major (outLike) and the transpose before the softmax is a view,
	// so no copies for the mean, the transpose or the output.
	for _, tc := range []struct {
		name       string
		off, chain int // elementwise steps without and with chains
	}{
		{"elementwise", 12, 6},
	} {
		var g *ir.Graph
		for _, c := range cases {
			if c.name == tc.name {
				g = c.g
			}
		}
		count := func(opts planOptions) (int, *gplan) {
			b, _, err := ir.Optimize(g, 2)
			if err != nil {
				t.Fatal(err)
			}
			p, err := planGraphWith(b, 2, 2, true, opts)
			if err != nil {
				t.Fatal(err)
			}
			k := p.kindCounts()
			return k[stEW] + k[stChain] + k[stAffine], p
		}
		off, _ := count(planOptions{})
		with, p := count(on)
		if off != tc.off || with != tc.chain {
			for _, s := range p.steps {
				t.Logf("%s %s %s", tc.name, s.kind, s.node)
			}
			t.Errorf("%s: %d elementwise steps without chains, %d with; want %d and %d", tc.name, off, with, tc.off, tc.chain)
		}
	}
}
