package irexec

import (
	"strings"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/torchvision"
)

// TestTailCut checks where TailCut cuts torchvision's architectures: after
// the global pooling where a classifier of large weights follows, nowhere
// where the tail is light (a graph without weight-heavy layers).
func TestTailCut(t *testing.T) {
	for _, tc := range []struct {
		arch string
		want string // a substring of the cut value's name, "" for none
	}{
		{"mobilenet_v3_small", "avgpool"},
		{"mobilenet_v3_large", "avgpool"},
		{"efficientnet_b0", "avgpool"},
	} {
		t.Run(tc.arch, func(t *testing.T) {
			sd, err := torchvision.RandomStateDict(tc.arch, 1000, 1)
			if err != nil {
				t.Fatal(err)
			}
			g, err := torchvision.Build(tc.arch, sd, torchvision.Options{ImageSize: 224})
			sd.Close()
			if err != nil {
				t.Fatal(err)
			}
			b, _, err := ir.Optimize(g, 1)
			if err != nil {
				t.Fatal(err)
			}
			cut := TailCut(b)
			if tc.want == "" && cut != "" || !strings.Contains(cut, tc.want) || tc.want != "" && cut == "" {
				t.Fatalf("TailCut = %q, want a value named like %q", cut, tc.want)
			}
			head, tail, err := CutAt(b, cut)
			if err != nil {
				t.Fatal(err)
			}
			if len(head.Nodes)+len(tail.Nodes) != len(b.Nodes) || len(tail.Nodes) == 0 {
				t.Errorf("cut into %d and %d nodes of %d", len(head.Nodes), len(tail.Nodes), len(b.Nodes))
			}
		})
	}
}

func TestTailCutNone(t *testing.T) {
	g := oneNode(&ir.Unary{Fn: ir.OpRelu}, 1, f32in(1, 3, 5, 5))
	b, err := ir.Bind(g, 1)
	if err != nil {
		t.Fatal(err)
	}
	if cut := TailCut(b); cut != "" {
		t.Errorf("TailCut of one Relu = %q, want none", cut)
	}
	if _, _, err := CutAt(b, "nope"); err == nil {
		t.Error("CutAt a missing value: no error")
	}
}
