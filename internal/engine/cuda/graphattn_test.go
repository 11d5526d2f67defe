package cuda

import (
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/ir"
	"goinfer/internal/onnx"
)

// encoderCopies counts the copy and elementwise steps of a plan's encoder
// layers, by the IR nodes they belong to.
func encoderCopies(p *gplan, layer string) (copies, other int) {
	for _, s := range p.steps {
		if s.kind != stEW || !strings.Contains(s.node, layer) {
			continue
		}
		if s.op == ewCopy {
			copies++
		} else {
			other++
		}
	}
	return copies, other
}

// TestGraphPlanAttention checks the lowering of ViT attention on the IR:
// the heads of the packed projection, the transposes around the product
// and the merge back into tokens are views (no copies), and each layer's
// MatMul -> scale -> Softmax -> MatMul chain is one fused step, whatever
// the spelling (torchvision's builder, its TorchScript, dynamo and static
// ONNX exports). Before views and fusion, a tiny ViT layer took 7 copies
// and a scale kernel around two products and a softmax.
func TestGraphPlanAttention(t *testing.T) {
	type plan struct {
		name  string
		g     *ir.Graph
		batch int
		layer string
	}
	var cases []plan
	g, err := buildModel(tinyModels[0])
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, plan{"tiny_vit", g, 2, "encoder.layers"})
	files, _ := filepath.Glob(filepath.Join("..", "..", "..", "testdata", "onnx", "*", "vit.onnx"))
	for _, f := range files {
		g, err := onnx.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		batch := 16 // products of 16 rows and more read tokens-first activations in place
		if d := g.Inputs[0].Type.Shape[0]; d != ir.Dynamic {
			batch = d
		}
		cases = append(cases, plan{filepath.Base(filepath.Dir(f)), g, batch, "self_attention"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, _, err := ir.Optimize(c.g, c.batch)
			if err != nil {
				t.Fatal(err)
			}
			for _, elem := range []int{2, 4} {
				p, err := planGraph(b, c.batch, elem, elem == 2)
				if err != nil {
					t.Fatal(err)
				}
				k := p.kindCounts()
				if k[stAttn] != 2 || k[stSoftmax] != 0 {
					t.Errorf("%d-byte plan: %d fused attentions and %d softmax steps, want 2 and 0", elem, k[stAttn], k[stSoftmax])
				}
				// TorchScript's tokens-first heads ([S, N*heads, D/heads])
				// are no strided view of the projection beyond batch 1:
				// one copy each of q, k and v per layer.
				want := 0
				if c.batch > 1 && strings.HasPrefix(c.name, "torchscript") {
					want = 6
				}
				if cp, ew := encoderCopies(p, c.layer); cp != want || ew != 0 {
					t.Errorf("%d-byte plan: %d copies and %d elementwise steps in the attention, want %d and none", elem, cp, ew, want)
				}
			}
		})
	}
}

// TestGraphPlanNoAttention checks the plan a model gets when the fused
// attention kernels fail their load-time check: products and a softmax,
// still exact.
func TestGraphPlanNoAttention(t *testing.T) {
	g, err := buildModel(tinyModels[0])
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := ir.Optimize(g, 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := planGraphWith(b, 2, 4, false, planOptions{noAttention: true})
	if err != nil {
		t.Fatal(err)
	}
	if k := p.kindCounts(); k[stAttn] != 0 || k[stSoftmax] != 2 {
		t.Errorf("%d attention and %d softmax steps, want 0 and 2", k[stAttn], k[stSoftmax])
	}
	// Views alone: per layer, k and v are copied (their head and batch
	// strides make no one batch stride for cuBLAS), the merge is copied
	// and q is scaled: 3 copies and 1 elementwise step, down from 7 and 1.
	if cp, ew := encoderCopies(p, "encoder.layers"); cp != 6 || ew != 2 {
		t.Errorf("%d copies and %d elementwise steps in 2 layers, want 6 and 2", cp, ew)
	}
	in := randInput(b.Inputs[0].Type.Shape, 2)
	want := evalRef(t, g, 2, in)
	if e := relErr64(simulate(t, p, in.Data)[0], want[0].Data); e > 1e-5 {
		t.Errorf("relative error %.3g", e)
	}
}

// TestGraphPlanViews checks that views replace copies: products read
// transposed, sliced and split operands in place, and an attention whose
// probabilities are also read elsewhere is not fused.
func TestGraphPlanViews(t *testing.T) {
	for _, c := range opCases() {
		var want map[stepKind]int
		switch c.name {
		case "strided_views":
			want = map[stepKind]int{stGemm: 4, stEW: 24}
		case "attention_probs_out":
			want = map[stepKind]int{stGemm: 2, stSoftmax: 1}
		default:
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			b, _, err := ir.Optimize(c.g, 1)
			if err != nil {
				t.Fatal(err)
			}
			p, err := planGraph(b, 1, 2, true)
			if err != nil {
				t.Fatal(err)
			}
			got := p.kindCounts()
			for k, n := range want {
				if got[k] != n {
					t.Errorf("%d %s steps, want %d (all: %v)", got[k], k, n, got)
				}
			}
			if len(got) != len(want) {
				t.Errorf("steps %v, want only %v", got, want)
			}
		})
	}
}

// TestUseSplitAttention: the key-split kernel takes attentions whose
// 64-row tiles leave SMs idle, only where its check passed and for heads
// it is built for.
func TestUseSplitAttention(t *testing.T) {
	ok := fusedPaths{split: true, sms: 132}
	for _, tc := range []struct {
		name  string
		fp    fusedPaths
		hd    int
		tiles int
		want  bool
	}{
		{"ViT-B/16 batch 1: 12 heads x 4 tiles", ok, 64, 48, true},
		{"batch 2: 96 tiles", ok, 64, 96, true},
		{"batch 4: 192 tiles fill the GPU", ok, 64, 192, false},
		{"as many tiles as SMs", ok, 64, 132, false},
		{"head of 80", ok, 80, 48, false},
		{"check failed", fusedPaths{sms: 132}, 64, 48, false},
		{"no SM count", fusedPaths{split: true}, 64, 48, false},
	} {
		if got := useSplitAttention(tc.fp, tc.hd, tc.tiles); got != tc.want {
			t.Errorf("%s: useSplitAttention = %v, want %v", tc.name, got, tc.want)
		}
	}
}
