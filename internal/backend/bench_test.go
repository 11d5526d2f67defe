package backend

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkPipeline measures the pipeline's own cost per request: the test
// device does almost no work (a mean over 105 floats), so the time is the
// stages' hand-offs, event waits and copies. On the "sync" device every op
// runs at enqueue time (as on the cpu engine), so the figure is the
// pipeline alone; the "async" device adds a goroutine hand-off per device
// op (its streams). Requests are kept 16 deep, as a flood keeps the queue
// full. Allocations counted are the test device's closures.
func BenchmarkPipeline(b *testing.B) {
	for _, device := range []string{"async", "sync"} {
		for _, copyStreams := range []bool{true, false} {
			for _, workers := range []int{1, 2} {
				b.Run(fmt.Sprintf("device=%s/copy_streams=%v/workers=%d", device, copyStreams, workers), func(b *testing.B) {
					m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 0)
					m.dev.sync = device == "sync"
					be := New(Config{NumWorkers: workers, CopyStreams: copyStreams, QueueDepth: 16})
					be.Start(context.Background(), loaderOf(m))
					in := randInput(rand.New(rand.NewPCG(1, 1)), tMaxBatch)
					const depth = 16
					reply := make(chan Response, depth)
					outs := make(chan []float32, depth)
					for range depth {
						outs <- make([]float32, tMaxBatch*tClasses)
					}
					b.ReportAllocs()
					b.ResetTimer()
					start := time.Now()
					go func() {
						for i := range b.N {
							be.Submit(Request{ID: uint64(i), Input: in, Reply: reply, Output: <-outs})
						}
					}()
					for range b.N {
						r := <-reply
						if r.Err != nil {
							b.Fatal(r.Err)
						}
						outs <- r.Logits[:cap(r.Logits)]
					}
					b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
					b.StopTimer()
					be.Close(context.Background())
				})
			}
		}
	}
}

// BenchmarkIdleRequest measures a lone request's round trip: batch 1, one
// request in flight, the submitter waiting for each answer, so that the
// device is idle whenever a request arrives. With inline=true the request
// is marked Request.Inline and runs on the submitter's goroutine; with
// false it crosses the stages. The "sync" device runs every op at enqueue
// time (the pipeline's cost alone), the "async" device on its streams'
// goroutines.
func BenchmarkIdleRequest(b *testing.B) {
	for _, device := range []string{"sync", "async"} {
		for _, copyStreams := range []bool{true, false} {
			for _, inline := range []bool{false, true} {
				b.Run(fmt.Sprintf("device=%s/copy_streams=%v/inline=%v", device, copyStreams, inline), func(b *testing.B) {
					m := newAsyncModel(tClasses, tC, tH, tW, tMaxBatch, 0)
					m.dev.sync = device == "sync"
					be := New(Config{CopyStreams: copyStreams})
					be.Start(context.Background(), loaderOf(m))
					<-be.Ready()
					in := randInput(rand.New(rand.NewPCG(1, 1)), 1)
					reply := make(chan Response, 1)
					out := make([]float32, tMaxBatch*tClasses)
					b.ReportAllocs()
					b.ResetTimer()
					for i := range b.N {
						if err := be.Submit(Request{ID: uint64(i), Input: in, Reply: reply, Output: out, Inline: inline}); err != nil {
							b.Fatal(err)
						}
						if r := <-reply; r.Err != nil {
							b.Fatal(r.Err)
						}
					}
					b.StopTimer()
					if got := be.Stats()[0].Inline; inline != (got == uint64(b.N)) {
						b.Fatalf("%d of %d requests ran inline", got, b.N)
					}
					be.Close(context.Background())
				})
			}
		}
	}
}
