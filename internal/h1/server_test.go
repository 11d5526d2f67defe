package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// served names the loop that answered: the fast loop's writer is
// *response, net/http's is its own.
func served(w http.ResponseWriter) string {
	if _, ok := w.(*response); ok {
		return "fast"
	}
	return "nethttp"
}

// testHandler answers /echo with the body's length and the loop that
// served it, and offers a few misbehaving endpoints.
func testHandler(block chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Served-By", served(w))
		switch r.URL.Path {
		case "/echo":
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, "read error: %v", err)
				return
			}
			fmt.Fprintf(w, "%d %s", n, r.URL.RawQuery)
		case "/unread":
			w.Write([]byte("not read"))
		case "/stream":
			chunk := strings.Repeat("x", 1000)
			for range 100 {
				io.WriteString(w, chunk)
			}
		case "/short":
			w.Header().Set("Content-Length", "10")
			w.Write([]byte("abc"))
		case "/block":
			<-block
			w.Write([]byte("done"))
		case "/abort":
			panic(http.ErrAbortHandler)
		case "/flush":
			w.Header().Set("Content-Length", "4")
			w.Write([]byte("ab"))
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
			w.Write([]byte("cd"))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
}

type testServer struct {
	*Server
	addr    string
	done    chan error
	block   chan struct{}
	release func() // lets /block requests finish
}

func startServer(t *testing.T, configure func(*Server)) *testServer {
	t.Helper()
	block := make(chan struct{})
	h := testHandler(block)
	s := &Server{
		Handler:  h,
		Fallback: &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)},
		Eligible: func(method, path string) bool { return method == "POST" },
		ErrorLog: log.New(io.Discard, "", 0),
	}
	if configure != nil {
		configure(s)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	ts := &testServer{Server: s, addr: l.Addr().String(), done: make(chan error, 1), block: block,
		release: func() { once.Do(func() { close(block) }) }}
	go func() { ts.done <- s.Serve(l) }()
	t.Cleanup(func() {
		ts.release()
		s.Close()
		if err := <-ts.done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return ts
}

// rawConn sends raw requests and reads answers with net/http's parser.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *rawConn) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatal(err)
	}
}

type answer struct {
	status           int
	by, body, header string
	close            bool
}

func (r *rawConn) read() (answer, error) {
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, by: resp.Header.Get("X-Served-By"), body: string(b), close: resp.Close,
		header: fmt.Sprint(resp.Header.Get("Content-Length"), "|", resp.TransferEncoding)}, nil
}

func (r *rawConn) expect(want answer) {
	r.t.Helper()
	got, err := r.read()
	if err != nil {
		r.t.Fatalf("reading the answer: %v", err)
	}
	got.header = ""
	if got != want {
		r.t.Fatalf("answer %+v, want %+v", got, want)
	}
}

// expectClosed checks that the server closed the connection.
func (r *rawConn) expectClosed() {
	r.t.Helper()
	if b, err := r.br.ReadByte(); err == nil {
		r.t.Fatalf("connection still open: read %q", b)
	}
}

func post(path, body string, extra ...string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: x\r\n" + strings.Join(extra, "") + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

func TestServeFastAndHandOff(t *testing.T) {
	tests := []struct {
		name  string
		reqs  []string // written together (pipelined)
		wants []answer
	}{
		{"one fast request", []string{post("/echo?q=1", "hello")}, []answer{{200, "fast", "5 q=1", "", false}}},
		{"pipelined fast requests", []string{post("/echo", "ab"), post("/echo", "")}, []answer{{200, "fast", "2 ", "", false}, {200, "fast", "0 ", "", false}}},
		{"a GET moves the connection to net/http", []string{post("/echo", "a"), "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n", post("/echo", "bb")},
			[]answer{{200, "fast", "1 ", "", false}, {200, "nethttp", "0 ", "", false}, {200, "nethttp", "2 ", "", false}}},
		{"chunked body goes to net/http", []string{"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
			[]answer{{200, "nethttp", "3 ", "", false}}},
		{"HTTP/1.0 goes to net/http", []string{"POST /echo HTTP/1.0\r\nContent-Length: 2\r\n\r\nab"}, []answer{{200, "nethttp", "2 ", "", true}}},
		{"bare line feeds go to net/http", []string{"POST /echo HTTP/1.1\nHost: x\nContent-Length: 1\n\na"}, []answer{{200, "nethttp", "1 ", "", false}}},
		{"no Host goes to net/http (400)", []string{"POST /echo HTTP/1.1\r\nContent-Length: 0\r\n\r\n"}, []answer{{400, "", "400 Bad Request: missing required Host header", "", true}}},
		{"unread small body is skipped", []string{post("/unread", strings.Repeat("z", 1000)), post("/echo", "abc")},
			[]answer{{200, "fast", "not read", "", false}, {200, "fast", "3 ", "", false}}},
		{"chunked answer when streamed", []string{post("/stream", "")}, []answer{{200, "fast", strings.Repeat("x", 100000), "", false}}},
		{"flush sends what was written", []string{post("/flush", ""), post("/echo", "")}, []answer{{200, "fast", "abcd", "", false}, {200, "fast", "0 ", "", false}}},
		{"client asks to close", []string{post("/echo", "a", "Connection: close\r\n")}, []answer{{200, "fast", "1 ", "", true}}},
		{"large head goes to net/http", []string{post("/echo", "a", "X-Big: "+strings.Repeat("b", 5000)+"\r\n")}, []answer{{200, "nethttp", "1 ", "", false}}},
	}
	ts := startServer(t, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, ts.addr)
			c.send(strings.Join(tc.reqs, ""))
			for _, w := range tc.wants {
				c.expect(w)
			}
			if tc.wants[len(tc.wants)-1].close {
				c.expectClosed()
			}
		})
	}
}

func TestAnswerFraming(t *testing.T) {
	ts := startServer(t, nil)
	for _, tc := range []struct{ path, header string }{
		{"/echo", "2|[]"},         // whole answer ("1 "): Content-Length from the buffer
		{"/stream", "|[chunked]"}, // streamed without a declared length
		{"/flush", "4|[]"},        // flushed with a declared length
	} {
		c := dial(t, ts.addr)
		c.send(post(tc.path, "a"))
		got, err := c.read()
		if err != nil {
			t.Fatal(err)
		}
		if got.header != tc.header {
			t.Errorf("%s: Content-Length|Transfer-Encoding %q, want %q", tc.path, got.header, tc.header)
		}
	}
}

func TestBrokenAnswersClose(t *testing.T) {
	ts := startServer(t, nil)
	t.Run("short body", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.send(post("/short", ""))
		if _, err := c.read(); err == nil {
			t.Fatal("a body shorter than its Content-Length read whole")
		}
	})
	t.Run("aborted handler", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.send(post("/abort", ""))
		c.expectClosed()
	})
	t.Run("large unread body", func(t *testing.T) {
		c := dial(t, ts.addr)
		body := strings.Repeat("z", discardMax+1)
		go io.WriteString(c.c, post("/unread", body))
		c.expect(answer{200, "fast", "not read", "", true})
		c.expectClosed()
	})
}

func TestTimeouts(t *testing.T) {
	ts := startServer(t, func(s *Server) {
		s.ReadHeaderTimeout = 100 * time.Millisecond
		s.ReadTimeout = 200 * time.Millisecond
	})
	t.Run("head never sent", func(t *testing.T) {
		c := dial(t, ts.addr)
		t0 := time.Now()
		c.expectClosed()
		if d := time.Since(t0); d > 5*time.Second {
			t.Fatalf("closed after %v", d)
		}
	})
	t.Run("body too slow", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
		got, err := c.read()
		if err != nil {
			t.Fatal(err)
		}
		if got.status != http.StatusBadRequest || !strings.Contains(got.body, "timeout") {
			t.Fatalf("answer %+v, want a 400 naming the timeout", got)
		}
	})
}

func TestShutdownWaitsForActive(t *testing.T) {
	ts := startServer(t, nil)
	idle := dial(t, ts.addr)
	idle.send(post("/echo", ""))
	idle.expect(answer{200, "fast", "0 ", "", false})
	busy := dial(t, ts.addr)
	busy.send(post("/block", ""))
	// Wait until the blocked request is in its handler.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if activeConns(ts.Server) == 1 || time.Now().After(deadline) {
			break
		}
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := ts.Shutdown(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a request blocked: %v, want the deadline", err)
	}
	idle.expectClosed()
	if _, err := net.Dial("tcp", ts.addr); err == nil {
		t.Fatal("the listener still accepts after Shutdown")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var shutErr error
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shutErr = ts.Shutdown(ctx)
	}()
	time.Sleep(20 * time.Millisecond)
	ts.release()
	busy.expect(answer{200, "fast", "done", "", true})
	wg.Wait()
	if shutErr != nil {
		t.Fatalf("Shutdown after the request finished: %v", shutErr)
	}
}

func activeConns(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if c.state.Load() == stateActive {
			n++
		}
	}
	return n
}

// countingListener counts the writes on its connections.
type countingListener struct {
	net.Listener
	mu     sync.Mutex
	writes int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.l.writes++
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

// TestOneWritePerAnswer checks the reason for the fast loop: an answer of
// a little over 4 KiB (a batch-1 classifier's logits and their JSON
// header), on a wrapped connection, goes out in one write.
func TestOneWritePerAnswer(t *testing.T) {
	logits := strings.Repeat("l", 4000)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Inference-Header-Content-Length", "200")
		w.Header().Set("Content-Length", "4200")
		w.Write([]byte(strings.Repeat("j", 200)))
		w.Write([]byte(logits))
		http.NewResponseController(w).Flush()
	})
	s := &Server{Handler: h, Fallback: &http.Server{Handler: h}, Eligible: func(string, string) bool { return true }}
	base, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{Listener: base}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	defer func() { s.Close(); <-done }()
	c := dial(t, base.Addr().String())
	for i := range 3 {
		c.send(post("/infer", strings.Repeat("t", 100000)))
		got, err := c.read()
		if err != nil || len(got.body) != 4200 {
			t.Fatalf("answer %d: %d bytes, %v", i, len(got.body), err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.writes != 3 {
		t.Fatalf("%d writes for 3 answers, want 3", l.writes)
	}
}

// TestStopRacesServe stops servers whose Serve goroutine may not have
// started yet (a server told to drain as it comes up): under -race this
// is where Serve's first-call setup met Shutdown's reads. Serve must still
// return ErrServerClosed and release its listener.
func TestStopRacesServe(t *testing.T) {
	for _, stop := range []struct {
		name string
		do   func(*Server) error
	}{
		{"Shutdown", func(s *Server) error { return s.Shutdown(context.Background()) }},
		{"Close", (*Server).Close},
	} {
		t.Run(stop.name, func(t *testing.T) {
			for i := 0; i < 50; i++ {
				h := testHandler(make(chan struct{}))
				s := &Server{
					Handler:  h,
					Fallback: &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)},
					Eligible: func(string, string) bool { return true },
					ErrorLog: log.New(io.Discard, "", 0),
				}
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- s.Serve(l) }()
				if err := stop.do(s); err != nil {
					t.Fatalf("%s: %v", stop.name, err)
				}
				select {
				case err := <-done:
					if !errors.Is(err, ErrServerClosed) {
						t.Fatalf("Serve returned %v, want ErrServerClosed", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Serve did not return after " + stop.name)
				}
				if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
					c.Close()
					t.Fatal("the listener still accepts after " + stop.name)
				}
			}
		})
	}
}
