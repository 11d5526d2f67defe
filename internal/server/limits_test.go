package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"goinfer/internal/kservepb"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// rawRequest opens a connection and sends an inference request's headers,
// declaring a body of contentLength bytes, followed by the first bytes of
// that body. The caller owns the connection.
func rawRequest(t *testing.T, s *servertest.Server, contentLength int, extraHeader string, body []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n%s\r\n", s.Name, contentLength, extraHeader)
	if len(body) > 0 {
		if _, err := c.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// readResponse reads one response from a raw connection.
func readResponse(t *testing.T, c net.Conn, within time.Duration) (*http.Response, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&b)
	return resp, b.String()
}

const budgetMetric = "goinfer_inflight_request_bytes"

func TestMemoryBudgetRefusesAndReleases(t *testing.T) {
	const limit = 1 << 20
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) {
		c.MaxRequestBytes = limit
		c.MaxInflightBytes = 3 * limit / 2
	}})
	img := tensor.F32Bytes(randImages(1, 16, 21))
	hdr := map[string]any{"inputs": []any{binaryInput("FP32", []int{1, 3, 16, 16}, len(img))}}

	// One client declares a body of the largest size and sends a little of
	// it: the budget holds the declared bytes while it waits.
	holder := rawRequest(t, s, limit, "", []byte(`{"inputs"`))
	defer holder.Close()
	waitMetric(t, s, budgetMetric, limit)

	// A second one that does not fit is refused before its body is read.
	tests := []struct {
		name   string
		length int
		status int
	}{
		{"does not fit", limit, 503},
		{"fits beside it", limit / 4, 400}, // then fails on its truncated JSON
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := rawRequest(t, s, tt.length, "", nil)
			defer c.Close()
			if tt.status == 400 {
				c.(*net.TCPConn).CloseWrite() // the body ends early
			}
			resp, body := readResponse(t, c, 5*time.Second)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d %s, want %d", resp.StatusCode, body, tt.status)
			}
			if tt.status == 503 {
				if resp.Header.Get("Retry-After") == "" || !resp.Close || !strings.Contains(body, "--max_inflight_bytes") {
					t.Errorf("503 without Retry-After, Connection: close or the flag's name: %v %s", resp.Header, body)
				}
			}
		})
	}
	// A chunked body declares nothing: it takes the budget as it grows,
	// and is refused once it does not fit.
	t.Run("chunked body outgrows the budget", func(t *testing.T) {
		c, err := net.Dial("tcp", s.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", s.Name)
		chunk := bytes.Repeat([]byte{' '}, 600<<10)
		fmt.Fprintf(c, "%x\r\n%s\r\n", len(chunk), chunk)
		resp, body := readResponse(t, c, 5*time.Second)
		if resp.StatusCode != 503 || !strings.Contains(body, "--max_inflight_bytes") {
			t.Fatalf("status %d %s, want 503 naming --max_inflight_bytes", resp.StatusCode, body)
		}
	})
	if got, _ := metricValue(t, s, `goinfer_requests_total{protocol="http",status="memory_full"}`); got != 2 {
		t.Errorf("memory_full requests counted %v, want 2", got)
	}

	// The holder goes away mid-body: its bytes come back, and requests
	// are served again.
	holder.Close()
	waitMetric(t, s, budgetMetric, 0)
	if r := inferBinary(t, s, hdr, img); r.status != 200 {
		t.Fatalf("after release: %d %s", r.status, r.body)
	}
	waitMetric(t, s, budgetMetric, 0)
}

func TestJSONShapeCheckedBeforeAllocating(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) {
		c.MaxRequestBytes = 1 << 20
	}})
	// 86-byte bodies declaring a batch far larger than the budget: refused
	// as malformed before their tensor is allocated or budgeted.
	body := []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[256,3,16,16],"data":[1,2,3]}]}`)
	var wg sync.WaitGroup
	errs := make(chan string, 20)
	for range 20 {
		wg.Go(func() {
			r := do(t, "POST", "http://"+s.HTTPAddr+"/v2/models/"+s.Name+"/infer", body, nil)
			if r.status != 400 || !strings.Contains(string(r.body), "too few for the 196608 values") {
				errs <- fmt.Sprintf("%d %s", r.status, r.body)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got, _ := metricValue(t, s, `goinfer_requests_total{protocol="http",status="memory_full"}`); got != 0 {
		t.Errorf("%v requests refused for memory; the shape check should come first", got)
	}
	waitMetric(t, s, budgetMetric, 0)
}

func TestSlowBodyCutOff(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) {
		c.ReadTimeout = 300 * time.Millisecond
	}})
	// 10 of 1,000 declared bytes, then nothing.
	c := rawRequest(t, s, 1000, "", []byte(`{"inputs":`))
	defer c.Close()
	start := time.Now()
	resp, body := readResponse(t, c, 5*time.Second)
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close || !strings.Contains(body, "--read_timeout") {
		t.Fatalf("status %d close=%v %s, want 408 with Connection: close naming --read_timeout", resp.StatusCode, resp.Close, body)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("cut off after %v", took)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the connection stayed open after the 408")
	}
	waitMetric(t, s, budgetMetric, 0)

	// A request that arrives in time and then waits for its batch longer
	// than the read timeout is not cut off.
	g := servertest.Start(t, servertest.Options{Gated: true, Server: func(c *server.Config) {
		c.ReadTimeout = 500 * time.Millisecond
	}})
	img := tensor.F32Bytes(randImages(1, 16, 22))
	hdr := map[string]any{"inputs": []any{binaryInput("FP32", []int{1, 3, 16, 16}, len(img))}}
	done := make(chan httpResult, 1)
	go func() { done <- inferBinary(t, g, hdr, img) }()
	g.Gate.WaitHeld(t, 1)
	time.Sleep(900 * time.Millisecond)
	g.Gate.Open()
	if r := <-done; r.status != 200 {
		t.Errorf("a request waiting past --read_timeout: %d %s", r.status, r.body)
	}
}

func TestConnectionLimit(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) {
		c.MaxConnections = 2
	}})
	get := func(c net.Conn) {
		fmt.Fprintf(c, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", s.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for _, c := range conns[:2] {
		get(c)
		if resp, _ := readResponse(t, c, 5*time.Second); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	// The third waits in the backlog while two are open...
	get(conns[2])
	conns[2].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := conns[2].Read(make([]byte, 1)); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection answered (%d bytes, %v) beyond the limit of 2", n, err)
	}
	// ...and is served once one closes.
	conns[0].Close()
	if resp, _ := readResponse(t, conns[2], 5*time.Second); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// postBinary posts a binary request and reports, besides the answer,
// whether the server asked for the connection to be closed. A transport
// error is status -1.
func postBinary(s *servertest.Server, hj, data []byte) (httpResult, bool) {
	req, err := http.NewRequest("POST", "http://"+s.HTTPAddr+"/v2/models/"+s.Name+"/infer", bytes.NewReader(append(hj[:len(hj):len(hj)], data...)))
	if err != nil {
		return httpResult{status: -1, body: []byte(err.Error())}, false
	}
	req.Header.Set(server.HeaderContentLength, strconv.Itoa(len(hj)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return httpResult{status: -1, body: []byte(err.Error())}, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpResult{status: -1, body: []byte(err.Error())}, false
	}
	return httpResult{resp.StatusCode, resp.Header, b}, resp.Close
}

// TestDrainUnderLoad shuts the server down under concurrent keep-alive
// load: every request is answered (200, or 503 with Connection: close once
// the drain began), and no client sees a transport error.
func TestDrainUnderLoad(t *testing.T) {
	s := servertest.Start(t, servertest.Options{MaxQueue: 64, Server: func(c *server.Config) {
		c.DrainGrace = time.Second
	}})
	img := tensor.F32Bytes(randImages(1, 16, 23))
	hj, err := json.Marshal(map[string]any{"inputs": []any{binaryInput("FP32", []int{1, 3, 16, 16}, len(img))}})
	if err != nil {
		t.Fatal(err)
	}
	const clients = 16
	type tally struct{ ok, refused, drainingNoClose, other int }
	results := make(chan tally, clients)
	var started sync.WaitGroup
	started.Add(clients)
	for range clients {
		go func() {
			var tl tally
			defer func() { results <- tl }()
			once := sync.OnceFunc(started.Done)
			defer once()
			for {
				r, closed := postBinary(s, hj, img)
				switch {
				case r.status == 200:
					tl.ok++
					once()
				case r.status == 503 && strings.Contains(string(r.body), "shutting down"):
					// A load balancer would take the server out now.
					tl.refused++
					if !closed {
						tl.drainingNoClose++
					}
					return
				case r.status == 503: // queue full: retry
				default:
					tl.other++
					t.Errorf("status %d: %s", r.status, r.body)
					return
				}
			}
		}()
	}
	started.Wait()
	if err := s.Stop(); err != nil {
		t.Errorf("drain: %v", err)
	}
	var sum tally
	for range clients {
		tl := <-results
		sum.ok += tl.ok
		sum.refused += tl.refused
		sum.drainingNoClose += tl.drainingNoClose
		sum.other += tl.other
	}
	t.Logf("answered %d, refused while draining %d", sum.ok, sum.refused)
	if sum.other != 0 || sum.drainingNoClose != 0 {
		t.Errorf("%d transport errors or odd answers, %d 503s without Connection: close", sum.other, sum.drainingNoClose)
	}
	if sum.refused == 0 {
		t.Error("no client saw the drain's 503: the grace period did not answer them")
	}
}

func TestDrainGRPC(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) {
		c.DrainGrace = 300 * time.Millisecond
	}})
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := kservepb.NewGRPCInferenceServiceClient(conn)
	ctx := context.Background()
	if _, err := cl.ServerLive(ctx, &kservepb.ServerLiveRequest{}); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop() }()
	// GOAWAY: the client's next RPCs fail UNAVAILABLE, not with a reset.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := cl.ModelReady(ctx, &kservepb.ModelReadyRequest{Name: s.Name})
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("after the drain began: %v, want UNAVAILABLE", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("gRPC still served 5 s into the drain")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-stopped; err != nil {
		t.Errorf("drain: %v", err)
	}
}

func TestGRPCMemoryBudget(t *testing.T) {
	const limit = 1 << 20
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) {
		c.MaxRequestBytes = limit
		c.MaxInflightBytes = 3 * limit / 2
	}})
	cl := kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
	holder := rawRequest(t, s, limit, "", nil)
	defer holder.Close()
	waitMetric(t, s, budgetMetric, limit)

	// 192 images (576 KiB): read by gRPC, then refused by the budget
	// (1 MiB + 576 KiB > 1.5 MiB).
	_, err := cl.ModelInfer(ctxT(t), rawInfer(randImages(192, 16, 24), 192))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max_inflight_bytes") {
		t.Fatalf("a message beyond the budget: %v, want RESOURCE_EXHAUSTED naming --max_inflight_bytes", err)
	}
	// With less free than the tap's threshold, RPCs are refused before
	// their message is read.
	second := rawRequest(t, s, limit/4, "", nil)
	defer second.Close()
	waitMetric(t, s, budgetMetric, limit+limit/4)
	_, err = cl.ModelInfer(ctxT(t), rawInfer(randImages(1, 16, 25), 1))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a small message with the budget spent: %v, want RESOURCE_EXHAUSTED", err)
	}
	holder.Close()
	second.Close()
	waitMetric(t, s, budgetMetric, 0)
	if _, err := cl.ModelInfer(ctxT(t), rawInfer(randImages(1, 16, 25), 1)); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if got, _ := metricValue(t, s, `goinfer_requests_total{protocol="grpc",status="memory_full"}`); got != 2 {
		t.Errorf("memory_full gRPC requests counted %v, want 2", got)
	}
}
