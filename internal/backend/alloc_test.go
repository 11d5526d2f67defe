package backend

import (
	"context"
	"math/rand/v2"
	"testing"

	"goinfer/internal/tensor"
)

// TestSteadyStateAllocations checks that a request costs the pipeline no
// heap allocation once it is running (buffers are pooled, slots reused,
// the response travels by value), on the cpu engine whose Forward does not
// allocate either.
func TestSteadyStateAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations over many requests")
	}
	const size = 32
	load := loadNarrowCPU(t, size, 2)
	for _, copyStreams := range []bool{true, false} {
		b := New(Config{NumWorkers: 2, CopyStreams: copyStreams})
		if err := b.Start(context.Background(), load); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		v := make([]float32, 2*3*size*size)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		in, _ := tensor.FromFloat32(tensor.Shape{2, 3, size, size}, v)
		reply := make(chan Response, 1)
		out := make([]float32, 2*10)
		req := Request{Input: in, Reply: reply, Output: out, Ctx: context.Background()}
		roundTrip := func() {
			if err := b.Submit(req); err != nil {
				t.Fatal(err)
			}
			if r := <-reply; r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		for range 10 {
			roundTrip() // reach the steady state
		}
		allocs := testing.AllocsPerRun(50, roundTrip)
		closeBackend(t, b)
		if allocs > 0 {
			t.Errorf("copy_streams=%v: %.1f allocations per request, want 0", copyStreams, allocs)
		}
	}
}
