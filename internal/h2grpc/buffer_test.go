package h2grpc

import (
	"context"
	"sync"
	"testing"
	"unsafe"
)

// placedBuffers is a Server.Buffer that records what it hands out and
// what comes back.
type placedBuffers struct {
	mu    sync.Mutex
	asked []int    // message lengths asked for
	heads [][]byte // the first bytes seen with each
	out   int      // buffers handed out and not yet freed
	bufs  [][]byte
}

func (p *placedBuffers) get(_ string, n int, head []byte) ([]byte, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, n)
	p.heads = append(p.heads, append([]byte(nil), head...))
	b := make([]byte, grpcPrefixLen+n)
	p.bufs = append(p.bufs, b)
	p.out++
	freed := false
	return b, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if freed {
			panic("buffer freed twice")
		}
		freed = true
		p.out--
	}
}

// within reports whether msg lies in one of the buffers handed out.
func (p *placedBuffers) within(msg []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(msg) == 0 {
		return false
	}
	m := uintptr(unsafe.Pointer(unsafe.SliceData(msg)))
	for _, b := range p.bufs {
		s := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if m >= s && m+uintptr(len(msg)) <= s+uintptr(len(b)) {
			return true
		}
	}
	return false
}

// TestServerBuffer checks that Server.Buffer is asked for the memory of a
// message its first frame would have presized, that the handler's msg lies
// in it, that it is given back once per call, and that messages it is not
// asked for (larger than 1 MiB in small frames, declined) still arrive.
func TestServerBuffer(t *testing.T) {
	cases := []struct {
		name    string
		grpcGo  bool // gRPC-Go client: 16 KiB frames
		size    int
		decline bool
		placed  []bool // per call
	}{
		{"h2grpc client, 750 KB", false, 750_000, false, []bool{true, true}},
		// The first call goes out before the server's SETTINGS are read,
		// in 16 KiB frames; the second in one.
		{"h2grpc client, 3 MiB", false, 3 << 20, false, []bool{false, true}},
		{"h2grpc client, empty message", false, 0, false, []bool{true, true}},
		{"gRPC-Go client, 100 KB in 16 KiB frames", true, 100_000, false, []bool{true, true}},
		{"gRPC-Go client, 3 MiB in 16 KiB frames", true, 3 << 20, false, []bool{false, false}},
		{"declined", false, 750_000, true, []bool{false, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &placedBuffers{}
			var inside []bool
			var mu sync.Mutex
			echo := testHandler(nil)
			s := &Server{
				Handler: func(ctx context.Context, method string, msg []byte) ([][]byte, func(), error) {
					mu.Lock()
					inside = append(inside, p.within(msg))
					mu.Unlock()
					return echo(ctx, method, msg)
				},
				Buffer: func(method string, n int, head []byte) ([]byte, func()) {
					if method != "/t.T/Echo" {
						t.Errorf("Buffer asked for method %q", method)
					}
					if tc.decline {
						return nil, nil
					}
					return p.get(method, n, head)
				},
			}
			addr := startServer(t, s)
			msg := payload(tc.size)
			gc := grpcGoClient(t, addr)
			hc, err := Dial(context.Background(), addr, ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer hc.Close()
			for range tc.placed {
				var got []byte
				if tc.grpcGo {
					if err := gc.Invoke(context.Background(), "/t.T/Echo", &msg, &got); err != nil {
						t.Fatal(err)
					}
				} else if got, err = hc.Invoke(context.Background(), "/t.T/Echo", [][]byte{msg}, nil); err != nil {
					t.Fatal(err)
				}
				if string(got) != string(reversed(msg)) {
					t.Fatalf("answer of %d bytes is not the request reversed", len(got))
				}
			}
			s.Close()
			p.mu.Lock()
			defer p.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			if p.out != 0 {
				t.Errorf("%d buffers not given back", p.out)
			}
			wantAsked := 0
			for _, p := range tc.placed {
				if p {
					wantAsked++
				}
			}
			if !tc.decline && len(p.asked) != wantAsked {
				t.Fatalf("Buffer asked %d times, want %d", len(p.asked), wantAsked)
			}
			for i, n := range p.asked {
				if n != tc.size {
					t.Errorf("asked for %d bytes, want %d", n, tc.size)
				}
				if want := msg[:min(len(msg), 4<<10, len(p.heads[i]))]; string(p.heads[i]) != string(want) || len(p.heads[i]) == 0 && len(msg) > 0 {
					t.Errorf("head of %d bytes is not the message's start", len(p.heads[i]))
				}
			}
			for i, in := range inside {
				if want := tc.placed[i] && tc.size > 0; in != want {
					t.Errorf("call %d: msg in the supplied buffer: %v, want %v", i, in, want)
				}
			}
		})
	}
}
