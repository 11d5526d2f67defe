package client_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"goinfer/internal/client"
	"goinfer/internal/server/servertest"
)

// TestInferImagesBatchedConcurrently sends one image per request from as
// many goroutines as a batch holds, through one client (one gRPC
// connection), to a server that sends a batch only when it is full or
// after a delay far longer than the test waits. Every request must come
// back from a full batch, over gRPC as over HTTP, whether the server or
// the backend decodes: a transport that held requests back until earlier
// ones were answered (one stream at a time, a lock around a call, a flow-
// control stall) would leave the batch short and the requests waiting.
func TestInferImagesBatchedConcurrently(t *testing.T) {
	const batch = 8
	photo, err := os.ReadFile("../../testdata/golden/image.jpg")
	if err != nil {
		t.Fatal(err)
	}
	for _, inBackend := range []bool{false, true} {
		mode := "decoded in the server"
		if inBackend {
			mode = "decoded in the backend"
		}
		s := servertest.Start(t, servertest.Options{Images: true, DecodeInBackend: inBackend,
			MaxBatch: batch, MaxQueue: 2 * batch, MaxDelay: time.Minute})
		for proto, url := range urls(s) {
			t.Run(mode+"/"+proto, func(t *testing.T) {
				c := dial(t, url, client.Options{Conns: 1})
				if _, err := c.Metadata(context.Background()); err != nil {
					t.Fatal(err)
				}
				// Far shorter than MaxDelay: a request still queued then was
				// not merged with the others.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				sizes := make([]int, batch)
				errs := make([]error, batch)
				var wg sync.WaitGroup
				for i := range batch {
					wg.Go(func() {
						res, err := c.InferImages(ctx, [][]byte{photo}, 1)
						sizes[i], errs[i] = res.BatchSize, err
					})
				}
				wg.Wait()
				for i := range batch {
					switch {
					case timedOut(errs[i]):
						t.Errorf("request %d still waited for its batch after 10 s: %d concurrent requests did not reach the batcher together", i, batch)
					case errs[i] != nil:
						t.Errorf("request %d: %v", i, errs[i])
					case sizes[i] != batch:
						t.Errorf("request %d ran in a batch of %d; want %d (all the concurrent requests)", i, sizes[i], batch)
					}
				}
			})
		}
	}
}

// timedOut reports whether err is a request's deadline passing, on the
// client or as the server's gRPC status.
func timedOut(err error) bool {
	var se *client.ServerError
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &se) && se.Code == codes.DeadlineExceeded
}
