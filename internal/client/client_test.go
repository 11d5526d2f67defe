package client_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"goinfer/internal/backend"
	"goinfer/internal/client"
	"goinfer/internal/engine"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

func images(n, size int, seed uint64) *tensor.Tensor {
	rng := rand.New(rand.NewPCG(seed, 3))
	v := make([]float32, n*3*size*size)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	t, _ := tensor.FromFloat32(tensor.Shape{n, 3, size, size}, v)
	return t
}

func urls(s *servertest.Server) map[string]string {
	return map[string]string{"http": "http://" + s.HTTPAddr, "grpc": "grpc://" + s.GRPCAddr}
}

func dial(t *testing.T, url string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.DialOptions(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDialAndMetadata(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			for _, u := range []string{url, url + "?model=tiny"} {
				c := dial(t, u, client.Options{})
				if c.Model() != "tiny" {
					t.Fatalf("%s: model %q", u, c.Model())
				}
			}
			c := dial(t, url, client.Options{})
			md, err := c.Metadata(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if md.Server != "goinfer" || md.Model != "tiny" || md.Version != "1" || md.InputName != "input" ||
				md.InputDType != tensor.Float32 || md.OutputName != "logits" || md.Classes != 10 ||
				len(md.InputShape) != 4 || md.InputShape[2] != 16 {
				t.Fatalf("metadata %+v", md)
			}
			bad := dial(t, url, client.Options{Model: "nope"})
			if _, err := bad.Metadata(context.Background()); err == nil || !strings.Contains(err.Error(), "unknown model") {
				t.Fatalf("metadata of an unknown model: %v", err)
			}
		})
	}
	for _, u := range []string{"ftp://x:1", "localhost:8000", "http://"} {
		if _, err := client.Dial(context.Background(), u); err == nil {
			t.Errorf("Dial(%q) succeeded", u)
		}
	}
	c := dial(t, "http://"+s.HTTPAddr+"/v2/models/tiny", client.Options{})
	if c.Model() != "tiny" {
		t.Errorf("model from the URL path: %q", c.Model())
	}
}

func TestWaitReady(t *testing.T) {
	s := servertest.Start(t, servertest.Options{NoModel: true})
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			c := dial(t, url+"?model=tiny", client.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if _, err := c.WaitReady(ctx, 5*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("WaitReady on a loading server: %v", err)
			}
		})
	}
	go func() {
		time.Sleep(30 * time.Millisecond)
		s.Srv.SetModel(s.Model())
	}()
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			c := dial(t, url, client.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			md, err := c.WaitReady(ctx, 5*time.Millisecond)
			if err != nil || md.Classes != 10 {
				t.Fatalf("WaitReady: %+v %v", md, err)
			}
		})
	}
}

func TestInferMatchesReference(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	x := images(3, 16, 1)
	want := s.Expected(t, x.Float32s(), 3)
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			c := dial(t, url, client.Options{})
			out := make([]float32, 30)
			got, err := c.Infer(context.Background(), x, out)
			if err != nil {
				t.Fatal(err)
			}
			if &got[0] != &out[0] {
				t.Error("logits were not written into the caller's buffer")
			}
			if e := servertest.RelErr(got, want); e > 1e-3 {
				t.Fatalf("logits differ from the reference by %.2g", e)
			}
			// UINT8 pixels are normalized by the server.
			u8 := tensor.New(tensor.Uint8, 1, 3, 16, 16)
			for i := range u8.Data {
				u8.Data[i] = byte(i)
			}
			norm := make([]float32, len(u8.Data))
			for i, p := range u8.Data {
				c := i / 256
				norm[i] = (float32(p)/255 - engine.ImageNetMean[c]) / engine.ImageNetStd[c]
			}
			got, err = c.Infer(context.Background(), u8, nil)
			if err != nil {
				t.Fatal(err)
			}
			if e := servertest.RelErr(got, s.Expected(t, norm, 1)); e > 1e-3 {
				t.Fatalf("UINT8 logits differ from the reference by %.2g", e)
			}
		})
	}
}

// TestSubmitShowsServerBatching drives the server through Submit with many
// requests in flight: every reply is its own request's, and the server's
// dynamic batching shows in the client's stats.
func TestSubmitShowsServerBatching(t *testing.T) {
	s := servertest.Start(t, servertest.Options{MaxBatch: 4, MaxDelay: 20 * time.Millisecond, MaxQueue: 64, Inflight: 2})
	const n = 16
	inputs := make([]*tensor.Tensor, n)
	wants := make([][]float64, n)
	for i := range inputs {
		inputs[i] = images(1, 16, uint64(100+i))
		wants[i] = s.Expected(t, inputs[i].Float32s(), 1)
	}
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			c := dial(t, url, client.Options{MaxInflight: n})
			reply := make(chan backend.Response, n)
			for i, in := range inputs {
				if err := c.Submit(backend.Request{ID: uint64(i), Input: in, SentAt: time.Now(), Reply: reply, Output: make([]float32, 10)}); err != nil {
					t.Fatal(err)
				}
			}
			for range n {
				r := <-reply
				if r.Err != nil {
					t.Fatalf("request %d: %v", r.ID, r.Err)
				}
				if r.N != 1 || r.Classes != 10 || r.DoneAt.Before(r.SentAt) {
					t.Fatalf("response %+v", r)
				}
				if e := servertest.RelErr(r.Logits, wants[r.ID]); e > 1e-3 {
					t.Fatalf("request %d got another request's logits (error %.2g)", r.ID, e)
				}
			}
			st := c.Stats()
			if st.Requests != n || st.Images != n || st.Errors != 0 {
				t.Fatalf("stats %+v", st)
			}
			if st.MeanServerBatch() <= 1 {
				t.Errorf("mean server batch %.2f with %d requests in flight and a 20ms queue delay; want merged batches (%v)", st.MeanServerBatch(), n, st.ServerBatches)
			}
		})
	}
}

func TestRefusalIsErrQueueFull(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Gated: true, Inflight: 1, MaxQueue: 1})
	x := images(1, 16, 5)
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			c := dial(t, url, client.Options{})
			var wg sync.WaitGroup
			held := s.Gate.Held()
			wg.Go(func() { c.Infer(context.Background(), x, nil) })
			s.Gate.WaitHeld(t, held+1)
			wg.Go(func() { c.Infer(context.Background(), x, nil) }) // queued
			lane := s.Model().Lanes[0].Batcher
			for deadline := time.Now().Add(5 * time.Second); lane.QueueDepth() != 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the second request was not queued")
				}
			}
			if _, err := c.Infer(context.Background(), x, nil); !errors.Is(err, backend.ErrQueueFull) {
				t.Fatalf("full queue: %v, want an error matching backend.ErrQueueFull", err)
			}
			if st := c.Stats(); st.Refused == 0 {
				t.Errorf("stats %+v count no refusal", st)
			}
			s.Gate.Release(2) // the held batch, then the queued one
			wg.Wait()
		})
	}
}

func TestSubmitAfterClose(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	c, err := client.Dial(context.Background(), "grpc://"+s.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	reply := make(chan backend.Response, 1)
	if err := c.Submit(backend.Request{Input: images(1, 16, 6), Reply: reply}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if r := <-reply; r.Err != nil {
		t.Errorf("request in flight at Close: %v", r.Err)
	}
	if err := c.Submit(backend.Request{Input: images(1, 16, 6), Reply: reply}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Submit after Close: %v, want ErrClosed", err)
	}
}

func TestSubmitRejectsBadRequests(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	c := dial(t, "http://"+s.HTTPAddr, client.Options{})
	reply := make(chan backend.Response, 1)
	in := images(1, 16, 6)
	for _, c2 := range []struct {
		req  backend.Request
		want string
	}{
		{backend.Request{Input: in}, "no Reply channel"},
		{backend.Request{Reply: reply}, "no input"},
		{backend.Request{Input: in, Reply: reply, Parts: [][]byte{in.Data}}, "Parts"},
	} {
		if err := c.Submit(c2.req); err == nil || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("Submit: error %v, want one saying %q", err, c2.want)
		}
	}
}
