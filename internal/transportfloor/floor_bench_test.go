package transportfloor_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// The transport floor: what carrying one request of an inference's size
// (a 250x250 FP32 image, 750 KB) and an answer of 4,000 bytes costs over
// loopback with nothing else on the path, for gRPC-Go (the settings the
// server and bench use) and for HTTP/1.1 (a minimal server and net/http's,
// each with a client that writes head and body in one writev). No
// goinfer code runs: the gap between the two is the transports'.

const (
	floorRequest = 3 * 250 * 250 * 4
	floorAnswer  = 4000
)

// floorCodec carries raw bytes. Unmarshal gathers the received frames into
// the caller's buffer, as the server's codec gathers a tensor.
type floorCodec struct{}

func (floorCodec) Name() string { return "floor" }

func (floorCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (floorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p := v.(*[]byte)
	n := data.Len()
	if cap(*p) < n {
		*p = make([]byte, n)
	}
	*p = (*p)[:n]
	data.CopyTo(*p)
	return nil
}

// plainPool is a mem.BufferPool that, like the server's, does not zero
// what it hands out (gRPC's default pool does): frames are read into
// buffers of their exact size, so every byte is overwritten.
type plainPool struct{ classes [32]sync.Pool }

func (p *plainPool) Get(n int) *[]byte {
	c := bits.Len(uint(max(n, 1) - 1))
	if v := p.classes[c].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func (p *plainPool) Put(b *[]byte) {
	if c := bits.Len(uint(cap(*b) - 1)); cap(*b) == 1<<c {
		p.classes[c].Put(b)
	}
}

// startFloorGRPC serves one unary method that receives the request into a
// reused buffer and answers floorAnswer bytes. zeroing picks gRPC's
// default frame pool instead of the server's non-zeroing one.
func startFloorGRPC(b *testing.B, zeroing bool) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	const window = 16 << 20 // the server's and bench's defaults
	opts := []grpc.ServerOption{grpc.ForceServerCodecV2(floorCodec{}), grpc.MaxRecvMsgSize(64 << 20),
		grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
		grpc.ReadBufferSize(1 << 20), grpc.WriteBufferSize(1 << 20)}
	if !zeroing {
		opts = append(opts, experimental.BufferPool(&plainPool{}))
	}
	s := grpc.NewServer(opts...)
	answer := make([]byte, floorAnswer)
	bufs := sync.Pool{New: func() any { return new([]byte) }}
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "floor.Floor",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			buf := bufs.Get().(*[]byte)
			defer bufs.Put(buf)
			if err := dec(buf); err != nil {
				return nil, err
			}
			return &answer, nil
		}}},
	}, struct{}{})
	go s.Serve(l)
	b.Cleanup(s.Stop)
	return l.Addr().String()
}

// floorHTTPServe answers every request on c with floorAnswer bytes after
// reading its Content-Length body: the least an HTTP/1.1 server does.
func floorHTTPServe(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, 4096)
	body := make([]byte, 0, floorRequest)
	answer := append([]byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", floorAnswer)), make([]byte, floorAnswer)...)
	for {
		n := -1
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) <= 2 {
				break
			}
			if v, ok := cutHeader(line, "Content-Length: "); ok {
				n, _ = strconv.Atoi(v)
			}
		}
		if n < 0 {
			return
		}
		body = body[:n]
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if _, err := c.Write(answer); err != nil {
			return
		}
	}
}

func cutHeader(line []byte, name string) (string, bool) {
	if len(line) < len(name) || string(line[:len(name)]) != name {
		return "", false
	}
	v := line[len(name):]
	for len(v) > 0 && (v[len(v)-1] == '\n' || v[len(v)-1] == '\r') {
		v = v[:len(v)-1]
	}
	return string(v), true
}

func startFloorHTTP(b *testing.B, nethttp bool) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	if nethttp {
		answer := make([]byte, floorAnswer)
		bufs := sync.Pool{New: func() any { b := make([]byte, floorRequest); return &b }}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf := bufs.Get().(*[]byte)
			defer bufs.Put(buf)
			if _, err := io.ReadFull(r.Body, (*buf)[:r.ContentLength]); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			w.Header()["Content-Length"] = []string{strconv.Itoa(floorAnswer)}
			w.Write(answer)
		})}
		go srv.Serve(l)
		b.Cleanup(func() { srv.Close() })
	} else {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go floorHTTPServe(c)
			}
		}()
		b.Cleanup(func() { l.Close() })
	}
	return l.Addr().String()
}

// floorHTTPCall returns a client call over one connection: head and body
// in one writev, then the answer's head and Content-Length body.
func floorHTTPCall(b *testing.B, addr string) func() error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	r := bufio.NewReaderSize(c, 64<<10)
	head := []byte(fmt.Sprintf("POST /floor HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", floorRequest))
	body := make([]byte, floorRequest)
	answer := make([]byte, floorAnswer)
	return func() error {
		bufs := net.Buffers{head, body}
		if _, err := bufs.WriteTo(c); err != nil {
			return err
		}
		n := -1
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return err
			}
			if len(line) <= 2 {
				break
			}
			if v, ok := cutHeader(line, "Content-Length: "); ok {
				n, _ = strconv.Atoi(v)
			}
		}
		if n != floorAnswer {
			return fmt.Errorf("answer of %d bytes", n)
		}
		_, err := io.ReadFull(r, answer)
		return err
	}
}

// BenchmarkTransportFloor reports p50 and p99 of one 750 KB request and
// its 4,000-byte answer, one in flight, per transport.
func BenchmarkTransportFloor(b *testing.B) {
	for _, v := range []struct {
		name    string
		zeroing bool
	}{{"grpc", false}, {"grpc-zeroing-pool", true}} {
		b.Run(v.name, func(b *testing.B) { floorGRPC(b, v.zeroing) })
	}
	b.Run("http", func(b *testing.B) {
		floorLatency(b, floorHTTPCall(b, startFloorHTTP(b, false)))
	})
	b.Run("http-nethttp-server", func(b *testing.B) {
		floorLatency(b, floorHTTPCall(b, startFloorHTTP(b, true)))
	})
}

// floorGRPC times unary calls with the client settings bench uses.
func floorGRPC(b *testing.B, zeroing bool) {
	conn, err := grpc.NewClient(startFloorGRPC(b, zeroing), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(16<<20), grpc.WithInitialConnWindowSize(16<<20),
		grpc.WithReadBufferSize(1<<20), grpc.WithWriteBufferSize(1<<20),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(floorCodec{})))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	req, resp := make([]byte, floorRequest), make([]byte, 0, floorAnswer)
	floorLatency(b, func() error {
		if err := conn.Invoke(context.Background(), floorMethod, &req, &resp); err != nil {
			return err
		}
		if len(resp) != floorAnswer {
			return fmt.Errorf("answer of %d bytes", len(resp))
		}
		return nil
	})
}

// floorLatency runs call b.N times after a warm-up and reports its p50
// and p99.
func floorLatency(b *testing.B, call func() error) {
	for range 50 {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(floorRequest)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
}
