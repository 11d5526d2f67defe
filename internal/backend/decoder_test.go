package backend

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"goinfer/internal/engine"
	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
)

// TestEncodedRequests sends encoded photographs, a bad one among them,
// through the pipeline's decoder (the host decoder on the cpu engine),
// with and without copy streams, and checks the logits of the good images
// against a tensor request of the same preprocessing, and the bad image's
// error.
func TestEncodedRequests(t *testing.T) {
	var photos [][]byte
	for _, f := range []string{"../../testdata/golden/image.jpg", "../../testdata/golden/image.png", "../../testdata/photos/camera_gray.jpg"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		photos = append(photos, b)
	}
	pre, err := preprocess.NewCPU(preprocess.ImageNet(16, 16), preprocess.CPUOptions{})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]byte, len(photos)*3*16*16*4)
	for _, err := range pre.Preprocess(context.Background(), photos, tensor.Float32, x) {
		if err != nil {
			t.Fatal(err)
		}
	}
	shape := tensor.Shape{len(photos), 3, 16, 16}
	for _, copyStreams := range []bool{true, false} {
		t.Run(map[bool]string{true: "copy streams", false: "worker streams"}[copyStreams], func(t *testing.T) {
			want := runAll(t, Config{NumWorkers: 2, CopyStreams: copyStreams}, loadNarrowCPU(t, 16, 4),
				[]*tensor.Tensor{{DType: tensor.Float32, Shape: shape, Data: x}})[0]
			decoders := 0
			b := New(Config{NumWorkers: 2, CopyStreams: copyStreams, NewDecoder: func(device int, dev engine.Device, info engine.Info) (Decoder, error) {
				decoders++
				return HostDecoder{Pre: pre, DType: info.Input().DType}, nil
			}})
			if err := b.Start(context.Background(), loadNarrowCPU(t, 16, 4)); err != nil {
				t.Fatal(err)
			}
			abortOnFailure(t, b)
			reply := make(chan Response, 2)
			in := &tensor.Tensor{DType: tensor.Float32, Shape: shape}
			if err := b.Submit(Request{ID: 1, Input: in, Encoded: photos, SentAt: time.Now(), Reply: reply}); err != nil {
				t.Fatal(err)
			}
			r := <-reply
			if r.Err != nil || r.ImageErrs != nil {
				t.Fatalf("%v, %v", r.Err, r.ImageErrs)
			}
			for i, v := range r.Logits {
				if d := v - want[i]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("logit %d: %v from the decoder, %v from the tensor", i, v, want[i])
				}
			}
			bad := [][]byte{photos[0], []byte("not an image"), photos[2]}
			if err := b.Submit(Request{ID: 2, Input: in, Encoded: bad, SentAt: time.Now(), Reply: reply}); err != nil {
				t.Fatal(err)
			}
			r = <-reply
			if r.Err != nil || len(r.ImageErrs) != 3 || r.ImageErrs[0] != nil || r.ImageErrs[1] == nil || r.ImageErrs[2] != nil {
				t.Fatalf("a bad image: %v, %v", r.Err, r.ImageErrs)
			}
			for i := range 10 {
				if d := r.Logits[i] - want[i]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("the good image beside a bad one: logit %d is %v, want %v", i, r.Logits[i], want[i])
				}
			}
			// One image in a batch of 3: padded up to a compiled size.
			if err := b.Submit(Request{ID: 3, Input: in, Encoded: photos[:1], SentAt: time.Now(), Reply: reply}); err != nil {
				t.Fatal(err)
			}
			if r = <-reply; r.Err != nil {
				t.Fatalf("a padded batch: %v", r.Err)
			}
			for i := range 10 {
				if d := r.Logits[i] - want[i]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("a padded batch: logit %d is %v, want %v", i, r.Logits[i], want[i])
				}
			}
			wrong := append(append([][]byte(nil), photos...), photos[0])
			if err := b.Submit(Request{ID: 4, Input: in, Encoded: wrong, SentAt: time.Now(), Reply: reply}); err != nil {
				t.Fatal(err)
			}
			if r = <-reply; r.Err == nil || !strings.Contains(r.Err.Error(), "4 encoded images for a batch of 3") {
				t.Errorf("a count mismatch: %v", r.Err)
			}
			closeBackend(t, b)
			if want := map[bool]int{true: 1, false: 2}[copyStreams]; decoders != want {
				t.Errorf("%d decoders made, want %d", decoders, want)
			}
		})
	}
	t.Run("no decoder", func(t *testing.T) {
		b := New(Config{})
		if err := b.Start(context.Background(), loadNarrowCPU(t, 16, 4)); err != nil {
			t.Fatal(err)
		}
		reply := make(chan Response, 1)
		b.Submit(Request{ID: 1, Input: &tensor.Tensor{DType: tensor.Float32, Shape: shape}, Encoded: photos, Reply: reply})
		if r := <-reply; r.Err == nil || !strings.Contains(r.Err.Error(), "no image decoder") {
			t.Errorf("%v", r.Err)
		}
		closeBackend(t, b)
	})
}
