package h2grpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// rawClient writes HTTP/2 frames by hand, so that a test can send a
// message slower than any real client would.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
	c  *conn // only for its HPACK encoder
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	rc := &rawClient{t: t, nc: nc, r: bufio.NewReader(nc), c: newConn(nc, maxFrameSize, initialWindow)}
	rc.send(appendSettings([]byte(clientPreface), maxFrameSize, 1<<30, 0))
	return rc
}

func (rc *rawClient) send(b []byte) {
	rc.t.Helper()
	if _, err := rc.nc.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

// call opens stream id for method with a HEADERS frame.
func (rc *rawClient) call(id uint32, method string) {
	rc.send(rc.c.encodeHeaders(nil, id, false, ":method", "POST", ":scheme", "http", ":path", method,
		"content-type", "application/grpc"))
}

func (rc *rawClient) data(id uint32, end bool, p []byte) {
	f := byte(0)
	if end {
		f = flagEndStream
	}
	rc.send(append(appendFrameHeader(nil, len(p), frameData, f, id), p...))
}

func grpcPrefix(n int) []byte {
	b := make([]byte, grpcPrefixLen)
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	return b
}

// waitFrame reads frames until one of type typ on stream id arrives (its
// payload is returned), or the connection ends (err).
func (rc *rawClient) waitFrame(id uint32, typ byte) ([]byte, frameHeader, error) {
	rc.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		var hd [frameHeaderLen]byte
		if _, err := io.ReadFull(rc.r, hd[:]); err != nil {
			return nil, frameHeader{}, err
		}
		h, err := parseFrameHeader(hd[:], maxFrameSize)
		if err != nil {
			return nil, h, err
		}
		p := make([]byte, h.length)
		if _, err := io.ReadFull(rc.r, p); err != nil {
			return nil, h, err
		}
		if h.typ == typ && h.stream == id {
			return p, h, nil
		}
	}
}

// streamOf returns the server's record of stream id on its only connection.
func streamOf(s *Server, id uint32) *serverStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sc := range s.conns {
		sc.mu.Lock()
		st := sc.streams[id]
		sc.mu.Unlock()
		return st
	}
	return nil
}

// TestCutSlowMessage: a call whose context ends (here the Admit hook's
// deadline, as the server's --read_timeout) before its message is complete
// is reset with CANCEL and its buffer (never more than presizeMax for the
// declared 4 MiB) freed, whether the client stalls
// after the prefix, trickles bytes, or stops inside a DATA frame; later
// DATA for it is ignored and the connection serves the next call, except
// in the last case, where the connection is closed after cutGrace.
func TestCutSlowMessage(t *testing.T) {
	const declared = 4 << 20
	cases := []struct {
		name     string
		send     func(rc *rawClient, stop <-chan struct{})
		closesOK bool
		// settle is how long to let the client send before the buffer
		// is measured (the cut comes at 150 ms).
		settle time.Duration
	}{
		{name: "stall-after-prefix", send: func(rc *rawClient, _ <-chan struct{}) {
			rc.data(1, false, append(grpcPrefix(declared), 1, 2, 3))
		}},
		{name: "trickle", settle: 60 * time.Millisecond, send: func(rc *rawClient, stop <-chan struct{}) {
			rc.data(1, false, grpcPrefix(declared))
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond):
						rc.nc.Write(append(appendFrameHeader(nil, 1, frameData, 0, 1), 7))
					}
				}
			}()
		}},
		{name: "stall-mid-frame", closesOK: true, send: func(rc *rawClient, _ <-chan struct{}) {
			rc.send(appendFrameHeader(nil, 64<<10, frameData, 0, 1))
			rc.send(append(grpcPrefix(declared), 1, 2, 3))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var admitted, released atomic.Int32
			s := &Server{Handler: testHandler(nil), Admit: func(ctx context.Context, _ string) (context.Context, error) {
				admitted.Add(1)
				ctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
				context.AfterFunc(ctx, func() { released.Add(1); cancel() })
				return ctx, nil
			}}
			rc := dialRaw(t, startServer(t, s))
			rc.call(1, "/t.T/Echo")
			stop := make(chan struct{})
			defer close(stop)
			tc.send(rc, stop)
			var st *serverStream
			for i := 0; st == nil && i < 200; i++ {
				time.Sleep(5 * time.Millisecond)
				st = streamOf(s, 1)
			}
			if st == nil {
				t.Fatal("stream 1 never registered")
			}
			if !tc.closesOK {
				// Only the presized part of the declared 4 MiB is held,
				// however many small frames have arrived.
				time.Sleep(tc.settle)
				held := 0
				for i := 0; held == 0 && i < 100; i++ {
					st.bufMu.Lock()
					if len(st.buf) >= grpcPrefixLen {
						held = cap(st.buf)
					}
					st.bufMu.Unlock()
					time.Sleep(time.Millisecond)
				}
				if held == 0 || held > presizeMax {
					t.Fatalf("stream buffer of %d bytes before the cut, want 1..%d", held, presizeMax)
				}
			}
			p, _, err := rc.waitFrame(1, frameRSTStream)
			if err != nil {
				t.Fatalf("waiting for RST_STREAM: %v", err)
			}
			if code := binary.BigEndian.Uint32(p); code != errCodeCancel {
				t.Fatalf("RST_STREAM code %d, want CANCEL", code)
			}
			freed := false
			for i := 0; !freed && i < 400; i++ {
				st.bufMu.Lock()
				freed = st.buf == nil
				st.bufMu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
			if !freed {
				t.Fatal("the cut stream's buffer is still held")
			}
			if streamOf(s, 1) != nil {
				t.Fatal("the cut stream is still counted")
			}
			if admitted.Load() != 1 || released.Load() != 1 {
				t.Fatalf("admitted %d, released %d", admitted.Load(), released.Load())
			}
			if tc.closesOK {
				if _, _, err := rc.waitFrame(3, frameHeaders); !errors.Is(err, io.EOF) {
					t.Fatalf("connection stalled mid-frame: got %v, want it closed", err)
				}
				return
			}
			// Late DATA for the cut stream is ignored; the next call works.
			rc.data(1, true, []byte{9, 9})
			rc.call(3, "/t.T/Echo")
			rc.data(3, true, append(grpcPrefix(2), 'a', 'b'))
			p, _, err = rc.waitFrame(3, frameData)
			if err != nil {
				t.Fatalf("next call: %v", err)
			}
			if string(p) != string(append(grpcPrefix(2), 'b', 'a')) {
				t.Fatalf("next call answered %q", p)
			}
		})
	}
}
