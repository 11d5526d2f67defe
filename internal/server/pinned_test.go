package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"goinfer/internal/client"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// TestPinnedReceivePath serves with a pinned request pool, as serve does
// on a GPU, and sends concurrent requests over HTTP and gRPC that are large
// enough to be received into it (80x80 FP32 images: 75 KiB each). Merged
// batches of them reach the backend as parts of the requests' own memory;
// every client must still get its own images' logits.
func TestPinnedReceivePath(t *testing.T) {
	const size = 80
	s := servertest.Start(t, servertest.Options{Size: size, MaxBatch: 4, MaxQueue: 64, MaxDelay: 2 * time.Millisecond, Pinned: true})
	ctx := ctxT(t)
	type job struct {
		x    []float32
		n    int
		want []float64
	}
	var jobs []job
	for k := range 6 {
		n := 1 + k%2
		x := randImages(n, size, uint64(100+k))
		jobs = append(jobs, job{x, n, s.Expected(t, x, n)})
	}
	merged := 0
	for _, u := range []string{"http://" + s.HTTPAddr, "grpc://" + s.GRPCAddr} {
		c, err := client.Dial(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				for i := range 4 {
					j := jobs[(g+i)%len(jobs)]
					in, _ := tensor.FromFloat32(tensor.Shape{j.n, 3, size, size}, j.x)
					got, err := c.Infer(ctx, in, nil)
					if err != nil {
						t.Errorf("%s: %v", u, err)
						return
					}
					checkLogits(t, got, j.want)
				}
			})
		}
		wg.Wait()
		for bs, k := range c.Stats().ServerBatches {
			if bs > 2 { // larger than any one request
				merged += int(k)
			}
		}
		c.Close()
	}
	if s.HostAllocs.Load() == 0 {
		t.Error("no request was received into the pinned pool")
	}
	if merged == 0 {
		t.Error("no request shared a batch; the gathered path was not exercised")
	}
}

// TestPinnedBuffersOutliveCancelledRequests cancels requests at random
// moments while their pinned buffers may be parts of a batch on the
// device. A buffer recycled before its batch finished would be written by
// the next request's body while the backend still reads it: the race
// detector (CI runs tests with -race) reports that, and the requests that
// were not cancelled must still get their own logits.
func TestPinnedBuffersOutliveCancelledRequests(t *testing.T) {
	const size = 80
	s := servertest.Start(t, servertest.Options{Size: size, MaxBatch: 4, MaxQueue: 64, MaxDelay: time.Millisecond, Pinned: true})
	ctx := ctxT(t)
	x := randImages(1, size, 7)
	want := s.Expected(t, x, 1)
	in, _ := tensor.FromFloat32(tensor.Shape{1, 3, size, size}, x)
	for _, u := range []string{"http://" + s.HTTPAddr, "grpc://" + s.GRPCAddr} {
		c, err := client.Dial(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 8 {
					if (g+i)%2 == 0 {
						cctx, cancel := context.WithTimeout(ctx, time.Duration(i%4)*time.Millisecond)
						c.Infer(cctx, in, nil) // cancelled or not: either is fine
						cancel()
						continue
					}
					got, err := c.Infer(ctx, in, nil)
					if err != nil {
						t.Errorf("%s: %v", u, err)
						return
					}
					checkLogits(t, got, want)
				}
			})
		}
		wg.Wait()
		c.Close()
	}
	if s.HostAllocs.Load() == 0 {
		t.Error("no request was received into the pinned pool")
	}
}
