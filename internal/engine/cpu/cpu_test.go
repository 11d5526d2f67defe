package cpu

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"goinfer/internal/checkpoint"
	"goinfer/internal/engine"
	"goinfer/internal/leakcheck"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

func narrowGraph(t testing.TB, a model.Arch, seed uint64) *model.Graph {
	t.Helper()
	sd, err := model.Init(context.Background(), a, seed)
	if err != nil {
		t.Fatal(err)
	}
	g, err := model.FromStateDict(sd)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func randInput(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// relErr is max|got-ref| / max|ref|.
func relErr(got []float32, ref []float64) float64 {
	var d, m float64
	for i := range ref {
		d = math.Max(d, math.Abs(float64(got[i])-ref[i]))
		m = math.Max(m, math.Abs(ref[i]))
	}
	return d / m
}

// forward loads g, runs one forward of n images of raw input bytes and
// returns the logits.
func forward(t testing.TB, g *model.Graph, opts engine.Options, raw []byte, n int) []float32 {
	t.Helper()
	ctx := context.Background()
	m, err := Engine{}.Load(ctx, g, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	inst, err := m.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	return runInstance(t, m, inst, raw, n)
}

func runInstance(t testing.TB, m engine.Model, inst engine.Instance, raw []byte, n int) []float32 {
	t.Helper()
	info := m.Info()
	dev := m.Device()
	in, err := dev.Alloc(info.MaxBatch * info.InputBytes())
	if err != nil {
		t.Fatal(err)
	}
	out, err := dev.Alloc(info.MaxBatch * info.OutputBytes())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Free()
	defer out.Free()
	s := inst.Stream()
	if err := s.CopyToDevice(in, 0, raw); err != nil {
		t.Fatal(err)
	}
	if err := inst.Forward(in, out, n); err != nil {
		t.Fatal(err)
	}
	logits := make([]float32, n*info.OutputElems())
	if err := s.CopyToHost(tensor.F32Bytes(logits), out, 0); err != nil {
		t.Fatal(err)
	}
	return logits
}

func TestMatchesReference(t *testing.T) {
	ctx := context.Background()
	archs := []model.Arch{
		model.NewArch(model.Basic, []int{2, 1, 2, 1}, 8, 10, 1, 64),
		model.NewArch(model.Bottleneck, []int{1, 2, 1, 1}, 8, 7, 1, 64),
		model.NewArch(model.Bottleneck, []int{1, 1, 2, 1}, 8, 5, 2, 64), // groups=2
	}
	sizes := []struct{ h, w int }{{45, 37}, {32, 32}}
	for ai, a := range archs {
		g := narrowGraph(t, a, uint64(ai+1))
		for _, sz := range sizes {
			for _, n := range []int{1, 3} {
				x := randInput(uint64(10*ai+n), n*3*sz.h*sz.w)
				ref, err := g.Reference(ctx, x, n, sz.h, sz.w)
				if err != nil {
					t.Fatal(err)
				}
				for _, compile := range []bool{false, true} {
					for _, threads := range []int{1, 3} {
						opts := engine.Options{Compile: compile, MaxBatch: 4, Height: sz.h, Width: sz.w, Threads: threads}
						got := forward(t, g, opts, tensor.F32Bytes(x), n)
						if e := relErr(got, ref); e > 1e-4 || math.IsNaN(e) {
							t.Errorf("%s %dx%d n=%d compile=%v threads=%d: rel err %.3g", a.Name(), sz.h, sz.w, n, compile, threads, e)
						}
					}
				}
			}
		}
	}
}

func TestInputDTypes(t *testing.T) {
	ctx := context.Background()
	g := narrowGraph(t, model.NewArch(model.Basic, []int{1, 1, 1, 1}, 8, 10, 1, 64), 5)
	const n, h, w = 2, 33, 40
	r := rand.New(rand.NewPCG(9, 9))
	pix := make([]byte, n*3*h*w)
	for i := range pix {
		pix[i] = byte(r.IntN(256))
	}
	// The normalization torchvision applies: x/255, then (x-mean)/std.
	norm := make([]float32, len(pix))
	for i, p := range pix {
		c := (i / (h * w)) % 3
		norm[i] = (float32(p)/255 - engine.ImageNetMean[c]) / engine.ImageNetStd[c]
	}
	halfs := make([]byte, 2*len(norm))
	asHalf := make([]float32, len(norm))
	for i, v := range norm {
		b := tensor.Float32ToF16(v)
		halfs[2*i], halfs[2*i+1] = byte(b), byte(b>>8)
		asHalf[i] = tensor.F16ToFloat32(b)
	}
	tests := []struct {
		dt  tensor.DType
		raw []byte
		x   []float32 // what the network should see
	}{
		{tensor.Uint8, pix, norm},
		{tensor.Float16, halfs, asHalf},
		{tensor.Float32, tensor.F32Bytes(norm), norm},
	}
	for _, tt := range tests {
		ref, err := g.Reference(ctx, tt.x, n, h, w)
		if err != nil {
			t.Fatal(err)
		}
		for _, compile := range []bool{false, true} {
			opts := engine.Options{Compile: compile, MaxBatch: n, Height: h, Width: w, InputDType: tt.dt}
			got := forward(t, g, opts, tt.raw, n)
			if e := relErr(got, ref); e > 1e-4 {
				t.Errorf("%s input compile=%v: rel err %.3g", tt.dt, compile, e)
			}
		}
	}
}

type goldenCase struct {
	Name  string            `json:"name"`
	Files map[string]string `json:"files"`
	Cases []struct {
		Input     string `json:"input"`
		Reference string `json:"reference"`
	} `json:"cases"`
}

func loadF32(t *testing.T, path string) (*tensor.Tensor, []float32) {
	t.Helper()
	tn, err := tensor.LoadNPY(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := tn.ToFloat32()
	if err != nil {
		t.Fatal(err)
	}
	return tn, v
}

// TestGolden runs the checkpoints PyTorch saved (tools/golden) on the inputs
// it saved and compares with its float64 logits.
func TestGolden(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "testdata", "golden")
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest []goldenCase
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, gc := range manifest {
		for format, file := range gc.Files {
			sd, err := checkpoint.Load(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			g, err := model.FromStateDict(sd)
			sd.Close()
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			for _, c := range gc.Cases {
				xt, x := loadF32(t, filepath.Join(dir, c.Input))
				_, ref32 := loadF32(t, filepath.Join(dir, c.Reference))
				ref := make([]float64, len(ref32))
				rt, _ := tensor.LoadNPY(filepath.Join(dir, c.Reference))
				if rt.DType == tensor.Float64 {
					for i := range ref {
						ref[i] = math.Float64frombits(leU64(rt.Data[8*i:]))
					}
				} else {
					for i, v := range ref32 {
						ref[i] = float64(v)
					}
				}
				if len(xt.Shape) != 4 {
					t.Fatalf("%s: input shape %v, want NCHW", c.Input, xt.Shape)
				}
				n, h, w := xt.Shape[0], xt.Shape[2], xt.Shape[3]
				for _, compile := range []bool{false, true} {
					opts := engine.Options{Compile: compile, MaxBatch: n, Height: h, Width: w}
					got := forward(t, g, opts, tensor.F32Bytes(x), n)
					if e := relErr(got, ref); e > 1e-4 || math.IsNaN(e) {
						t.Errorf("%s (%s) %s compile=%v: rel err %.3g", gc.Name, format, c.Input, compile, e)
					}
					ran++
				}
			}
		}
	}
	if ran == 0 {
		t.Fatal("manifest lists no model cases")
	}
}

func leU64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func TestLoadErrors(t *testing.T) {
	g := narrowGraph(t, model.NewArch(model.Basic, []int{1, 1, 1, 1}, 4, 3, 1, 64), 1)
	ok := engine.Options{MaxBatch: 2, Height: 32, Width: 32}
	tests := []struct {
		name   string
		mutate func(o *engine.Options)
		want   string
	}{
		{"tf32", func(o *engine.Options) { o.Precision = engine.TF32 }, "fp32 only"},
		{"fp16", func(o *engine.Options) { o.Precision = engine.FP16 }, "fp32 only"},
		{"bf16", func(o *engine.Options) { o.Precision = engine.BF16 }, "fp32 only"},
		{"maxbatch", func(o *engine.Options) { o.MaxBatch = 0 }, "MaxBatch"},
		{"size", func(o *engine.Options) { o.Height = 0 }, "image size"},
		{"threads", func(o *engine.Options) { o.Threads = -1 }, "Threads"},
		{"dtype", func(o *engine.Options) { o.InputDType = tensor.Int64 }, "input dtype int64"},
		{"batchsizes", func(o *engine.Options) { o.BatchSizes = []int{3} }, "batch size 3"},
	}
	for _, tt := range tests {
		o := ok
		tt.mutate(&o)
		_, err := Engine{}.Load(context.Background(), g, o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to mention %q", tt.name, err, tt.want)
		}
	}
	if _, err := (Engine{}).Load(context.Background(), nil, ok); err == nil {
		t.Error("nil graph: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (Engine{}).Load(ctx, g, ok); err == nil {
		t.Error("cancelled context: no error")
	}
	g4 := narrowGraph(t, model.Arch{Block: model.Basic, InChannels: 4, Stem: 4, StemK: 7, Classes: 3,
		Stages: []model.Stage{{Blocks: 1, Width: 4, Out: 4, Stride: 1, Groups: 1}}}, 1)
	o := ok
	o.InputDType = tensor.Uint8
	if _, err := (Engine{}).Load(context.Background(), g4, o); err == nil || !strings.Contains(err.Error(), "4 channels") {
		t.Errorf("uint8 input to a 4-channel model: error %v", err)
	}
}

func TestForwardErrors(t *testing.T) {
	ctx := context.Background()
	g := narrowGraph(t, model.NewArch(model.Basic, []int{1, 1, 1, 1}, 4, 3, 1, 64), 1)
	m, err := Engine{}.Load(ctx, g, engine.Options{MaxBatch: 2, Height: 32, Width: 32})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info := m.Info()
	dev := m.Device()
	in, _ := dev.Alloc(2 * info.InputBytes())
	out, _ := dev.Alloc(2 * info.OutputBytes())
	small, _ := dev.Alloc(4)
	freed, _ := dev.Alloc(2 * info.InputBytes())
	freed.Free()
	tests := []struct {
		name    string
		in, out engine.Buffer
		n       int
		want    string
	}{
		{"zero", in, out, 0, "batch must be in [1, MaxBatch=2]"},
		{"big", in, out, 3, "batch must be in"},
		{"short input", small, out, 2, "out of range"},
		{"short output", in, small, 2, "out of range"},
		{"freed", freed, out, 1, "freed"},
		{"foreign", struct{ engine.Buffer }{}, out, 1, "not a cpu engine buffer"},
		{"nil", nil, out, 1, "not a cpu engine buffer"},
	}
	for _, tt := range tests {
		if err := inst.Forward(tt.in, tt.out, tt.n); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to mention %q", tt.name, err, tt.want)
		}
	}
	if err := m.Close(); err == nil {
		t.Error("closing a model with an open instance: no error")
	}
	if err := inst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := inst.Forward(in, out, 1); err == nil {
		t.Error("Forward after Close: no error")
	}
	if err := inst.Close(); err == nil {
		t.Error("second Close: no error")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewInstance(ctx); err == nil {
		t.Error("NewInstance on a closed model: no error")
	}
}

func TestInfo(t *testing.T) {
	g := narrowGraph(t, model.NewArch(model.Basic, []int{1, 1, 1, 1}, 4, 3, 1, 64), 1)
	for _, compile := range []bool{false, true} {
		m, err := Engine{}.Load(context.Background(), g, engine.Options{Compile: compile, MaxBatch: 2, Height: 32, Width: 30, Threads: 3, InputDType: tensor.Uint8})
		if err != nil {
			t.Fatal(err)
		}
		i := m.Info()
		in, out := i.Input(), i.Output()
		if i.Engine != "cpu" || i.Device != "cpu (3 threads)" || in.Name != "input" || fmt.Sprint(in.Shape) != "[3 32 30]" ||
			in.DType != tensor.Uint8 || out.Name != "logits" || fmt.Sprint(out.Shape) != "[3]" || out.DType != tensor.Float32 || i.Compiled != compile ||
			i.MaxBatch != 2 || i.WeightBytes <= 0 || i.Precision != engine.FP32 {
			t.Errorf("compile=%v: Info %+v", compile, i)
		}
		if (i.CompileTime > 0) != compile {
			t.Errorf("compile=%v: CompileTime %v", compile, i.CompileTime)
		}
		if i.InputBytes() != 3*32*30 {
			t.Errorf("InputBytes %d", i.InputBytes())
		}
		m.Close()
	}
}

func TestRegistered(t *testing.T) {
	e, err := engine.Get("cpu")
	if err != nil {
		t.Fatal(err)
	}
	if e.Name() != "cpu" || e.Available() != nil {
		t.Fatalf("registered engine %q, Available %v", e.Name(), e.Available())
	}
}

// TestConcurrentInstances runs several instances of one model at once, each
// on its own input, and checks each gets what it gets alone.
func TestConcurrentInstances(t *testing.T) {
	ctx := context.Background()
	g := narrowGraph(t, model.NewArch(model.Basic, []int{1, 1, 1, 1}, 8, 10, 1, 64), 3)
	const h, w, n = 40, 40, 2
	m, err := Engine{}.Load(ctx, g, engine.Options{Compile: true, MaxBatch: n, Height: h, Width: w, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const workers = 4
	want := make([][]float32, workers)
	inputs := make([][]float32, workers)
	for i := range inputs {
		inputs[i] = randInput(uint64(100+i), n*3*h*w)
		inst, err := m.NewInstance(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = runInstance(t, m, inst, tensor.F32Bytes(inputs[i]), n)
		inst.Close()
	}
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for i := 0; i < workers; i++ {
		inst, err := m.NewInstance(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inst.Close()
			for rep := 0; rep < 3; rep++ {
				got := runInstance(t, m, inst, tensor.F32Bytes(inputs[i]), n)
				for k := range got {
					if got[k] != want[i][k] {
						errs <- "instance result differs when run concurrently"
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// TestNoGoroutineLeak checks that instances start their worker threads
// and that closing them and the model stops every one.
func TestNoGoroutineLeak(t *testing.T) {
	leakcheck.Check(t)
	ctx := context.Background()
	g := narrowGraph(t, model.NewArch(model.Basic, []int{1, 1, 1, 1}, 4, 3, 1, 64), 1)
	const pkg = "goinfer/internal/engine/cpu" // and its subpackages: the pool lives in cpu/parallel
	before := leakcheck.Count(pkg)
	m, err := Engine{}.Load(ctx, g, engine.Options{MaxBatch: 1, Height: 32, Width: 32, Threads: 8})
	if err != nil {
		t.Fatal(err)
	}
	var insts []engine.Instance
	for range 3 {
		inst, err := m.NewInstance(ctx)
		if err != nil {
			t.Fatal(err)
		}
		insts = append(insts, inst)
	}
	if got := leakcheck.Count(pkg); got < before+3*7 {
		t.Fatalf("%d goroutines of the cpu engine with 3 instances of 8 threads, %d before", got, before)
	}
	for _, inst := range insts {
		if err := inst.Close(); err != nil {
			t.Fatal(err)
		}
	}
	m.Close()
	// Close waits for its workers to exit, so none of this engine's is
	// left; other tests of the package running meanwhile may hold a few of
	// their own for a moment, so the count is polled for a while before it
	// fails. The cleanup of leakcheck.Check covers the rest of the process.
	deadline := time.Now().Add(3 * time.Second)
	for got := leakcheck.Count(pkg); got > before; got = leakcheck.Count(pkg) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the cpu engine 3 s after Close, %d before", got, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestForwardDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	g := narrowGraph(t, model.NewArch(model.Bottleneck, []int{1, 1, 1, 1}, 8, 10, 2, 64), 1)
	for _, compile := range []bool{false, true} {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Uint8} {
			m, err := Engine{}.Load(ctx, g, engine.Options{Compile: compile, MaxBatch: 2, Height: 40, Width: 40, Threads: 2, InputDType: dt})
			if err != nil {
				t.Fatal(err)
			}
			inst, _ := m.NewInstance(ctx)
			in, _ := m.Device().Alloc(2 * m.Info().InputBytes())
			out, _ := m.Device().Alloc(2 * m.Info().OutputBytes())
			allocs := testing.AllocsPerRun(5, func() {
				if err := inst.Forward(in, out, 2); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("compile=%v %s: Forward allocates %v times per call", compile, dt, allocs)
			}
			inst.Close()
			m.Close()
		}
	}
}

func TestDevice(t *testing.T) {
	dev := device{}
	b, err := dev.Alloc(10)
	if err != nil {
		t.Fatal(err)
	}
	h, err := dev.AllocHost(4)
	if err != nil {
		t.Fatal(err)
	}
	copy(h.Bytes(), "abcd")
	s, _ := dev.NewStream()
	if err := s.CopyToDevice(b, 6, h.Bytes()); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 3)
	if err := s.CopyToHost(dst, b, 7); err != nil || string(dst) != "bcd" {
		t.Fatalf("CopyToHost: %q, %v", dst, err)
	}
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"copy past end", s.CopyToDevice(b, 7, h.Bytes())},
		{"negative offset", s.CopyToDevice(b, -1, h.Bytes())},
		{"read past end", s.CopyToHost(make([]byte, 4), b, 8)},
		{"huge offset", s.CopyToHost(dst, b, math.MaxInt)},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), "out of range") {
			t.Errorf("%s: error %v", tt.name, tt.err)
		}
	}
	if _, err := dev.Alloc(-1); err == nil {
		t.Error("Alloc(-1): no error")
	}
	e0, _ := dev.NewEvent()
	e1, _ := dev.NewEvent()
	if _, err := e1.Since(e0); err == nil {
		t.Error("Since on unrecorded events: no error")
	}
	if err := s.Record(e0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	if err := s.Wait(e0); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(e1); err != nil {
		t.Fatal(err)
	}
	if done, err := e1.Done(); !done || err != nil {
		t.Errorf("Done = %v, %v", done, err)
	}
	if d, err := e1.Since(e0); err != nil || d < 2*time.Millisecond {
		t.Errorf("Since = %v, %v", d, err)
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	if err := b.Free(); err == nil {
		t.Error("double Free: no error")
	}
	if err := s.CopyToDevice(b, 0, nil); err == nil || !strings.Contains(err.Error(), "freed") {
		t.Errorf("copy to freed buffer: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(e0); err == nil {
		t.Error("Record on a closed stream: no error")
	}
}

// TestBatchOverChunks runs a batch bigger than one pass through the network
// takes (microBatch), with every input dtype path.
func TestBatchOverChunks(t *testing.T) {
	ctx := context.Background()
	g := narrowGraph(t, model.NewArch(model.Basic, []int{1, 1, 1, 1}, 4, 6, 1, 64), 11)
	const h, w = 29, 31
	n := 2*microBatch + 3
	x := randInput(5, n*3*h*w)
	ref, err := g.Reference(ctx, x, n, h, w)
	if err != nil {
		t.Fatal(err)
	}
	for _, compile := range []bool{false, true} {
		got := forward(t, g, engine.Options{Compile: compile, MaxBatch: n + 1, Height: h, Width: w}, tensor.F32Bytes(x), n)
		if e := relErr(got, ref); e > 1e-4 {
			t.Errorf("compile=%v: %d images: rel err %.3g", compile, n, e)
		}
	}
	// uint8 input: the conversion must follow the chunks too.
	pix := make([]byte, n*3*h*w)
	norm := make([]float32, len(pix))
	for i := range pix {
		pix[i] = byte(i * 7)
		c := (i / (h * w)) % 3
		norm[i] = (float32(pix[i])/255 - engine.ImageNetMean[c]) / engine.ImageNetStd[c]
	}
	ref, err = g.Reference(ctx, norm, n, h, w)
	if err != nil {
		t.Fatal(err)
	}
	got := forward(t, g, engine.Options{MaxBatch: n, Height: h, Width: w, InputDType: tensor.Uint8}, pix, n)
	if e := relErr(got, ref); e > 1e-4 {
		t.Errorf("uint8: %d images: rel err %.3g", n, e)
	}
}
