package client_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"goinfer/internal/client"
	"goinfer/internal/preprocess"
	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
	"goinfer/internal/topk"
)

// TestInferImages sends photographs over both protocols and checks the
// top-k classes and probabilities against the softmax of the logits that
// the tensor input gives for the same preprocessing.
func TestInferImages(t *testing.T) {
	labels := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	s := servertest.Start(t, servertest.Options{Images: true, Labels: labels})
	var photos [][]byte
	for _, f := range []string{"../../testdata/golden/image.jpg", "../../testdata/golden/image.png", "../../testdata/photos/coffee.jpg"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		photos = append(photos, b)
	}
	pre, _ := preprocess.NewCPU(preprocess.ImageNet(16, 16), preprocess.CPUOptions{})
	x := make([]byte, len(photos)*3*16*16*4)
	for _, err := range pre.Preprocess(context.Background(), photos, tensor.Float32, x) {
		if err != nil {
			t.Fatal(err)
		}
	}
	in := &tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{len(photos), 3, 16, 16}, Data: x}
	for proto, url := range urls(s) {
		t.Run(proto, func(t *testing.T) {
			c := dial(t, url, client.Options{})
			md, err := c.Metadata(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if md.ImageInput != "image" || md.InputName != "input" || len(md.Outputs) != 2 {
				t.Fatalf("metadata %+v", md)
			}
			logits, err := c.Infer(context.Background(), in, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.InferImages(context.Background(), photos, 3)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Classes) != len(photos) || res.BatchSize < 1 {
				t.Fatalf("result %+v", res)
			}
			for i, got := range res.Classes {
				probs := make([]float32, 10)
				topk.Softmax(probs, logits[i*10:(i+1)*10])
				want := topk.Indices(nil, probs, 3)
				for j, cl := range got {
					if cl.Index != want[j] || cl.Label != labels[cl.Index] || math.Abs(float64(cl.Score-probs[cl.Index])) > 1e-5 {
						t.Errorf("image %d class %d: %+v, want index %d (%s) with probability %.6f", i, j, cl, want[j], labels[want[j]], probs[want[j]])
					}
				}
			}
			_, err = c.InferImages(context.Background(), [][]byte{photos[0], []byte("GIF89a")}, 1)
			var se *client.ServerError
			if !errors.As(err, &se) || !strings.Contains(se.Message, "element 1") {
				t.Errorf("a bad image: %v", err)
			}
			if st := c.Stats(); st.Images != int64(2*len(photos)) || st.Errors != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestInferImagesNoImageInput(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	c := dial(t, "http://"+s.HTTPAddr, client.Options{})
	if _, err := c.InferImages(context.Background(), [][]byte{{1}}, 1); err == nil || !strings.Contains(err.Error(), "no image input") {
		t.Errorf("err = %v", err)
	}
}

// photoRefs reads photographs and the top-3 classes and probabilities the
// tensor input gives for them (the same preprocessing as the server's).
func photoRefs(t *testing.T, s *servertest.Server) (photos [][]byte, want [][]int, probs [][]float32) {
	t.Helper()
	for _, f := range []string{"../../testdata/golden/image.jpg", "../../testdata/photos/coffee_alpha.png", "../../testdata/golden/image.png"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		photos = append(photos, b)
	}
	pre, _ := preprocess.NewCPU(preprocess.ImageNet(16, 16), preprocess.CPUOptions{})
	x := make([]byte, len(photos)*3*16*16*4)
	for _, err := range pre.Preprocess(context.Background(), photos, tensor.Float32, x) {
		if err != nil {
			t.Fatal(err)
		}
	}
	logits := s.Expected(t, tensor.BytesF32(x), len(photos))
	for i := range photos {
		l := make([]float32, 10)
		for j := range l {
			l[j] = float32(logits[i*10+j])
		}
		p := make([]float32, 10)
		topk.Softmax(p, l)
		want = append(want, topk.Indices(nil, p, 3))
		probs = append(probs, p)
	}
	return photos, want, probs
}

// TestInferImagesHTTPClients sends images through both HTTP clients, in
// the binary data extension and as base64 in JSON, through a proxy that
// counts connections: answers match the tensor input's, sequential
// requests (and a 400 for a corrupt image) share one connection.
func TestInferImagesHTTPClients(t *testing.T) {
	s := servertest.Start(t, servertest.Options{Images: true})
	photos, want, probs := photoRefs(t, s)
	for _, hc := range httpClients {
		for _, js := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/json=%v", hc, js), func(t *testing.T) {
				p := startProxy(t, s.HTTPAddr)
				c := dial(t, p.url(), client.Options{HTTPClient: hc, JSONImages: js})
				if _, err := c.Metadata(context.Background()); err != nil {
					t.Fatal(err)
				}
				before := p.accepted.Load()
				for r := range 3 {
					n := 1 + r%len(photos)
					res, err := c.InferImages(context.Background(), photos[:n], 3)
					if err != nil {
						t.Fatalf("request %d: %v", r, err)
					}
					if len(res.Classes) != n || res.BatchSize < 1 {
						t.Fatalf("request %d: %+v", r, res)
					}
					for i, got := range res.Classes {
						for j, cl := range got {
							if cl.Index != want[i][j] || math.Abs(float64(cl.Score-probs[i][cl.Index])) > 1e-5 {
								t.Errorf("request %d image %d class %d: %+v, want %d with %.6f", r, i, j, cl, want[i][j], probs[i][want[i][j]])
							}
						}
					}
				}
				corrupt := append([]byte(nil), photos[0][:len(photos[0])/3]...)
				for _, bad := range [][]byte{corrupt, {}} {
					_, err := c.InferImages(context.Background(), [][]byte{photos[1], bad}, 1)
					var se *client.ServerError
					if !errors.As(err, &se) || se.HTTPStatus != 400 || !strings.Contains(se.Message, "element 1") {
						t.Errorf("a bad image (%d bytes): %v, want a 400 naming element 1", len(bad), err)
					}
				}
				if _, err := c.InferImages(context.Background(), photos, 1); err != nil {
					t.Fatalf("after the refusals: %v", err)
				}
				if n := p.accepted.Load() - before; n > 1 {
					t.Errorf("6 sequential requests opened %d connections, want at most 1", n)
				}
				if st := c.Stats(); st.Errors != 2 || st.Requests != 6 {
					t.Errorf("stats %+v", st)
				}
			})
		}
	}
}

// TestInferImagesContext: image requests queued behind one the server
// holds end with their context's error when the deadline passes or they
// are cancelled; the held one and later ones succeed.
func TestInferImagesContext(t *testing.T) {
	photos := [][]byte{readFile(t, "../../testdata/photos/coffee.jpg")}
	for _, hc := range httpClients {
		t.Run(hc, func(t *testing.T) {
			s := servertest.Start(t, servertest.Options{Images: true, Gated: true, Inflight: 1, MaxQueue: 8})
			c := dial(t, "http://"+s.HTTPAddr, client.Options{HTTPClient: hc})
			held := s.Gate.Held()
			blocked := make(chan error, 1)
			go func() {
				_, err := c.InferImages(context.Background(), photos, 1)
				blocked <- err
			}()
			s.Gate.WaitHeld(t, held+1)

			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			t0 := time.Now()
			if _, err := c.InferImages(ctx, photos, 1); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("deadline: %v, want an error matching context.DeadlineExceeded", err)
			}
			if d := time.Since(t0); d > 2*time.Second {
				t.Errorf("the deadline of 100ms ended the request after %v", d)
			}
			ctx2, cancel2 := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := c.InferImages(ctx2, photos, 1)
				errc <- err
			}()
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
			if err := <-blocked; err != nil {
				t.Fatalf("the held request: %v", err)
			}
			for i := range 3 {
				if _, err := c.InferImages(context.Background(), photos, 1); err != nil {
					t.Fatalf("request %d after the cancelled ones: %v", i, err)
				}
			}
		})
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
