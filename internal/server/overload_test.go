package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"goinfer/internal/kservepb"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// TestOverload runs four times more clients than the queue holds, half over
// HTTP and half over gRPC, each sending its own image back to back. Every
// answer must be the client's own (id and logits), every refusal a
// 503/RESOURCE_EXHAUSTED, the server's counts must match the clients', and
// the heap must stay bounded. GOINFER_OVERLOAD_SECONDS lengthens the run
// (2 s by default).
func TestOverload(t *testing.T) {
	dur := 2 * time.Second
	if v := os.Getenv("GOINFER_OVERLOAD_SECONDS"); v != "" {
		secs, err := strconv.Atoi(v)
		if err != nil || secs < 1 {
			t.Fatalf("GOINFER_OVERLOAD_SECONDS=%q is not a number of seconds", v)
		}
		dur = time.Duration(secs) * time.Second
	}
	const queue, clients = 8, 32
	s := servertest.Start(t, servertest.Options{MaxQueue: queue, MaxBatch: 4, MaxDelay: time.Millisecond})
	conn := dialGRPC(t, s.GRPCAddr)
	gc := kservepb.NewGRPCInferenceServiceClient(conn)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}

	var ok, refused atomic.Int64
	var peakHeap atomic.Uint64
	stop := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peakHeap.Load() {
				peakHeap.Store(ms.HeapInuse)
			}
		}
	}()
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for c := range clients {
		x := randImages(1, 16, uint64(1000+c))
		want := s.Expected(t, x, 1)
		data := tensor.F32Bytes(x)
		useGRPC := c%2 == 1
		wg.Go(func() {
			for seq := 0; time.Now().Before(deadline); seq++ {
				id := fmt.Sprintf("c%d-%d", c, seq)
				var got []float32
				var gotID string
				if useGRPC {
					req := rawInfer(x, 1)
					req.Id = id
					resp, err := gc.ModelInfer(context.Background(), req)
					if status.Code(err) == codes.ResourceExhausted {
						refused.Add(1)
						continue
					}
					if err != nil {
						t.Errorf("client %d: %v", c, err)
						return
					}
					gotID, got = resp.Id, rawLogits(t, resp)
				} else {
					hdr, _ := json.Marshal(map[string]any{"id": id, "inputs": []any{binaryInput("FP32", []int{1, 3, 16, 16}, len(data))},
						"parameters": map[string]any{"binary_data_output": true}})
					req, _ := http.NewRequest("POST", "http://"+s.HTTPAddr+"/v2/models/tiny/infer", strings.NewReader(string(hdr)+string(data)))
					req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(hdr)))
					resp, err := hc.Do(req)
					if err != nil {
						t.Errorf("client %d: %v", c, err)
						return
					}
					r := httpResult{status: resp.StatusCode, header: resp.Header}
					r.body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil {
						t.Errorf("client %d: %v", c, err)
						return
					}
					if r.status == 503 && r.header.Get("Retry-After") != "" {
						refused.Add(1)
						continue
					}
					jr, bin := splitResponse(t, r)
					gotID = jr.ID
					got = append([]float32(nil), tensor.BytesF32(bin)...)
				}
				if gotID != id {
					t.Errorf("client %d: answer for %q, want %q", c, gotID, id)
					return
				}
				if e := servertest.RelErr(got, want); e > 1e-3 {
					t.Errorf("client %d request %s: logits of another image (error %.2g)", c, id, e)
					return
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	// Under load the transport can dial a connection that its request
	// then does not use (another one fell idle first). The server sees it
	// as new, not idle, and http.Server.Shutdown waits 5 s before it
	// closes such a connection: as long as the test server's drain
	// timeout, which then reported the drain cut short.
	hc.CloseIdleConnections()
	t.Logf("%v: %d answered, %d refused, peak heap %.1f MiB, peak RSS %s", dur, ok.Load(), refused.Load(), float64(peakHeap.Load())/(1<<20), peakRSS())
	if ok.Load() == 0 {
		t.Fatal("no request was answered")
	}
	var served float64
	for _, p := range []string{"http", "grpc"} {
		v, _ := metricValue(t, s, `goinfer_requests_total{protocol="`+p+`",status="success"}`)
		served += v
	}
	var full float64
	for _, p := range []string{"http", "grpc"} {
		v, _ := metricValue(t, s, `goinfer_requests_total{protocol="`+p+`",status="queue_full"}`)
		full += v
	}
	if int64(served) != ok.Load() || int64(full) != refused.Load() {
		t.Errorf("server counted %v answered and %v refused; clients %d and %d", served, full, ok.Load(), refused.Load())
	}
	if peak := peakHeap.Load(); peak > 256<<20 {
		t.Errorf("peak heap %d MiB: memory grew with the overload", peak>>20)
	}
}

// peakRSS is the process's peak resident set (Linux), for the log.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
