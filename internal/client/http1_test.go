package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"goinfer/internal/client"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
)

// tcpProxy forwards connections to a server, counting them; it can cut
// the server's answer short and close every connection it holds.
type tcpProxy struct {
	ln       net.Listener
	target   string
	accepted atomic.Int64
	// cut, when positive, closes a connection after that many bytes of
	// the server's answer have been forwarded (once, then reset to 0).
	cut atomic.Int64
	// sent counts the bytes of the server's answers forwarded.
	sent atomic.Int64

	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			wg.Go(func() { io.Copy(s, c); s.Close() })
			wg.Go(func() {
				w := countingWriter{c, &p.sent}
				if n := p.cut.Swap(0); n > 0 {
					io.CopyN(w, s, n)
					c.Close()
					s.Close()
					return
				}
				io.Copy(w, s)
				c.Close()
			})
		}
	})
	t.Cleanup(func() { ln.Close(); p.closeAll(); wg.Wait() })
	return p
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

// Write counts b before writing it, so that a client that has read the
// bytes always finds them counted; what a failed write did not send is
// taken back.
func (c countingWriter) Write(b []byte) (int, error) {
	c.n.Add(int64(len(b)))
	n, err := c.w.Write(b)
	c.n.Add(int64(n - len(b)))
	return n, err
}

func (p *tcpProxy) url() string { return "http://" + p.ln.Addr().String() }

// closeAll closes every connection, as a server closing idle ones does.
func (p *tcpProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

var httpClients = []string{client.HTTPLean, client.HTTPNetHTTP}

// TestHTTPClientsKeepConnections: sequential requests share one
// connection; when the server closes it while idle, the next request
// goes out on a new one and succeeds.
func TestHTTPClientsKeepConnections(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	x := images(1, 16, 7)
	want := s.Expected(t, x.Float32s(), 1)
	for _, hc := range httpClients {
		t.Run(hc, func(t *testing.T) {
			p := startProxy(t, s.HTTPAddr)
			c := dial(t, p.url(), client.Options{HTTPClient: hc})
			if _, err := c.Metadata(context.Background()); err != nil {
				t.Fatal(err)
			}
			before := p.accepted.Load()
			for i := range 20 {
				got, err := c.Infer(context.Background(), x, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if e := servertest.RelErr(got, want); e > 1e-3 {
					t.Fatalf("request %d: logits differ by %.2g", i, e)
				}
			}
			if n := p.accepted.Load() - before; n > 1 {
				t.Errorf("20 sequential requests opened %d connections, want at most 1", n)
			}
			p.closeAll()
			time.Sleep(10 * time.Millisecond) // the close reaches the client's socket
			if _, err := c.Infer(context.Background(), x, nil); err != nil {
				t.Fatalf("request after the server closed the idle connection: %v", err)
			}
		})
	}
}

// reverseProxy puts Go's reverse proxy in front of the server, with
// modify changing each answer and closing whether the front server closes
// each connection after its answer.
func reverseProxy(t *testing.T, target string, modify func(*http.Response) error, closing bool) string {
	u, _ := url.Parse("http://" + target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = modify
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if closing {
			w.Header().Set("Connection", "close")
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestLeanHTTPConnectionCloseAndChunked: answers that say Connection:
// close (a draining server's) are read whole and the connection is not
// used again; answers in chunked encoding are decoded.
func TestLeanHTTPConnectionCloseAndChunked(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	x := images(2, 16, 8)
	want := s.Expected(t, x.Float32s(), 2)
	for _, tc := range []struct {
		name    string
		modify  func(*http.Response) error
		closing bool
	}{
		{"connection-close", nil, true},
		{"chunked", func(r *http.Response) error {
			r.ContentLength = -1
			r.Header.Del("Content-Length")
			return nil
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			front := reverseProxy(t, s.HTTPAddr, tc.modify, tc.closing)
			p := startProxy(t, strings.TrimPrefix(front, "http://"))
			c := dial(t, p.url(), client.Options{})
			before := p.accepted.Load()
			for i := range 3 {
				got, err := c.Infer(context.Background(), x, make([]float32, 20))
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if e := servertest.RelErr(got, want); e > 1e-3 {
					t.Fatalf("request %d: logits differ by %.2g", i, e)
				}
			}
			conns := p.accepted.Load() - before
			if tc.name == "connection-close" && conns != 3 {
				t.Errorf("3 answers with Connection: close: %d connections, want 3", conns)
			}
			if tc.name == "chunked" && conns != 1 {
				t.Errorf("3 chunked answers: %d connections, want 1", conns)
			}
		})
	}
}

// TestLeanHTTPServerClosesMidResponse: a connection cut inside the answer
// fails the request with an error saying so, without a retry or a hang,
// and the next request gets a new connection.
func TestLeanHTTPServerClosesMidResponse(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	x := images(1, 16, 9)
	for _, tc := range []struct {
		name string
		cut  int64
		want string
	}{
		{"in-status-line", 5, "status line"},
		{"in-headers", 40, "headers"},
		{"in-logits", 0, "binary logits"}, // set below: the head and JSON, then 8 bytes
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProxy(t, s.HTTPAddr)
			c := dial(t, p.url(), client.Options{})
			cut := tc.cut
			if cut == 0 {
				// Measure a whole answer, then cut it 32 bytes before its
				// end, inside the 40 bytes of logits.
				sent := p.sent.Load()
				if _, err := c.Infer(context.Background(), x, nil); err != nil {
					t.Fatal(err)
				}
				cut = p.sent.Load() - sent - 32
				// The next request must be on a new connection, which
				// the proxy cuts: the client finds this one closed and
				// sends it again on a new one.
				p.closeAll()
			}
			p.cut.Store(cut)
			before := p.accepted.Load()
			_, err := c.Infer(context.Background(), x, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.Fatalf("answer cut after %d bytes: %v; want an unexpected EOF naming %q", cut, err, tc.want)
			}
			if n := p.accepted.Load() - before; n != 1 {
				t.Errorf("the cut request went out on %d new connections, want 1: a request whose answer had begun must not be retried", n)
			}
			if _, err := c.Infer(context.Background(), x, nil); err != nil {
				t.Fatalf("request after the cut: %v", err)
			}
		})
	}
}

// TestHTTPClientsContext: a request held by the server ends when its
// context's deadline passes or it is cancelled, with the context's error;
// the connection it was on is not used again.
func TestHTTPClientsContext(t *testing.T) {
	x := images(1, 16, 10)
	for _, hc := range httpClients {
		t.Run(hc, func(t *testing.T) {
			s := servertest.Start(t, servertest.Options{Gated: true, Inflight: 1, MaxQueue: 8})
			p := startProxy(t, s.HTTPAddr)
			c := dial(t, p.url(), client.Options{HTTPClient: hc})
			held := s.Gate.Held()

			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			t0 := time.Now()
			_, err := c.Infer(ctx, x, nil)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("deadline: %v, want an error matching context.DeadlineExceeded", err)
			}
			if d := time.Since(t0); d > 2*time.Second {
				t.Errorf("the deadline of 100ms ended the request after %v", d)
			}
			s.Gate.WaitHeld(t, held+1)

			ctx2, cancel2 := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := c.Infer(ctx2, x, nil)
				errc <- err
			}()
			s.Gate.WaitHeld(t, held+1) // still the first batch: the second request is queued
			time.Sleep(20 * time.Millisecond)
			cancel2()
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("cancelled: %v, want an error matching context.Canceled", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a cancelled request did not return")
			}
			s.Gate.Open()
			before := p.accepted.Load()
			if _, err := c.Infer(context.Background(), x, nil); err != nil {
				t.Fatalf("request after the cancelled ones: %v", err)
			}
			if n := p.accepted.Load() - before; n != 1 {
				t.Errorf("the request after two cut short opened %d connections, want 1 (theirs are not reused)", n)
			}
		})
	}
}

// TestHTTPClientsServerErrors: the server's refusals are ServerErrors
// with its message, also when it answers before reading the whole body.
func TestHTTPClientsServerErrors(t *testing.T) {
	s := servertest.Start(t, servertest.Options{MaxQueue: 64, Server: func(c *server.Config) { c.MaxRequestBytes = 64 << 10 }})
	for _, hc := range httpClients {
		t.Run(hc, func(t *testing.T) {
			c := dial(t, "http://"+s.HTTPAddr, client.Options{HTTPClient: hc})
			for _, tc := range []struct {
				name     string
				n, px    int
				status   int
				code     codes.Code
				want     string
				leanOnly bool
			}{
				{"wrong-size", 1, 17, 400, codes.InvalidArgument, "17", false},
				// 92 KB: refused once the header says how large it is,
				// before the tensor is read.
				{"too-large", 30, 16, 413, codes.InvalidArgument, "limit", false},
				// 6 MB, more than the sockets buffer: refused from its
				// Content-Length, unread, the connection closed while the
				// client still writes (net/http sends chunked bodies,
				// whose length the server learns from the JSON).
				{"too-large-unread", 2000, 16, 413, codes.InvalidArgument, "limit", true},
			} {
				if tc.leanOnly && hc != client.HTTPLean {
					continue
				}
				_, err := c.Infer(context.Background(), images(tc.n, tc.px, 11), nil)
				var se *client.ServerError
				if !errors.As(err, &se) || se.HTTPStatus != tc.status || se.Code != tc.code || !strings.Contains(se.Message, tc.want) {
					t.Errorf("%s: %v; want a %d ServerError saying %q", tc.name, err, tc.status, tc.want)
				}
			}
			if _, err := c.Infer(context.Background(), images(1, 16, 12), nil); err != nil {
				t.Fatalf("request after the refusals: %v", err)
			}
		})
	}
	// A refusal read whole leaves the lean client's connection in use.
	p := startProxy(t, s.HTTPAddr)
	c := dial(t, p.url(), client.Options{})
	before := p.accepted.Load()
	for i := range 5 {
		var se *client.ServerError
		if _, err := c.Infer(context.Background(), images(1, 17, 13), nil); !errors.As(err, &se) || se.HTTPStatus != 400 {
			t.Fatalf("refusal %d: %v", i, err)
		}
	}
	if _, err := c.Infer(context.Background(), images(1, 16, 13), nil); err != nil {
		t.Fatal(err)
	}
	if n := p.accepted.Load() - before; n != 1 {
		t.Errorf("5 refusals and a request opened %d connections, want 1", n)
	}
}

func TestDialRejectsUnknownHTTPClient(t *testing.T) {
	_, err := client.DialOptions(context.Background(), "http://127.0.0.1:1", client.Options{HTTPClient: "curl", Model: "m"})
	if err == nil || !strings.Contains(err.Error(), `"curl"`) {
		t.Fatalf("HTTPClient curl: %v", err)
	}
}

// TestLeanHTTPServerDrains: a draining server answers a request on an open
// connection with 503 and Connection: close; the lean client reports the
// server's answer, not a transport error, and the request in flight when
// the drain began is answered.
func TestLeanHTTPServerDrains(t *testing.T) {
	// Batches of one image: each request takes exactly one of the gate's
	// tokens.
	s := servertest.Start(t, servertest.Options{Gated: true, Inflight: 1, MaxQueue: 8, MaxBatch: 1,
		Server: func(c *server.Config) { c.DrainGrace = 2 * time.Second }})
	c := dial(t, "http://"+s.HTTPAddr, client.Options{})
	x := images(1, 16, 14)
	// Two connections open and idle.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := c.Infer(context.Background(), x, nil); err != nil {
				t.Error(err)
			}
		})
	}
	s.Gate.Release(2)
	wg.Wait()

	held := s.Gate.Held()
	inflight := make(chan error, 1)
	go func() {
		_, err := c.Infer(context.Background(), x, nil)
		inflight <- err
	}()
	s.Gate.WaitHeld(t, held+1)
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop() }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		resp, err := http.Get("http://" + s.HTTPAddr + "/v2/health/ready")
		if err != nil || resp.StatusCode != http.StatusOK {
			if resp != nil {
				resp.Body.Close()
			}
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("the server did not start draining")
		}
	}
	_, err := c.Infer(context.Background(), x, nil)
	var se *client.ServerError
	if !errors.As(err, &se) || se.HTTPStatus != http.StatusServiceUnavailable || se.Code != codes.Unavailable {
		t.Fatalf("request during the drain: %v; want the server's 503 (Unavailable)", err)
	}
	s.Gate.Open()
	if err := <-inflight; err != nil {
		t.Errorf("the request in flight when the drain began: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("drain: %v", err)
	}
}
