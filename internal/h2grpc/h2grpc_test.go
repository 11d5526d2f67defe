package h2grpc

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
)

// rawCodec carries messages as raw bytes so that gRPC-Go can talk to the
// handlers below without a protobuf schema.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	return *v.(*[]byte), nil
}
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}

var _ encoding.Codec = rawCodec{}

// testHandler: /t.T/Echo answers the request reversed in two parts,
// /t.T/Fail answers the status the message names, /t.T/Block waits for
// cancellation (and reports it on blocked), /t.T/Slow sleeps 100 ms.
func testHandler(blocked chan<- error) Handler {
	return func(ctx context.Context, method string, msg []byte) ([][]byte, func(), error) {
		switch method {
		case "/t.T/Echo":
			r := make([]byte, len(msg))
			for i, b := range msg {
				r[len(msg)-1-i] = b
			}
			h := len(r) / 2
			return [][]byte{r[:h], r[h:]}, nil, nil
		case "/t.T/Fail":
			return nil, nil, status.Error(codes.InvalidArgument, "bad: "+string(msg)+" ünï%")
		case "/t.T/Block":
			<-ctx.Done()
			if blocked != nil {
				blocked <- ctx.Err()
			}
			return nil, nil, ctx.Err()
		case "/t.T/Slow":
			time.Sleep(100 * time.Millisecond)
			return [][]byte{msg}, nil, nil
		}
		return nil, nil, status.Errorf(codes.Unimplemented, "no method %s", method)
	}
}

func startServer(t *testing.T, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(s.Close)
	return l.Addr().String()
}

func startGRPCGo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		var msg []byte
		if err := ss.RecvMsg(&msg); err != nil {
			return err
		}
		m, _ := grpc.Method(ss.Context())
		reply, _, err := testHandler(nil)(ss.Context(), m, msg)
		if err != nil {
			return err
		}
		out := bytes.Join(reply, nil)
		return ss.SendMsg(&out)
	}))
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func grpcGoClient(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func reversed(b []byte) []byte {
	r := bytes.Clone(b)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return r
}

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// TestInterop calls each server with each client: messages from empty to
// larger than every window and frame size, and error statuses.
func TestInterop(t *testing.T) {
	servers := map[string]string{
		"h2grpc-server": startServer(t, &Server{Handler: testHandler(nil), Window: 1 << 20}),
		"grpcgo-server": startGRPCGo(t),
	}
	sizes := []int{0, 1, 16384, 70000, 750000, 3 << 20}
	for sname, addr := range servers {
		t.Run(sname+"/h2grpc-client", func(t *testing.T) {
			cc, err := Dial(context.Background(), addr, ClientOptions{Window: 100000})
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			for _, n := range sizes {
				msg := payload(n)
				got, err := cc.Invoke(context.Background(), "/t.T/Echo", [][]byte{msg[:n/3], msg[n/3:]}, nil)
				if err != nil || !bytes.Equal(got, reversed(msg)) {
					t.Fatalf("%d bytes: err %v, equal %v", n, err, bytes.Equal(got, reversed(msg)))
				}
			}
			_, err = cc.Invoke(context.Background(), "/t.T/Fail", [][]byte{[]byte("x")}, nil)
			if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != "bad: x ünï%" {
				t.Fatalf("Fail: %v", err)
			}
			if _, err := cc.Invoke(context.Background(), "/t.T/Echo", [][]byte{[]byte("ok")}, nil); err != nil {
				t.Fatalf("after an error status: %v", err)
			}
		})
		t.Run(sname+"/grpcgo-client", func(t *testing.T) {
			cc := grpcGoClient(t, addr)
			for _, n := range sizes {
				msg, got := payload(n), []byte(nil)
				if err := cc.Invoke(context.Background(), "/t.T/Echo", &msg, &got); err != nil || !bytes.Equal(got, reversed(msg)) {
					t.Fatalf("%d bytes: %v", n, err)
				}
			}
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					msg, got := payload(100000+i), []byte(nil)
					if err := cc.Invoke(context.Background(), "/t.T/Echo", &msg, &got); err != nil || !bytes.Equal(got, reversed(msg)) {
						t.Errorf("concurrent call %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			msg, got := []byte("x"), []byte(nil)
			err := cc.Invoke(context.Background(), "/t.T/Fail", &msg, &got)
			if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != "bad: x ünï%" {
				t.Fatalf("Fail: %v", err)
			}
		})
	}
}

func TestMaxRecvMsgSize(t *testing.T) {
	addr := startServer(t, &Server{Handler: testHandler(nil), MaxRecvMsgSize: 1000})
	cc, err := Dial(context.Background(), addr, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := cc.Invoke(context.Background(), "/t.T/Echo", [][]byte{payload(1001)}, nil); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("1001 bytes: %v", err)
	}
	if _, err := cc.Invoke(context.Background(), "/t.T/Echo", [][]byte{payload(1000)}, nil); err != nil {
		t.Fatalf("1000 bytes: %v", err)
	}
}

// TestCancel: a cancelled call reaches the handler's context on both
// clients, and the h2grpc client's next call uses a new connection.
func TestCancel(t *testing.T) {
	blocked := make(chan error, 2)
	addr := startServer(t, &Server{Handler: testHandler(blocked)})
	t.Run("grpcgo-client", func(t *testing.T) {
		cc := grpcGoClient(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		msg, got := []byte("x"), []byte(nil)
		if err := cc.Invoke(ctx, "/t.T/Block", &msg, &got); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("got %v", err)
		}
		if err := <-blocked; err == nil {
			t.Fatal("handler not cancelled")
		}
	})
	t.Run("h2grpc-client", func(t *testing.T) {
		cc, err := Dial(context.Background(), addr, ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(30*time.Millisecond, cancel)
		if _, err := cc.Invoke(ctx, "/t.T/Block", [][]byte{[]byte("x")}, nil); status.Code(err) != codes.Canceled {
			t.Fatalf("got %v", err)
		}
		if err := <-blocked; err == nil {
			t.Fatal("handler not cancelled")
		}
		if cc.Err() == nil {
			t.Fatal("connection still usable after a cut call")
		}
	})
}

// TestShutdown: the call in flight is answered, a call after GOAWAY
// fails UNAVAILABLE, and Shutdown returns once the call is done.
func TestShutdown(t *testing.T) {
	s := &Server{Handler: testHandler(nil)}
	addr := startServer(t, s)
	cc, err := Dial(context.Background(), addr, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	gc := grpcGoClient(t, addr)
	msg, got := []byte("warm"), []byte(nil)
	if err := gc.Invoke(context.Background(), "/t.T/Echo", &msg, &got); err != nil {
		t.Fatal(err)
	}
	inflight := make(chan error, 1)
	go func() {
		_, err := cc.Invoke(context.Background(), "/t.T/Slow", [][]byte{[]byte("x")}, nil)
		inflight <- err
	}()
	time.Sleep(30 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	if err := <-inflight; err != nil {
		t.Fatalf("call in flight: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := cc.Invoke(context.Background(), "/t.T/Echo", [][]byte{[]byte("x")}, nil); status.Code(err) != codes.Unavailable {
		t.Fatalf("h2grpc client after shutdown: %v", err)
	}
	if err := gc.Invoke(context.Background(), "/t.T/Echo", &msg, &got); status.Code(err) != codes.Unavailable {
		t.Fatalf("gRPC-Go client after shutdown: %v", err)
	}
	late, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(late); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
	if c, err := net.Dial("tcp", late.Addr().String()); err == nil {
		c.Close()
		t.Fatal("Serve after Shutdown left its listener open")
	}
}

// TestResetBeforeReply: a call the client resets while its handler runs
// gets no answer, and the next call on the connection is answered: the
// abandoned answer's headers must not have been HPACK-encoded (an encoded
// block never sent leaves the client's table behind the encoder's, and
// the next answer fails with COMPRESSION_ERROR).
func TestResetBeforeReply(t *testing.T) {
	started, returned := make(chan struct{}), make(chan struct{})
	echo := testHandler(nil)
	s := &Server{Handler: func(ctx context.Context, method string, msg []byte) ([][]byte, func(), error) {
		if method != "/t.T/Late" {
			return echo(ctx, method, msg)
		}
		close(started)
		<-ctx.Done() // the reset has been read
		defer close(returned)
		return [][]byte{msg}, nil, nil // answered anyway
	}}
	addr := startServer(t, s)
	cc := grpcGoClient(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		msg, got := []byte("x"), []byte(nil)
		errc <- cc.Invoke(ctx, "/t.T/Late", &msg, &got)
	}()
	<-started
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("reset call: %v, want Canceled", err)
	}
	<-returned
	// Wait until the server is done with the reset stream.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := 0
		for sc := range s.conns {
			sc.mu.Lock()
			n += len(sc.streams)
			sc.mu.Unlock()
		}
		s.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reset stream never ended")
		}
	}
	msg, got := []byte("abc"), []byte(nil)
	if err := cc.Invoke(context.Background(), "/t.T/Echo", &msg, &got); err != nil || string(got) != "cba" {
		t.Fatalf("next call: %q, %v", got, err)
	}
}
