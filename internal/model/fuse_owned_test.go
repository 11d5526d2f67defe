package model

import (
	"context"
	"math"
	"slices"
	"testing"
)

// TestFuseOwned checks that Fuse of an Owned graph folds its weights where
// they are, to the bits a copying Fuse of the same graph gives.
func TestFuseOwned(t *testing.T) {
	ctx := context.Background()
	for _, a := range []Arch{
		narrow(Basic, []int{1, 1, 1, 1}, 8, 10),
		NewArch(Bottleneck, []int{1, 1, 1, 1}, 8, 5, 4, 8),
	} {
		_, g, err := InitGraph(ctx, a, 3)
		if err != nil {
			t.Fatal(err)
		}
		_, owned, err := InitGraph(ctx, a, 3)
		if err != nil {
			t.Fatal(err)
		}
		owned.Owned = true
		var origs [][]float32 // the owned graph's weights, before Fuse
		for _, n := range owned.Nodes {
			if n.Op == OpConv {
				origs = append(origs, n.Conv.Weight)
			}
		}
		want, err := Fuse(g)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Fuse(owned)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Nodes) != len(want.Nodes) {
			t.Fatalf("%s: %d fused nodes, want %d", a.Name(), len(got.Nodes), len(want.Nodes))
		}
		k := 0
		for i, n := range got.Nodes {
			if n.Op != OpConv {
				continue
			}
			w := want.Nodes[i].Conv
			if &n.Conv.Weight[0] != &origs[k][0] {
				t.Errorf("%s: %s: weights copied, want folded in place", a.Name(), n.Name)
			}
			k++
			eq := func(x, y []float32) bool {
				return slices.EqualFunc(x, y, func(p, q float32) bool { return math.Float32bits(p) == math.Float32bits(q) })
			}
			if n.Name != want.Nodes[i].Name || !eq(n.Conv.Weight, w.Weight) || !eq(n.Conv.Bias, w.Bias) ||
				n.Conv.ReLU != w.ReLU || n.Conv.Residual != w.Residual {
				t.Errorf("%s: %s differs from the copying Fuse's", a.Name(), n.Name)
			}
		}
		if &g.Nodes[0].Conv.Weight[0] == &want.Nodes[0].Conv.Weight[0] {
			t.Errorf("%s: a graph not owned was folded in place", a.Name())
		}
	}
}
