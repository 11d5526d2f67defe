package backend

import (
	"runtime"
	"testing"
)

// BenchmarkHandoff measures a request's trip through four goroutine stages
// and back (the pipeline's H2D stage, worker, D2H stage and reply stage),
// with the stages' goroutines locked to OS threads (as CUDA's per-thread
// current device would suggest) and not. At concurrency 1 the trip is pure
// hand-off latency, so this is what the pipeline's stages cost a batch-1
// request. On the H200 machine (16 cores): 63.6 us locked, 1.3 us not.
func BenchmarkHandoff(b *testing.B) {
	for _, c := range []struct {
		name string
		lock bool
	}{{"locked", true}, {"unlocked", false}} {
		b.Run(c.name, func(b *testing.B) {
			const stages = 4
			chans := make([]chan int, stages+1)
			for k := range chans {
				chans[k] = make(chan int, 16)
			}
			for k := range stages {
				go func() {
					if c.lock {
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
					}
					for {
						v, ok := <-chans[k]
						if !ok {
							close(chans[k+1])
							return
						}
						chans[k+1] <- v
					}
				}()
			}
			for i := 0; b.Loop(); i++ {
				chans[0] <- i
				<-chans[stages]
			}
			close(chans[0])
			for range chans[stages] {
			}
		})
	}
}
