package h2grpc

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestInlineHandOff checks what a handler running on its connection's
// reading goroutine must not hold up: calls that arrive on the same
// connection while it runs (gRPC-Go multiplexes them), and its own
// cancellation by the client.
func TestInlineHandOff(t *testing.T) {
	const calls = 4
	var mu sync.Mutex
	in := 0
	all := make(chan struct{})
	blocked := make(chan error, 1)
	s := &Server{Handler: func(ctx context.Context, method string, msg []byte) ([][]byte, func(), error) {
		switch method {
		case "/t.T/Together":
			// Answers only once every call is in a handler at once.
			mu.Lock()
			if in++; in == calls {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
				return [][]byte{msg}, nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		case "/t.T/Block":
			<-ctx.Done()
			blocked <- ctx.Err()
			return nil, nil, ctx.Err()
		}
		return [][]byte{msg}, nil, nil
	}}
	addr := startServer(t, s)
	cc := grpcGoClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A first call alone: its handler runs inline.
	msg, got := []byte("x"), []byte(nil)
	if err := cc.Invoke(ctx, "/t.T/Echo", &msg, &got); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			var got []byte
			if err := cc.Invoke(ctx, "/t.T/Together", &msg, &got); err != nil {
				t.Errorf("call on a shared connection: %v", err)
			}
		})
	}
	wg.Wait()
	// A call the client cancels (RST_STREAM, no deadline) is cancelled in
	// the handler, on a connection of its own (never seen with two calls
	// at once).
	cc2 := grpcGoClient(t, addr)
	if err := cc2.Invoke(ctx, "/t.T/Echo", &msg, &got); err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, bcancel)
	err := cc2.Invoke(bctx, "/t.T/Block", &msg, &got)
	if status.Code(err) != codes.Canceled {
		t.Fatalf("blocked call: %v, want Canceled", err)
	}
	select {
	case err := <-blocked:
		if err != context.Canceled {
			t.Errorf("handler's context ended with %v, want Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("the cancelled call's handler was not cancelled")
	}
	if err := cc2.Invoke(ctx, "/t.T/Echo", &msg, &got); err != nil {
		t.Fatal(err)
	}
}
