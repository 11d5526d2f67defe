package cuda

import (
	"context"
	"fmt"
	"math"
	"testing"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/tensor"
)

// TestStemModes checks each channels-last stem layout (space to depth,
// zero-padded channels, plain) against the float32 model, and that the
// converted input the first convolution reads is what the layout says.
func TestStemModes(t *testing.T) {
	needGPU(t)
	gc := goldenCases(t)[0]
	g := loadGraph(t, gc.model)
	xt, x := loadF32(t, gc.input)
	n, h, w := xt.Shape[0], xt.Shape[2], xt.Shape[3]
	run := func(p engine.Precision, stem string) (engine.Model, engine.Instance, []float32) {
		m, err := Engine{}.Load(context.Background(), g, engine.Options{Compile: true, Precision: p, MaxBatch: n, Height: h, Width: w, Stem: stem})
		if err != nil {
			t.Fatal(err)
		}
		inst, err := m.NewInstance(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return m, inst, runForward(t, m, inst, tensor.F32Bytes(x), n)
	}
	m32, i32, ref := run(engine.FP32, "")
	i32.Close()
	m32.Close()
	for _, mode := range []string{stemS2D, stemPad, stemNone} {
		t.Run(mode, func(t *testing.T) {
			m, inst, got := run(engine.FP16, mode)
			defer m.Close()
			defer inst.Close()
			e := relErr(got, ref)
			cm := m.(*cudaModel)
			ci := inst.(*instance)
			st := cm.stem.in
			rt := cm.dev.rt
			// Convert only, then read what the first convolution reads.
			in, err := cm.dev.Alloc(len(x) * 4)
			if err != nil {
				t.Fatal(err)
			}
			defer in.Free()
			if err := rt.MemcpyHtoD(in.(*buffer).ptr, tensor.F32Bytes(x)); err != nil {
				t.Fatal(err)
			}
			if err := ci.enqueueInput(in.(*buffer).ptr, n); err != nil {
				t.Fatal(err)
			}
			if err := rt.StreamSynchronize(ci.stream); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, n*st.Elements()*2)
			if err := rt.MemcpyDtoH(buf, ci.ptr(0)); err != nil {
				t.Fatal(err)
			}
			bad, first := 0, ""
			for b := 0; b < n; b++ {
				for y := 0; y < st.H; y++ {
					for xx := 0; xx < st.W; xx++ {
						for k := 0; k < st.C; k++ {
							var want float32
							ch, iy, ix := k, y, xx
							if cm.stem.s2d {
								q := k / 3
								ch, iy, ix = k%3, 2*y+q/2-cm.graph.Nodes[0].Conv.Pad, 2*xx+q%2-cm.graph.Nodes[0].Conv.Pad
								if k >= 12 {
									ch = 99
								}
							}
							if ch < 3 && iy >= 0 && iy < h && ix >= 0 && ix < w {
								want = tensor.F16ToFloat32(tensor.Float32ToF16(x[((b*3+ch)*h+iy)*w+ix]))
							}
							idx := ((b*st.H+y)*st.W+xx)*st.C + k
							gotv := tensor.F16ToFloat32(uint16(buf[2*idx]) | uint16(buf[2*idx+1])<<8)
							if gotv != want {
								if bad == 0 {
									first = fmt.Sprintf("(%d,%d,%d,%d): %v, want %v", b, y, xx, k, gotv, want)
								}
								bad++
							}
						}
					}
				}
			}
			// The first convolution alone, against float64 on the host.
			p := ci.plans[n]
			o := p.ops[0]
			if err := ci.runOp(o); err != nil {
				t.Fatal(err)
			}
			if err := rt.StreamSynchronize(ci.stream); err != nil {
				t.Fatal(err)
			}
			od := o.l.out
			yb := make([]byte, n*od.Elements()*2)
			if err := rt.MemcpyDtoH(yb, o.y); err != nil {
				t.Fatal(err)
			}
			fg := cm.graph
			c := fg.Nodes[0].Conv
			refConv := make([]float64, n*od.Elements()) // NHWC, before bias and relu
			for b := 0; b < n; b++ {
				for oc := 0; oc < od.C; oc++ {
					for oy := 0; oy < od.H; oy++ {
						for ox := 0; ox < od.W; ox++ {
							var acc float64
							for ch := 0; ch < 3; ch++ {
								for ky := 0; ky < c.K; ky++ {
									for kx := 0; kx < c.K; kx++ {
										iy, ix := oy*c.Stride-c.Pad+ky, ox*c.Stride-c.Pad+kx
										if iy >= 0 && iy < h && ix >= 0 && ix < w {
											acc += float64(c.Weight[((oc*3+ch)*c.K+ky)*c.K+kx]) * float64(x[((b*3+ch)*h+iy)*w+ix])
										}
									}
								}
							}
							refConv[((b*od.H+oy)*od.W+ox)*od.C+oc] = acc
						}
					}
				}
			}
			// The fused convolution: bias and relu on top.
			compare := func(yb []byte) float64 {
				var maxd, maxr float64
				for idx, acc := range refConv {
					acc += float64(c.Bias[idx%od.C])
					if c.ReLU && acc < 0 {
						acc = 0
					}
					gv := float64(tensor.F16ToFloat32(uint16(yb[2*idx]) | uint16(yb[2*idx+1])<<8))
					maxd = math.Max(maxd, math.Abs(gv-acc))
					maxr = math.Max(maxr, math.Abs(acc))
				}
				return maxd / maxr
			}
			rel := compare(yb)
			t.Logf("stem %s: first conv (%s, fused %v, k %d stride %d pad %d, in %v) rel err %.2e", mode, cu.ConvFwdAlgoName(o.algo), o.fused, o.l.k, o.l.stride, o.l.pad, o.l.in, rel)
			if rel > 2e-2 {
				t.Errorf("stem %s: first convolution wrong", mode)
			}
			t.Logf("stem %s: input %v, logits rel err vs fp32 %.2e; %d stored input values wrong (first %s)", mode, st, e, bad, first)
			if bad > 0 || !(e <= 2e-2) {
				t.Errorf("stem %s broken", mode)
			}
		})
	}
}
