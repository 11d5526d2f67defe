package imagegpu_test

import (
	"context"
	"os"
	"testing"
	"time"

	"goinfer/internal/backend"
	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/engine/cuda"
	"goinfer/internal/imagegpu"
	"goinfer/internal/model"
	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
	"goinfer/internal/topk"
)

// TestBackendDecodesOnGPU runs encoded photographs through the backend's
// pipeline on the cuda engine with nvJPEG decoders on its copy stream, and
// compares the logits with a tensor request of the CPU preprocessing of
// the same files: max|gpu-cpu|/max|cpu| <= 1e-2 (JPEG decoders differ in
// rounding), top-1 identical. A bad image fails alone.
func TestBackendDecodesOnGPU(t *testing.T) {
	if err := cu.Usable(); err != nil {
		t.Skipf("no CUDA GPU/libraries (the GPU decode stage is tested on the GPU machine): %v", err)
	}
	if _, _, err := cu.OpenJPEG(); err != nil {
		t.Skipf("nvJPEG not found: %v", err)
	}
	libs, err := cu.Load()
	if err != nil {
		t.Fatal(err)
	}
	var photos [][]byte
	for _, f := range []string{"astronaut.jpg", "coffee.jpg", "camera_gray.jpg", "rocket_progressive.jpg", "chelsea_cmyk.jpg", "coffee_alpha.png"} {
		b, err := os.ReadFile("../../testdata/photos/" + f)
		if err != nil {
			t.Fatal(err)
		}
		photos = append(photos, b)
	}
	n := len(photos)
	a := model.NewArch(model.Basic, []int{1, 1, 1, 1}, 16, 10, 1, 64)
	sd, err := model.Init(context.Background(), a, 5)
	if err != nil {
		t.Fatal(err)
	}
	g, err := model.FromStateDict(sd)
	if err != nil {
		t.Fatal(err)
	}
	spec := preprocess.ImageNet(224, 224)
	ks, err := imagegpu.SpecFor(spec)
	if err != nil {
		t.Fatal(err)
	}
	b := backend.New(backend.Config{NumWorkers: 2, CopyStreams: true, MaxBatch: 8,
		NewDecoder: func(_ int, _ engine.Device, info engine.Info) (backend.Decoder, error) {
			return imagegpu.New(libs, imagegpu.Options{MaxBatch: 8, Spec: ks, Out: info.Input().DType})
		},
		NewPostprocessor: func(device int, _ engine.Device, _ engine.Info) (backend.Postprocessor, error) {
			return imagegpu.NewRanker(libs, device)
		}})
	err = b.Start(context.Background(), func(ctx context.Context) (engine.Model, error) {
		return cuda.Engine{}.Load(ctx, g, engine.Options{MaxBatch: 8, Height: 224, Width: 224, InputDType: tensor.Float32})
	})
	if err != nil {
		t.Fatal(err)
	}
	<-b.Ready()
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())

	cpu, err := preprocess.NewCPU(spec, preprocess.CPUOptions{})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]byte, n*3*224*224*4)
	for i, err := range cpu.Preprocess(context.Background(), photos, tensor.Float32, x) {
		if err != nil {
			t.Fatalf("CPU, image %d: %v", i, err)
		}
	}
	shape := tensor.Shape{n, 3, 224, 224}
	reply := make(chan backend.Response, 3)
	b.Submit(backend.Request{ID: 1, Input: &tensor.Tensor{DType: tensor.Float32, Shape: shape, Data: x}, SentAt: time.Now(), Reply: reply})
	want := <-reply
	if want.Err != nil {
		t.Fatal(want.Err)
	}
	b.Submit(backend.Request{ID: 2, Input: &tensor.Tensor{DType: tensor.Float32, Shape: shape}, Encoded: photos, SentAt: time.Now(), Reply: reply})
	got := <-reply
	if got.Err != nil || got.ImageErrs != nil {
		t.Fatalf("%v %v", got.Err, got.ImageErrs)
	}
	for i := range n {
		g, w := got.Logits[i*10:(i+1)*10], want.Logits[i*10:(i+1)*10]
		var num, den float64
		for c := range w {
			num = max(num, abs(float64(g[c]-w[c])))
			den = max(den, abs(float64(w[c])))
		}
		t.Logf("image %d: max|gpu-cpu|/max|cpu| = %.2e", i, num/den)
		if num/den > 1e-2 || topk.Indices(nil, g, 1)[0] != topk.Indices(nil, w, 1)[0] {
			t.Errorf("image %d: logits differ by %.2e relative, or top-1 differs", i, num/den)
		}
	}
	// The same images ranked on the GPU: only the top classes come back,
	// those topk finds in the logits.
	for _, softmax := range []bool{false, true} {
		b.Submit(backend.Request{ID: 4, Input: &tensor.Tensor{DType: tensor.Float32, Shape: shape}, Encoded: photos, SentAt: time.Now(), Reply: reply, TopK: 3, Softmax: softmax})
		r := <-reply
		if r.Err != nil || r.Logits != nil || len(r.Top) != n*3 {
			t.Fatalf("top 3, softmax %v: %v, %d logits, %d classes", softmax, r.Err, len(r.Logits), len(r.Top))
		}
		want := make([]topk.Class, n*3)
		topk.BestRows(want, got.Logits, 10, 3, softmax)
		for i, w := range want {
			g := r.Top[i]
			if g.Index != w.Index || abs(float64(g.Value-w.Value)) > 2.5e-7*abs(float64(w.Value)) {
				t.Errorf("top 3, softmax %v: class %d is %+v, want %+v", softmax, i, g, w)
			}
		}
	}
	bad := append([][]byte{[]byte("not an image")}, photos[1:]...)
	b.Submit(backend.Request{ID: 3, Input: &tensor.Tensor{DType: tensor.Float32, Shape: shape}, Encoded: bad, SentAt: time.Now(), Reply: reply})
	r := <-reply
	if r.Err != nil || len(r.ImageErrs) != n || r.ImageErrs[0] == nil || r.ImageErrs[1] != nil {
		t.Errorf("a bad image: %v %v", r.Err, r.ImageErrs)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
