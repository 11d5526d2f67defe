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

// TestInlineStaysForOneCallAtATime checks that a connection whose calls
// come one at a time keeps running them inline after a handler long
// enough to be handed off (the next call may arrive before the previous
// stream is cleaned up), and that concurrent calls on one connection end
// it.
func TestInlineStaysForOneCallAtATime(t *testing.T) {
	s := &Server{Handler: func(ctx context.Context, method string, msg []byte) ([][]byte, func(), error) {
		if method == "/t.T/Slow" {
			time.Sleep(20 * time.Millisecond)
		}
		return [][]byte{msg}, nil, nil
	}}
	addr := startServer(t, s)
	multi := func() []bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		var out []bool
		for sc := range s.conns {
			sc.mu.Lock()
			out = append(out, sc.multi)
			sc.mu.Unlock()
		}
		return out
	}
	ctx := context.Background()
	cc, err := Dial(ctx, addr, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, m := range []string{"/t.T/Slow", "/t.T/Echo", "/t.T/Slow", "/t.T/Echo", "/t.T/Echo"} {
		if _, err := cc.Invoke(ctx, m, [][]byte{[]byte("x")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := multi(); len(got) != 1 || got[0] {
		t.Fatalf("one call at a time: connections' multi = %v, want [false]", got)
	}
	cc.Close()
	gc := grpcGoClient(t, addr)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			msg, got := []byte("y"), []byte(nil)
			if err := gc.Invoke(ctx, "/t.T/Slow", &msg, &got); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := multi()
		if len(got) == 1 && got[0] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("concurrent calls: connections' multi = %v, want [true]", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
