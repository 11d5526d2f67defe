package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"goinfer/internal/cputime"
	"goinfer/internal/engine"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

// convGraph is a graph of one convolution whose output is the graph's
// output, so every output pixel is compared, borders included.
func convGraph(c model.Conv, h, w int, seed uint64) (*model.Graph, int) {
	r := rand.New(rand.NewPCG(seed, 3))
	c.Weight = make([]float32, c.OutC*c.InC/c.Groups*c.K*c.K)
	for i := range c.Weight {
		c.Weight[i] = float32(r.NormFloat64())
	}
	if c.Bias != nil {
		for i := range c.Bias {
			c.Bias[i] = float32(r.NormFloat64())
		}
	}
	oh, ow := (h+2*c.Pad-c.K)/c.Stride+1, (w+2*c.Pad-c.K)/c.Stride+1
	g := &model.Graph{NumValues: 2, InChannels: c.InC, Classes: c.OutC * oh * ow, Output: 1,
		Nodes: []*model.Node{{Name: "conv", Op: model.OpConv, Inputs: []model.Value{0}, Output: 1, Conv: &c}}}
	return g, oh * ow
}

func TestConvLayouts(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		c      model.Conv
		h, w   int
		layout convLayout
	}{
		{model.Conv{InC: 5, OutC: 7, K: 3, Stride: 1, Pad: 1, Groups: 1}, 9, 11, layoutShift},
		{model.Conv{InC: 20, OutC: 13, K: 1, Stride: 1, Pad: 0, Groups: 1, ReLU: true}, 7, 5, layoutShift},
		{model.Conv{InC: 4, OutC: 6, K: 3, Stride: 1, Pad: 1, Groups: 2, Bias: make([]float32, 6)}, 17, 19, layoutShift},
		{model.Conv{InC: 3, OutC: 8, K: 7, Stride: 2, Pad: 3, Groups: 1}, 21, 18, layoutPhases},
		{model.Conv{InC: 6, OutC: 9, K: 3, Stride: 2, Pad: 1, Groups: 3}, 15, 16, layoutPhases},
		{model.Conv{InC: 8, OutC: 16, K: 1, Stride: 2, Pad: 0, Groups: 1}, 13, 13, layoutPhases},
		{model.Conv{InC: 4, OutC: 5, K: 3, Stride: 3, Pad: 1, Groups: 1}, 20, 23, layoutPhases},
		// 5 x 45 outputs end in a one-column panel (gemm.KernelCols), over
		// several K-blocks.
		{model.Conv{InC: 300, OutC: 50, K: 3, Stride: 2, Pad: 1, Groups: 1, ReLU: true}, 9, 17, layoutPhases},
		{model.Conv{InC: 5, OutC: 7, K: 3, Stride: 1, Pad: 0, Groups: 1}, 9, 12, layoutGather},
		{model.Conv{InC: 5, OutC: 8, K: 2, Stride: 2, Pad: 0, Groups: 1, ReLU: true}, 9, 11, layoutGather},
		{model.Conv{InC: 3, OutC: 4, K: 5, Stride: 1, Pad: 3, Groups: 1}, 6, 8, layoutGather},
	}
	for i, tt := range tests {
		name := fmt.Sprintf("k%ds%dp%dg%d_%dx%d", tt.c.K, tt.c.Stride, tt.c.Pad, tt.c.Groups, tt.h, tt.w)
		g, _ := convGraph(tt.c, tt.h, tt.w, uint64(i))
		dims, err := g.Shapes(tt.h, tt.w)
		if err != nil {
			t.Fatal(err)
		}
		s, err := newConvStep(g.Nodes[0], dims[0], dims[1], 1)
		if err != nil {
			t.Fatal(err)
		}
		if s.layout != tt.layout {
			t.Errorf("%s: layout %d, want %d", name, s.layout, tt.layout)
		}
		const n = 5 // panels span images
		x := randInput(uint64(i), n*tt.c.InC*tt.h*tt.w)
		ref, err := g.Reference(ctx, x, n, tt.h, tt.w)
		if err != nil {
			t.Fatal(err)
		}
		for _, threads := range []int{1, 2} {
			got := forward(t, g, engine.Options{MaxBatch: n, Height: tt.h, Width: tt.w, Threads: threads}, tensor.F32Bytes(x), n)
			if e := relErr(got, ref); e > 1e-5 {
				t.Errorf("%s threads=%d: rel err %.3g", name, threads, e)
			}
		}
	}
}

// BenchmarkConv measures single convolutions shaped like ResNet-18's, one
// thread, batch 1.
func BenchmarkConv(b *testing.B) {
	cases := []struct {
		name string
		c    model.Conv
		hw   int
	}{
		{"conv1", model.Conv{InC: 3, OutC: 64, K: 7, Stride: 2, Pad: 3, Groups: 1}, 224},
		{"layer1", model.Conv{InC: 64, OutC: 64, K: 3, Stride: 1, Pad: 1, Groups: 1}, 56},
		{"layer2.0.conv1", model.Conv{InC: 64, OutC: 128, K: 3, Stride: 2, Pad: 1, Groups: 1}, 56},
		{"layer2", model.Conv{InC: 128, OutC: 128, K: 3, Stride: 1, Pad: 1, Groups: 1}, 28},
		{"layer3", model.Conv{InC: 256, OutC: 256, K: 3, Stride: 1, Pad: 1, Groups: 1}, 14},
		{"layer4", model.Conv{InC: 512, OutC: 512, K: 3, Stride: 1, Pad: 1, Groups: 1}, 7},
	}
	for _, tc := range cases {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/t%d", tc.name, threads), func(b *testing.B) {
				c := tc.c
				c.Bias, c.ReLU = make([]float32, c.OutC), true
				g, outElems := convGraph(c, tc.hw, tc.hw, 1)
				ctx := context.Background()
				m, err := Engine{}.Load(ctx, g, engine.Options{MaxBatch: 1, Height: tc.hw, Width: tc.hw, Threads: threads})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				inst, _ := m.NewInstance(ctx)
				defer inst.Close()
				in, _ := m.Device().Alloc(m.Info().InputBytes())
				out, _ := m.Device().Alloc(m.Info().OutputBytes())
				macs, _ := g.MACs(tc.hw, tc.hw)
				_ = outElems
				cpu0 := cputime.Process()
				for b.Loop() {
					inst.Forward(in, out, 1)
				}
				flops := 2 * float64(macs) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				if cpu := (cputime.Process() - cpu0).Seconds(); cpu > 0 {
					b.ReportMetric(flops/cpu/1e9, "GFLOP/cpu-s")
				}
			})
		}
	}
}

func TestMaxPool(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		p    model.Pool
		h, w int
	}{
		{model.Pool{K: 3, Stride: 2, Pad: 1}, 13, 10},
		{model.Pool{K: 2, Stride: 2, Pad: 0}, 9, 8},
		{model.Pool{K: 3, Stride: 1, Pad: 1}, 5, 7},
		{model.Pool{K: 5, Stride: 3, Pad: 2}, 11, 12},
		{model.Pool{K: 1, Stride: 1, Pad: 0}, 3, 3},
		// Wide enough for the vector kernels' 8-wide blocks and a tail.
		{model.Pool{K: 3, Stride: 2, Pad: 1}, 23, 37},
		{model.Pool{K: 2, Stride: 1, Pad: 1}, 7, 19},
		{model.Pool{K: 5, Stride: 2, Pad: 2}, 17, 33},
		{model.Pool{K: 3, Stride: 3, Pad: 0}, 9, 50},
	}
	for _, tt := range tests {
		const c, n = 3, 2
		oh, ow := (tt.h+2*tt.p.Pad-tt.p.K)/tt.p.Stride+1, (tt.w+2*tt.p.Pad-tt.p.K)/tt.p.Stride+1
		p := tt.p
		g := &model.Graph{NumValues: 2, InChannels: c, Classes: c * oh * ow, Output: 1,
			Nodes: []*model.Node{{Name: "pool", Op: model.OpMaxPool, Inputs: []model.Value{0}, Output: 1, Pool: &p}}}
		x := randInput(1, n*c*tt.h*tt.w)
		ref, err := g.Reference(ctx, x, n, tt.h, tt.w)
		if err != nil {
			t.Fatal(err)
		}
		got := forward(t, g, engine.Options{MaxBatch: n, Height: tt.h, Width: tt.w}, tensor.F32Bytes(x), n)
		if e := relErr(got, ref); e != 0 {
			t.Errorf("%+v on %dx%d: rel err %g", tt.p, tt.h, tt.w, e)
		}
	}
}

// TestSharedPacking covers the mode where several tasks split one N range
// by output channels and share a single packing of B.
func TestSharedPacking(t *testing.T) {
	ctx := context.Background()
	c := model.Conv{InC: 16, OutC: 96, K: 3, Stride: 2, Pad: 1, Groups: 2, Bias: make([]float32, 96), ReLU: true}
	const h, w = 9, 10
	g, _ := convGraph(c, h, w, 4)
	for _, n := range []int{1, 2} {
		x := randInput(3, n*c.InC*h*w)
		ref, err := g.Reference(ctx, x, n, h, w)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Engine{}.Load(ctx, g, engine.Options{MaxBatch: n, Height: h, Width: w, Threads: 4})
		if err != nil {
			t.Fatal(err)
		}
		inst, _ := m.NewInstance(ctx)
		got := runInstance(t, m, inst, tensor.F32Bytes(x), n)
		if inst.(*instance).conv.shared == nil {
			t.Errorf("n=%d: B was not packed once for all tasks", n)
		}
		if e := relErr(got, ref); e > 1e-5 {
			t.Errorf("n=%d: rel err %.3g", n, e)
		}
		inst.Close()
		m.Close()
	}
}

// TestSharePhases checks that a ResNet's downsamples read the phases their
// block's first convolution split, and nothing else does.
func TestSharePhases(t *testing.T) {
	g := narrowGraph(t, model.NewArch(model.Basic, []int{1, 1, 1, 1}, 8, 10, 1, 64), 3)
	for _, compile := range []bool{false, true} {
		fg := g
		if compile {
			var err error
			if fg, err = model.Fuse(g); err != nil {
				t.Fatal(err)
			}
		}
		p, err := newPlan(context.Background(), fg, engine.Options{Compile: compile, MaxBatch: 2, Height: 56, Width: 56, Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		shared := 0
		for i, st := range p.steps {
			s, ok := st.(*convStep)
			if !ok {
				continue
			}
			want := strings.Contains(p.names[i], "downsample")
			if s.reusePhases != want {
				t.Errorf("compile %v: %s (%s): shares phases %v, want %v", compile, p.names[i], s.describe(), s.reusePhases, want)
			}
			if s.reusePhases {
				shared++
			}
		}
		if shared != 3 {
			t.Errorf("compile %v: %d downsamples share phases, want 3", compile, shared)
		}
	}
}
