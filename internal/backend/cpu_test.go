package backend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/engine/cpu"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

// loadNarrowCPU loads a narrow ResNet (one basic block per stage, width 8,
// 10 classes) with seeded random weights on the cpu engine.
func loadNarrowCPU(t *testing.T, size, maxBatch int) LoadFunc {
	t.Helper()
	a := model.NewArch(model.Basic, []int{1, 1, 1, 1}, 8, 10, 1, 64)
	sd, err := model.Init(context.Background(), a, 42)
	if err != nil {
		t.Fatal(err)
	}
	g, err := model.FromStateDict(sd)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context) (engine.Model, error) {
		return cpu.Engine{}.Load(ctx, g, engine.Options{Compile: true, MaxBatch: maxBatch, Height: size, Width: size,
			InputDType: tensor.Float32, Threads: 1})
	}
}

// randImages returns n random 3 x size x size float32 images.
func randImages(rng *rand.Rand, n, size int) *tensor.Tensor {
	v := make([]float32, n*3*size*size)
	for j := range v {
		v[j] = float32(rng.NormFloat64())
	}
	t, _ := tensor.FromFloat32(tensor.Shape{n, 3, size, size}, v)
	return t
}

// runAll sends every input through a fresh backend and returns the logits
// by request index.
func runAll(t *testing.T, cfg Config, load LoadFunc, inputs []*tensor.Tensor) [][]float32 {
	t.Helper()
	b := New(cfg)
	if err := b.Start(context.Background(), load); err != nil {
		t.Fatal(err)
	}
	abortOnFailure(t, b)
	reply := make(chan Response, len(inputs))
	go func() {
		for i, in := range inputs {
			if err := b.Submit(Request{ID: uint64(i), Input: in, SentAt: time.Now(), Reply: reply}); err != nil {
				t.Errorf("Submit %d: %v", i, err)
				return
			}
		}
	}()
	out := make([][]float32, len(inputs))
	for range inputs {
		r := <-reply
		if r.Err != nil {
			t.Fatalf("request %d: %v", r.ID, r.Err)
		}
		if r.N != inputs[r.ID].Shape[0] || r.Classes != 10 || len(r.Logits) != r.N*10 {
			t.Fatalf("request %d: N %d classes %d, %d logits", r.ID, r.N, r.Classes, len(r.Logits))
		}
		out[r.ID] = r.Logits
	}
	closeBackend(t, b)
	return out
}

// TestCPUEngineResponsesMatchSingleWorker runs the real cpu engine through
// the pipeline with several workers, copy streams on and off, and checks
// that every response carries its own request's logits: those a
// single-worker, one-request-at-a-time run computes for the same input.
func TestCPUEngineResponsesMatchSingleWorker(t *testing.T) {
	const size, maxBatch = 32, 3
	load := loadNarrowCPU(t, size, maxBatch)
	rng := rand.New(rand.NewPCG(21, 22))
	inputs := make([]*tensor.Tensor, 24)
	for i := range inputs {
		inputs[i] = randImages(rng, 1+rng.IntN(maxBatch), size)
	}
	want := runAll(t, Config{NumWorkers: 1, Slots: 1}, load, inputs)
	for _, cfg := range []Config{
		{NumWorkers: 3, CopyStreams: true, StagingChunk: 1000},
		{NumWorkers: 3, CopyStreams: false},
		{NumWorkers: 2, CopyStreams: true, Profile: true, QueueDepth: 2},
	} {
		t.Run(fmt.Sprintf("workers=%d/copy_streams=%v", cfg.NumWorkers, cfg.CopyStreams), func(t *testing.T) {
			checkNoLeak(t)
			got := runAll(t, cfg, load, inputs)
			for i := range inputs {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("request %d: logits differ from the single-worker run:\n got %v\nwant %v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestPartsGatherImages sends the inputs of a plain run again as Parts, one
// part per image, some padded to the largest batch, through staging
// buffers that split images, and checks that each real image gets the
// logits the plain run gave it.
func TestPartsGatherImages(t *testing.T) {
	const size, maxBatch = 32, 3
	checkNoLeak(t)
	load := loadNarrowCPU(t, size, maxBatch)
	rng := rand.New(rand.NewPCG(23, 24))
	inputs := make([]*tensor.Tensor, 12)
	for i := range inputs {
		inputs[i] = randImages(rng, 1+rng.IntN(maxBatch), size)
	}
	want := runAll(t, Config{NumWorkers: 1, Slots: 1}, load, inputs)

	b := New(Config{NumWorkers: 2, CopyStreams: true, StagingChunk: 1000})
	if err := b.Start(context.Background(), load); err != nil {
		t.Fatal(err)
	}
	abortOnFailure(t, b)
	reply := make(chan Response, len(inputs))
	img := 3 * size * size * 4
	for i, in := range inputs {
		n := in.Shape[0]
		padded := n
		if i%2 == 0 {
			padded = maxBatch
		}
		req := Request{ID: uint64(i), Reply: reply, SentAt: time.Now(),
			Input: &tensor.Tensor{DType: in.DType, Shape: tensor.Shape{padded, 3, size, size}}}
		for k := range n {
			req.Parts = append(req.Parts, in.Data[k*img:(k+1)*img])
		}
		if err := b.Submit(req); err != nil {
			t.Fatal(err)
		}
	}
	for range inputs {
		r := <-reply
		if r.Err != nil {
			t.Fatalf("request %d: %v", r.ID, r.Err)
		}
		n := inputs[r.ID].Shape[0]
		// A padded batch is a larger batch, which the cpu engine's kernels
		// may sum in another order: its real images' logits agree to
		// rounding.
		if got := r.Logits[:n*10]; !slices.EqualFunc(got, want[r.ID], closeF32) {
			t.Fatalf("request %d: logits of the gathered images differ:\n got %v\nwant %v", r.ID, got, want[r.ID])
		}
	}
	// Parts that are not whole images, or more than the shape holds, are
	// the request's error.
	bad := []Request{
		{Input: &tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{1, 3, size, size}}, Parts: [][]byte{make([]byte, img+4)}},
		{Input: &tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{1, 3, size, size}}, Parts: [][]byte{make([]byte, img), make([]byte, img)}},
	}
	for i, req := range bad {
		req.Reply = reply
		if err := b.Submit(req); err != nil {
			t.Fatal(err)
		}
		if r := <-reply; !errors.Is(r.Err, ErrInvalidInput) {
			t.Errorf("bad parts %d: error %v, want ErrInvalidInput", i, r.Err)
		}
	}
	closeBackend(t, b)
}

// closeF32 reports whether a and b agree to float32 rounding of sums.
func closeF32(a, b float32) bool {
	return math.Abs(float64(a-b)) <= 1e-5*(1+math.Abs(float64(b)))
}
