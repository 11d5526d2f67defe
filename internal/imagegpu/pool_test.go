package imagegpu

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"

	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
)

func TestSpecFor(t *testing.T) {
	s, err := SpecFor(preprocess.ImageNet())
	if err != nil || s != ImageNet {
		t.Errorf("SpecFor(ImageNet) = %+v, %v; want %+v", s, err, ImageNet)
	}
	bicubic := preprocess.ImageNet()
	bicubic.Interpolation = preprocess.Bicubic
	if _, err := SpecFor(bicubic); err == nil || !strings.Contains(err.Error(), "bicubic") {
		t.Errorf("bicubic: %v", err)
	}
	noResize := preprocess.ImageNet()
	noResize.Resize = 0
	if _, err := SpecFor(noResize); err == nil {
		t.Error("a spec without a resize was accepted")
	}
}

// TestPool runs the server's GPU preprocessor from several goroutines at
// once, with more images than a worker's batch and bad images among them,
// and compares each good image with the CPU preprocessor.
func TestPool(t *testing.T) {
	libs := gpu(t)
	photos := readPhotos(t)
	var images [][]byte
	for _, b := range photos {
		images = append(images, b)
	}
	images = append(images, []byte("not an image"), bombJPEG(t, 16000, 16000))
	nGood := len(photos)
	p, err := NewPool(libs, preprocess.ImageNet(), PoolOptions{Workers: 2, MaxBatch: 3, Out: tensor.Float32})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cpu, err := preprocess.NewCPU(preprocess.ImageNet(), preprocess.CPUOptions{})
	if err != nil {
		t.Fatal(err)
	}
	per := 3 * 224 * 224
	want := make([]byte, nGood*per*4)
	for i, err := range cpu.Preprocess(context.Background(), images[:nGood], tensor.Float32, want) {
		if err != nil {
			t.Fatalf("CPU, image %d: %v", i, err)
		}
	}
	ref := tensor.BytesF32(want)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			dst := make([]byte, len(images)*per*4)
			errs := p.Preprocess(context.Background(), images, tensor.Float32, dst)
			got := tensor.BytesF32(dst)
			for i := range nGood {
				if errs[i] != nil {
					t.Errorf("image %d: %v", i, errs[i])
					continue
				}
				var sum float64
				for k := range per {
					sum += math.Abs(float64(got[i*per+k] - ref[i*per+k]))
				}
				if mean := sum / float64(per); mean > 0.02 {
					t.Errorf("image %d: mean |gpu-cpu| %.4f", i, mean)
				}
			}
			if errs[nGood] == nil || errs[nGood+1] == nil || !strings.Contains(errs[nGood+1].Error(), "pixels") {
				t.Errorf("bad images: %v, %v", errs[nGood], errs[nGood+1])
			}
		})
	}
	wg.Wait()
	if errs := p.Preprocess(context.Background(), images[:1], tensor.Float16, make([]byte, per*2)); errs[0] == nil {
		t.Error("a dtype other than the pool's was accepted")
	}
}
