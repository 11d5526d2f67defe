package cuda

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"goinfer/internal/engine"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

var graphs sync.Map // arch name -> *model.Graph; building one takes seconds

// resnet returns a seeded random graph of a known architecture. Tests must
// not modify it.
func resnet(t *testing.T, name string) *model.Graph {
	t.Helper()
	if g, ok := graphs.Load(name); ok {
		return g.(*model.Graph)
	}
	a, err := model.KnownArch(name, 10)
	if err != nil {
		t.Fatal(err)
	}
	sd, err := model.Init(context.Background(), a, 1)
	if err != nil {
		t.Fatal(err)
	}
	g, err := model.FromStateDict(sd)
	if err != nil {
		t.Fatal(err)
	}
	graphs.Store(name, g)
	return g
}

func TestLowerEagerAndFused(t *testing.T) {
	g := resnet(t, "resnet18")
	eager, err := lower(g)
	if err != nil {
		t.Fatal(err)
	}
	count := map[opKind]int{}
	for _, s := range eager {
		count[s.kind]++
	}
	// torchvision ResNet-18: 20 convolutions (17 + 3 downsamples), a batch
	// norm after each, 17 relus, 8 residual adds.
	want := map[opKind]int{opConv: 20, opScale: 20, opReLU: 17, opAdd: 8, opMaxPool: 1, opAvgPool: 1, opLinear: 1}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("eager: %d %v ops, want %d", count[k], k, n)
		}
	}
	f, err := model.Fuse(g)
	if err != nil {
		t.Fatal(err)
	}
	fused, err := lower(f)
	if err != nil {
		t.Fatal(err)
	}
	var convs, residual, relu, bias int
	for _, s := range fused {
		switch s.kind {
		case opConv:
			convs++
			if s.residual {
				residual++
				if len(s.in) != 2 {
					t.Errorf("residual conv %d has %d inputs", s.node, len(s.in))
				}
			}
			if s.relu {
				relu++
			}
			if s.bias {
				bias++
			}
		case opScale, opReLU, opAdd:
			t.Errorf("fused graph still has a %v op (node %d)", s.kind, s.node)
		}
	}
	// Every conv carries its folded batch norm as bias; 8 take the
	// residual; all but the 3 downsamples end in relu.
	if convs != 20 || bias != 20 || residual != 8 || relu != 17 {
		t.Errorf("fused: %d convs, %d with bias, %d residual, %d relu; want 20, 20, 8, 17", convs, bias, residual, relu)
	}
}

func TestLowerRejectsUnsupportedGraphs(t *testing.T) {
	g := resnet(t, "resnet18")
	bad := *g
	bad.Nodes = bad.Nodes[:len(bad.Nodes)-1] // no linear at the end
	if _, err := lower(&bad); err == nil || !strings.Contains(err.Error(), "linear") {
		t.Errorf("graph without a final linear: error %v, want one naming the linear layer", err)
	}
	odd := *g
	odd.Nodes = append([]*model.Node(nil), g.Nodes...)
	n := *odd.Nodes[3]
	n.Op = model.Op(99)
	odd.Nodes[3] = &n
	if _, err := lower(&odd); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("unknown op: error %v, want 'not supported'", err)
	}
}

// TestPlanSlotsLiveness checks that no two values alive at the same time
// share a buffer, that every buffer is large enough, and that reuse keeps
// ResNet-18's activations to a few buffers.
func TestPlanSlotsLiveness(t *testing.T) {
	for _, compile := range []bool{false, true} {
		g := resnet(t, "resnet18")
		if compile {
			var err error
			if g, err = model.Fuse(g); err != nil {
				t.Fatal(err)
			}
		}
		ops, err := lower(g)
		if err != nil {
			t.Fatal(err)
		}
		shapes, err := g.Shapes(224, 224)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := precisionOf(engine.FP16)
		size := func(v model.Value) int64 { return tensorBytes(256, shapes[v], p) }
		sp := planSlots(g, ops, size)
		last := g.LastUse()
		def := make([]int, g.NumValues) // defining op index (value 0: -1)
		def[0] = -1
		for _, s := range ops {
			def[s.out] = s.node
		}
		for v := 0; v < g.NumValues; v++ {
			if sp.valSlot[v] < 0 {
				if model.Value(v) != g.Output {
					t.Errorf("compile=%v: value %d has no buffer", compile, v)
				}
				continue
			}
			if sp.sizes[sp.valSlot[v]] < size(model.Value(v)) {
				t.Errorf("compile=%v: value %d needs %d bytes, its buffer has %d", compile, v, size(model.Value(v)), sp.sizes[sp.valSlot[v]])
			}
			for u := v + 1; u < g.NumValues; u++ {
				if sp.valSlot[u] != sp.valSlot[v] {
					continue
				}
				// Sharing is fine when one dies no later than the
				// other is written (in place: the writer reads it).
				if !(last[v] <= def[u] || last[u] <= def[v]) {
					t.Errorf("compile=%v: values %d (ops %d..%d) and %d (ops %d..%d) share buffer %d", compile, v, def[v], last[v], u, def[u], last[u], sp.valSlot[v])
				}
			}
		}
		if len(sp.sizes) > 5 {
			t.Errorf("compile=%v: %d buffers, want at most 5 with liveness reuse", compile, len(sp.sizes))
		}
		var total int64
		for _, s := range sp.sizes {
			total += s
		}
		if total > 2<<30 {
			t.Errorf("compile=%v: activations at batch 256 fp16 take %d bytes, want under 2 GiB", compile, total)
		}
	}
}

func TestPlanStem(t *testing.T) {
	g := resnet(t, "resnet18")
	shapes, err := g.Shapes(224, 224)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		nhwc    bool
		mode    string
		in      model.Dims
		k, s, p int
		s2d     bool
	}{
		{true, stemS2D, model.Dims{C: 16, H: 115, W: 115}, 4, 1, 0, true},
		{true, stemPad, model.Dims{C: 8, H: 224, W: 224}, 7, 2, 3, false},
		{true, stemNone, model.Dims{C: 3, H: 224, W: 224}, 7, 2, 3, false},
		{false, stemS2D, model.Dims{C: 3, H: 224, W: 224}, 7, 2, 3, false},
	} {
		st := planStem(g, shapes, c.nhwc, c.mode, 8)
		if st.node != 0 || st.in != c.in || st.k != c.k || st.stride != c.s || st.pad != c.p || st.s2d != c.s2d || (st.s2d && st.s2dPad != 3) {
			t.Errorf("nhwc=%v mode=%s: %+v, want input %v, k %d stride %d pad %d s2d %v", c.nhwc, c.mode, st, c.in, c.k, c.s, c.p, c.s2d)
		}
	}
}

// TestSpaceToDepthArithmetic checks that the space-to-depth stem computes
// the original stride-2 convolution: the input rearranged as the convert
// kernel does, convolved stride 1 with s2dWeights, equals the direct
// convolution (PyTorch semantics) on a small odd-sized image.
func TestSpaceToDepthArithmetic(t *testing.T) {
	const cin, cout, k, pad, h, w = 3, 2, 7, 3, 64, 64
	r := rand.New(rand.NewPCG(3, 4))
	c := &model.Conv{InC: cin, OutC: cout, K: k, Stride: 2, Pad: pad, Groups: 1, Weight: make([]float32, cout*cin*k*k)}
	for i := range c.Weight {
		c.Weight[i] = float32(r.NormFloat64())
	}
	x := make([]float32, cin*h*w)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	oh, ow := (h+2*pad-k)/2+1, (w+2*pad-k)/2+1
	direct := make([]float64, cout*oh*ow)
	for o := 0; o < cout; o++ {
		for y := 0; y < oh; y++ {
			for xx := 0; xx < ow; xx++ {
				var acc float64
				for ch := 0; ch < cin; ch++ {
					for ky := 0; ky < k; ky++ {
						for kx := 0; kx < k; kx++ {
							iy, ix := 2*y-pad+ky, 2*xx-pad+kx
							if iy >= 0 && iy < h && ix >= 0 && ix < w {
								acc += float64(c.Weight[((o*cin+ch)*k+ky)*k+kx]) * float64(x[(ch*h+iy)*w+ix])
							}
						}
					}
				}
				direct[(o*oh+y)*ow+xx] = acc
			}
		}
	}
	// The convert kernel's s2d layout, NHWC with cp channels.
	kd, cp := (k+1)/2, 16
	sh, sw := oh+kd-1, ow+kd-1
	s2d := make([]float32, sh*sw*cp)
	for y := 0; y < sh; y++ {
		for xx := 0; xx < sw; xx++ {
			for py := 0; py < 2; py++ {
				for px := 0; px < 2; px++ {
					iy, ix := 2*y+py-pad, 2*xx+px-pad
					for ch := 0; ch < cin; ch++ {
						if iy >= 0 && iy < h && ix >= 0 && ix < w {
							s2d[(y*sw+xx)*cp+(py*2+px)*cin+ch] = x[(ch*h+iy)*w+ix]
						}
					}
				}
			}
		}
	}
	p32, _ := precisionOf(engine.FP32)
	wt := tensor.BytesF32(s2dWeights(c, cp, p32)) // KRSC [cout, kd, kd, cp]
	for o := 0; o < cout; o++ {
		for y := 0; y < oh; y++ {
			for xx := 0; xx < ow; xx++ {
				var acc float64
				for dy := 0; dy < kd; dy++ {
					for dx := 0; dx < kd; dx++ {
						for ch := 0; ch < cp; ch++ {
							acc += float64(wt[((o*kd+dy)*kd+dx)*cp+ch]) * float64(s2d[((y+dy)*sw+xx+dx)*cp+ch])
						}
					}
				}
				if d := math.Abs(acc - direct[(o*oh+y)*ow+xx]); d > 1e-4 {
					t.Fatalf("output (%d, %d, %d): space to depth %v, direct %v", o, y, xx, acc, direct[(o*oh+y)*ow+xx])
				}
			}
		}
	}
}

func TestVecOK(t *testing.T) {
	p16, _ := precisionOf(engine.FP16)
	p32, _ := precisionOf(engine.FP32)
	for _, c := range []struct {
		n      int64
		c, div int
		p      precision
		want   int
	}{
		{256 * 64 * 56 * 56, 64, 1, p16, 1},
		{3 * 3 * 5, 3, 1, p16, 0},
		{2 * 512 * 49, 512, 49, p32, 0}, // a 7x7 NCHW plane is not a multiple of 4
		{2 * 64 * 56 * 56, 64, 56 * 56, p32, 1},
	} {
		if got := vecOK(c.n, c.c, c.div, c.p); got != c.want {
			t.Errorf("vecOK(%d, %d, %d, %s) = %d, want %d", c.n, c.c, c.div, c.p.p, got, c.want)
		}
	}
}

func TestConvWeightsLayout(t *testing.T) {
	// K=2, C=3, 2x2 window; weight value encodes its (k, c, y, x).
	c := &model.Conv{InC: 3, OutC: 2, K: 2, Stride: 1, Groups: 1, Weight: make([]float32, 2*3*2*2)}
	for k := 0; k < 2; k++ {
		for ch := 0; ch < 3; ch++ {
			for y := 0; y < 2; y++ {
				for x := 0; x < 2; x++ {
					c.Weight[((k*3+ch)*2+y)*2+x] = float32(1000*k + 100*ch + 10*y + x + 1)
				}
			}
		}
	}
	p32, _ := precisionOf(engine.FP32)
	nchw := tensor.BytesF32(convWeights(c, 3, p32))
	for i, v := range c.Weight {
		if nchw[i] != v {
			t.Fatalf("NCHW weights reordered at %d: %v vs %v", i, nchw[i], v)
		}
	}
	p16, _ := precisionOf(engine.FP16)
	b := convWeights(c, 8, p16)
	if len(b) != 2*8*2*2*2 {
		t.Fatalf("padded NHWC weights: %d bytes, want %d", len(b), 2*8*2*2*2)
	}
	at := func(k, y, x, ch int) float32 {
		i := ((k*2+y)*2+x)*8 + ch
		return tensor.F16ToFloat32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
	}
	if got := at(1, 1, 0, 2); got != 1211 {
		t.Errorf("KRSC[1,1,0,2] = %v, want 1211", got)
	}
	for ch := 3; ch < 8; ch++ {
		if got := at(0, 0, 1, ch); got != 0 {
			t.Errorf("padding channel %d = %v, want 0", ch, got)
		}
	}
}

func TestLinearWeightsPermutation(t *testing.T) {
	// 2 outputs over a [C=2, H=1, W=2] input flattened NCHW.
	l := &model.Linear{In: 4, Out: 2, Weight: []float32{1, 2, 3, 4, 5, 6, 7, 8}}
	in := model.Dims{C: 2, H: 1, W: 2}
	p32, _ := precisionOf(engine.FP32)
	if got := linearWeights(l, in, p32); got[1] != 2 {
		t.Errorf("NCHW linear weights changed: %v", got)
	}
	pb, _ := precisionOf(engine.BF16)
	got := linearWeights(l, in, pb)
	// NHWC order of row 0: (q0,c0)=1, (q0,c1)=3, (q1,c0)=2, (q1,c1)=4.
	want := []float32{1, 3, 2, 4, 5, 7, 6, 8}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("NHWC linear weights %v, want %v", got, want)
		}
	}
}

func TestInputAffine(t *testing.T) {
	a, err := inputAffine(3)
	if err != nil {
		t.Fatal(err)
	}
	for c := 0; c < 3; c++ {
		for _, px := range []float64{0, 128, 255} {
			want := (px/255 - float64(engine.ImageNetMean[c])) / float64(engine.ImageNetStd[c])
			got := px*float64(a[c]) + float64(a[3+c])
			if math.Abs(got-want) > 1e-5 {
				t.Errorf("channel %d pixel %v: %v, want %v", c, px, got, want)
			}
		}
	}
	if _, err := inputAffine(1); err == nil {
		t.Error("uint8 normalization of a 1-channel model: no error")
	}
}

func TestLaunchDims(t *testing.T) {
	for _, c := range []struct {
		n    int64
		grid int
	}{{1, 1}, {256, 1}, {257, 2}, {1 << 40, 8192}} {
		if g, b := launchDims(c.n); g != c.grid || b != 256 {
			t.Errorf("launchDims(%d) = %d, %d; want %d, 256", c.n, g, b, c.grid)
		}
	}
}

func TestCheckOptions(t *testing.T) {
	for _, c := range []struct {
		o    engine.Options
		want string
	}{
		{engine.Options{MaxBatch: 0, Height: 224, Width: 224}, "MaxBatch"},
		{engine.Options{MaxBatch: 8, Height: 0, Width: 224}, "image size"},
		{engine.Options{MaxBatch: 8, Height: 224, Width: 224, BatchSizes: []int{16}}, "outside 1..MaxBatch"},
	} {
		if err := checkOptions(&c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.o, err, c.want)
		}
	}
	o := engine.Options{MaxBatch: 8, Height: 224, Width: 224}
	if err := checkOptions(&o); err != nil || o.InputDType != tensor.Float32 || len(o.BatchSizes) != 1 || o.BatchSizes[0] != 8 {
		t.Errorf("defaults: %v, %+v", err, o)
	}
}

func TestUnavailableWithoutGPU(t *testing.T) {
	err := Engine{}.Available()
	if err == nil {
		t.Skip("a GPU and its libraries are here")
	}
	g := resnet(t, "resnet18")
	_, lerr := Engine{}.Load(context.Background(), g, engine.Options{MaxBatch: 1, Height: 224, Width: 224})
	if lerr == nil {
		t.Fatal("Load succeeded without a GPU")
	}
	if !strings.Contains(lerr.Error(), "cuda engine") {
		t.Errorf("Load error %q does not say which engine failed", lerr)
	}
}

func TestStemOptions(t *testing.T) {
	for _, c := range []struct {
		stem         string
		channels     int
		wantMode     string
		wantChannels int
		wantErr      string
	}{
		{"", 0, stemS2D, 8, ""},
		{"pad", 16, stemPad, 16, ""},
		{"none", 0, stemNone, 8, ""},
		{"s2d", 4, stemS2D, 4, ""},
		{"crop", 0, "", 0, `stem "crop" is not one of`},
		{"pad", 17, "", 0, "stem channel count 17 is not between 1 and 16"},
		{"pad", -1, "", 0, "stem channel count -1"},
	} {
		mode, channels, err := stemOptions(engine.Options{Stem: c.stem, StemChannels: c.channels})
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("stem %q channels %d: error %v, want one containing %q", c.stem, c.channels, err, c.wantErr)
			}
			continue
		}
		if err != nil || mode != c.wantMode || channels != c.wantChannels {
			t.Errorf("stem %q channels %d: got %q, %d, %v; want %q, %d", c.stem, c.channels, mode, channels, err, c.wantMode, c.wantChannels)
		}
	}
}
