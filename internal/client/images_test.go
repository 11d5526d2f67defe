package client_test

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

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
