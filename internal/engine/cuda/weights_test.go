package cuda

import (
	"bytes"
	"testing"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

// hostModel is what Load builds before the weights go to the device.
func hostModel(t testing.TB, g *model.Graph, p engine.Precision, compile bool, in tensor.DType) (*cudaModel, []opSpec) {
	t.Helper()
	prec, err := precisionOf(p)
	if err != nil {
		t.Fatal(err)
	}
	if compile {
		if g, err = model.Fuse(g); err != nil {
			t.Fatal(err)
		}
	}
	ops, err := lower(g)
	if err != nil {
		t.Fatal(err)
	}
	m := &cudaModel{graph: g, prec: prec, opts: engine.Options{Compile: compile, InputDType: in, MaxBatch: 1, Height: 64, Width: 64}}
	if m.shapes, err = g.Shapes(64, 64); err != nil {
		t.Fatal(err)
	}
	m.stem = planStem(g, m.shapes, prec.nhwc, stemS2D, 8)
	m.shapes[0] = m.stem.in
	return m, ops
}

// TestHostWeights checks the concurrently built weight image against the
// per-tensor encoders: every tensor where its layer's address points,
// 256-byte aligned, not overlapping the next.
func TestHostWeights(t *testing.T) {
	// ResNet-18's layout at a quarter of its width, and a grouped
	// bottleneck net: every kind of tensor, small enough for -race.
	graph := func(a model.Arch) *model.Graph {
		sd, err := model.Init(t.Context(), a, 1)
		if err != nil {
			t.Fatal(err)
		}
		g, err := model.FromStateDict(sd)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	basic := graph(model.NewArch(model.Basic, []int{2, 2, 2, 2}, 16, 10, 1, 64))
	grouped := graph(model.NewArch(model.Bottleneck, []int{1, 1, 1, 1}, 8, 10, 2, 8))
	for _, tc := range []struct {
		name    string
		g       *model.Graph
		p       engine.Precision
		compile bool
		in      tensor.DType
	}{
		{"basic/fp16/compiled", basic, engine.FP16, true, tensor.Float32},
		{"basic/bf16/compiled/uint8", basic, engine.BF16, true, tensor.Uint8},
		{"basic/fp32/eager", basic, engine.FP32, false, tensor.Float32},
		{"grouped/fp16/compiled", grouped, engine.FP16, true, tensor.Float32},
		{"grouped/tf32/eager", grouped, engine.TF32, false, tensor.Float32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.g
			m, ops := hostModel(t, g, tc.p, tc.compile, tc.in)
			host, blobs, err := m.hostWeights(ops)
			if err != nil {
				t.Fatal(err)
			}
			// Fake device addresses: the offsets themselves, plus a base so
			// that none is 0 (an unset pointer).
			const base = 1 << 20
			for _, b := range blobs {
				*b.dst = cu.DevPtr(base + b.off)
			}
			at := func(p cu.DevPtr, want []byte) {
				t.Helper()
				off := int64(p) - base
				if off%256 != 0 {
					t.Errorf("tensor at offset %d is not 256-byte aligned", off)
				}
				if got := host[off : off+int64(len(want))]; !bytes.Equal(got, want) {
					t.Errorf("tensor at offset %d (%d bytes) differs from its encoder's", off, len(want))
				}
			}
			for _, l := range m.layers {
				n := l.node
				switch l.spec.kind {
				case opConv:
					c := n.Conv
					if l.spec.node == m.stem.node && m.stem.s2d {
						at(l.w, s2dWeights(c, l.in.C, m.prec))
					} else {
						at(l.w, convWeights(c, l.in.C/c.Groups, m.prec))
					}
					if c.Bias != nil {
						at(l.bias, encode(c.Bias, m.prec.tensorDType))
						at(l.biasF32, encode(c.Bias, tensor.Float32))
					}
				case opScale:
					at(l.scale, encode(bnScaleShift(n.BN), tensor.Float32))
				case opLinear:
					at(l.w, encode(linearWeights(n.Linear, l.in, m.prec), tensor.Float32))
					at(l.biasF32, encode(n.Linear.Bias, tensor.Float32))
				}
			}
			if tc.in == tensor.Uint8 {
				a, err := inputAffine(m.graph.InChannels)
				if err != nil {
					t.Fatal(err)
				}
				at(m.affine, encode(a, tensor.Float32))
			}
			for k := 1; k < len(blobs); k++ {
				if blobs[k].off <= blobs[k-1].off {
					t.Errorf("blob %d at %d does not follow blob %d at %d", k, blobs[k].off, k-1, blobs[k-1].off)
				}
			}
			if last := blobs[len(blobs)-1].off; int64(len(host)) <= last {
				t.Errorf("image of %d bytes ends before its last tensor at %d", len(host), last)
			}
		})
	}
}

func BenchmarkHostWeights(b *testing.B) {
	a, err := model.KnownArch("resnet18", 1000)
	if err != nil {
		b.Fatal(err)
	}
	_, g, err := model.InitGraph(b.Context(), a, 0)
	if err != nil {
		b.Fatal(err)
	}
	m, ops := hostModel(b, g, engine.FP16, true, tensor.Float32)
	for b.Loop() {
		m.layers = nil
		if _, _, err := m.hostWeights(ops); err != nil {
			b.Fatal(err)
		}
	}
}
