package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"goinfer/internal/kservepb"
	"goinfer/internal/server"
	"goinfer/internal/server/servertest"
)

const budgetMaxMetric = "goinfer_inflight_request_bytes_max"

// grpcHolder is a raw HTTP/2 client that starts a ModelInfer RPC
// declaring a message of declared bytes, sends the first sent of them and
// holds the rest, as a client on a slow link (or an attacker) would.
type grpcHolder struct {
	conn net.Conn
	fr   *http2.Framer
}

func startGRPCHolder(t *testing.T, addr string, declared, sent int) *grpcHolder {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := &grpcHolder{conn: c, fr: http2.NewFramer(c, c)}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/inference.GRPCInferenceService/ModelInfer"},
		{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	msg := make([]byte, 5+sent)
	binary.BigEndian.PutUint32(msg[1:], uint32(declared))
	_, err = c.Write([]byte(http2.ClientPreface))
	if err == nil {
		err = h.fr.WriteSettings()
	}
	if err == nil {
		err = h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	}
	for len(msg) > 0 && err == nil {
		n := min(len(msg), 16<<10)
		err = h.fr.WriteData(1, false, msg[:n])
		msg = msg[n:]
	}
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// noStatus is what grpcHolder.status returns when no status came.
const noStatus = codes.Code(1 << 31)

// status waits up to within for the RPC's grpc-status, or returns noStatus.
func (h *grpcHolder) status(t *testing.T, within time.Duration) codes.Code {
	t.Helper()
	h.conn.SetReadDeadline(time.Now().Add(within))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return noStatus
		}
		if m, ok := f.(*http2.MetaHeadersFrame); ok && m.StreamID == 1 {
			if v := m.PseudoValue("status"); v != "" && v != "200" {
				t.Fatalf("HTTP status %s", v)
			}
			for _, hf := range m.RegularFields() {
				if hf.Name == "grpc-status" {
					var c int
					for _, d := range hf.Value {
						c = 10*c + int(d-'0')
					}
					return codes.Code(c)
				}
			}
		}
	}
}

// TestGRPCReceiveBudget checks that gRPC messages still arriving are under
// the in-flight budget: RPCs holding their message back take a
// reservation each, further RPCs are refused RESOURCE_EXHAUSTED before
// their messages are read, held messages are cut off after --read_timeout,
// many large messages at once are each answered or refused, and every
// byte goes back to the budget, also for RPCs reset mid-message.
func TestGRPCReceiveBudget(t *testing.T) {
	const (
		limit   = 256 << 10
		budget  = 512 << 10
		reserve = budget / 4 // the tap's: min(1 MiB, budget/4)
		images  = 16         // 48 KiB of FP32 16x16 images
	)
	readTimeout := 1500 * time.Millisecond
	s := servertest.Start(t, servertest.Options{Server: func(c *server.Config) {
		c.MaxRequestBytes = limit
		c.MaxInflightBytes = budget
		c.ReadTimeout = readTimeout
	}})
	conn := dialGRPC(t, s.GRPCAddr)
	cl := kservepb.NewGRPCInferenceServiceClient(conn)
	x := randImages(images, 16, 31)

	// Four RPCs holding 200 KiB messages back take the whole budget.
	start := time.Now()
	for range budget / reserve {
		startGRPCHolder(t, s.GRPCAddr, 200<<10, 10<<10)
	}
	waitMetric(t, s, budgetMetric, budget)
	if c := startGRPCHolder(t, s.GRPCAddr, 200<<10, 10<<10).status(t, 5*time.Second); c != codes.ResourceExhausted {
		t.Errorf("a fifth held message: status %v, want RESOURCE_EXHAUSTED", c)
	}
	if _, err := cl.ModelInfer(ctxT(t), rawInfer(x, images)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a request beside the held messages: %v, want RESOURCE_EXHAUSTED", err)
	}
	// --read_timeout cuts the held messages off and frees the budget.
	waitMetric(t, s, budgetMetric, 0)
	if el := time.Since(start); el < readTimeout {
		t.Errorf("budget freed after %v, before --read_timeout (%v)", el, readTimeout)
	}
	if _, err := cl.ModelInfer(ctxT(t), rawInfer(x, images)); err != nil {
		t.Fatalf("after the held messages were cut off: %v", err)
	}

	// Many messages at once, on one connection and on one each.
	for _, conns := range []int{1, 48} {
		cls := make([]kservepb.GRPCInferenceServiceClient, conns)
		for i := range cls {
			cls[i] = kservepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.GRPCAddr))
		}
		var mu sync.Mutex
		got := map[codes.Code]int{}
		var wg sync.WaitGroup
		for i := range 48 {
			wg.Go(func() {
				_, err := cls[i%conns].ModelInfer(ctxT(t), rawInfer(x, images))
				mu.Lock()
				got[status.Code(err)]++
				mu.Unlock()
				if c := status.Code(err); c != codes.OK && c != codes.ResourceExhausted {
					t.Errorf("%d connections, RPC %d: %v, want OK or RESOURCE_EXHAUSTED", conns, i, err)
				}
			})
		}
		wg.Wait()
		if got[codes.OK] == 0 {
			t.Errorf("%d connections: answers %v, want some OK", conns, got)
		}
		waitMetric(t, s, budgetMetric, 0)
	}
	if peak, _ := metricValue(t, s, budgetMaxMetric); peak != budget {
		t.Errorf("held at most %v bytes at once, want the budget, %v", peak, budget)
	}

	// RPCs reset while their message arrives give their reservation back.
	for i := range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{}, "/inference.GRPCInferenceService/ModelInfer")
		if err == nil {
			go func() { time.Sleep(time.Duration(i%5) * 100 * time.Microsecond); cancel() }()
			st.SendMsg(rawInfer(randImages(80, 16, 32), 80))
		}
		cancel()
	}
	// The client may still be writing a reset stream's headers when the
	// budget first reads 0 (its writer runs on its own goroutine): a
	// refusal then is retried until every reservation is back.
	waitMetric(t, s, budgetMetric, 0)
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := cl.ModelInfer(ctxT(t), rawInfer(x, images))
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("after the resets: %v", err)
		}
		waitMetric(t, s, budgetMetric, 0)
	}
}
