package cuda

import (
	"strings"
	"testing"

	"goinfer/internal/ir"
)

// TestGraphPlanFold checks that per-channel scales and shifts and residual
// adds after an affine step (or a product's fused epilogue) become terms
// of that step (the simulations of
// TestGraphPlanOps and TestGraphPlanTinyModels check the values).
func TestGraphPlanFold(t *testing.T) {
	for _, tc := range []struct {
		name      string
		g         func() (*ir.Graph, error)
		ew, fused int // elementwise steps left; affine steps holding a folded Add
	}{
		{"matmul_scale_residual", func() (*ir.Graph, error) {
			for _, c := range opCases() {
				if c.name == "matmul_scale_residual" {
					return c.g, nil
				}
			}
			return nil, nil
		}, 0, 1},
		// Every block's layer scale and residual add in its second
		// Linear's bias epilogue; one elementwise step: the patch stem's
		// copy into patches (patchConv).
		{"convnext_tiny", func() (*ir.Graph, error) { return cachedModel("convnext_tiny", 32) }, 1, 18},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := tc.g()
			if err != nil || g == nil {
				t.Fatal(tc.name, err)
			}
			b, _, err := ir.Optimize(g, 2)
			if err != nil {
				t.Fatal(err)
			}
			p, err := planGraph(b, 2, 2, true)
			if err != nil {
				t.Fatal(err)
			}
			fused := 0
			for _, s := range p.steps {
				// An affine step, or a product's fused epilogue.
				epi := s.kind == stAffine || (s.kind == stGemm && s.fused)
				if epi && strings.Contains(s.node, "+") && strings.Contains(strings.ToLower(s.node), "add") {
					fused++
				}
			}
			if k := p.kindCounts(); k[stEW] != tc.ew || fused != tc.fused {
				for _, s := range p.steps {
					t.Logf("%s %s", s.kind, s.node)
				}
				t.Errorf("%d elementwise steps and %d affine steps with a folded add; want %d and %d", k[stEW], fused, tc.ew, tc.fused)
			}
		})
	}
}
