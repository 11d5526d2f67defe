package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"goinfer/internal/checkpoint"
	"goinfer/internal/client"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

func TestDefaultModelName(t *testing.T) {
	tests := []struct {
		src  source
		want string
	}{
		{source{Path: "/models/resnet18-f37072fd.pth"}, "resnet18"},
		{source{Path: "resnet50-11ad3fa6.pth"}, "resnet50"},
		{source{Path: "my-model.safetensors"}, "my-model"},
		{source{Path: "w/tiny_v2.pt"}, "tiny_v2"},
		{source{Path: "odd name (1).pth"}, "odd_name__1_"},
		{source{Path: "-abc123.pth"}, "model"},
		{source{Random: true, Arch: "resnet34"}, "resnet34"},
	}
	for _, tt := range tests {
		if got := defaultModelName(tt.src); got != tt.want {
			t.Errorf("defaultModelName(%v) = %q, want %q", tt.src, got, tt.want)
		}
	}
}

func TestCompiledBatchSizes(t *testing.T) {
	tests := []struct {
		flag string
		max  int
		want string
		err  bool
	}{
		{"auto", 64, "[1 2 4 8 16 32 64]", false},
		{"auto", 48, "[1 2 4 8 16 32 48]", false},
		{"auto", 1, "[1]", false},
		{"8,1,8", 16, "[1 8 16]", false},
		{"32", 16, "", true},
		{"0", 16, "", true},
	}
	for _, tt := range tests {
		got, err := compiledBatchSizes(tt.flag, tt.max)
		if (err != nil) != tt.err || (err == nil && fmt.Sprint(got) != tt.want) {
			t.Errorf("compiledBatchSizes(%q, %d) = %v, %v; want %s (error %v)", tt.flag, tt.max, got, err, tt.want, tt.err)
		}
	}
}

func TestServeRejectsBadFlags(t *testing.T) {
	tests := [][]string{
		{"--http", "", "--grpc", ""},
		{"--max_batch_size", "0"},
		{"--max_queue", "0"},
		{"--max_queue_delay", "-1ms"},
		{"--model_name", "a/b"},
		{"--log_format", "xml"},
		{"--log_level", "loud"},
		{"--image_size", "x"},
		{"--batch_sizes", "128", "--max_batch_size", "64"},
		{"--input_dtype", "int4"},
		{"--drain_timeout", "0s"},
		{"--drain_grace", "5s", "--drain_timeout", "5s"},
		{"--max_inflight_bytes", "100", "--max_request_bytes", "100"},
		{"--read_timeout", "0s"},
		{"--http_transport", "http3"},
		{"--max_connections", "0"},
		{"--grpc_max_concurrent_streams", "0"},
		{"--pinned_memory_pool_bytes", "-1"},
		{"--device", "1", "--devices", "0,1"},
		{"--image_decoder", "tpu"},
		{"--max_images", "0"},
		{"--max_image_pixels", "0"},
		{"--decode_workers", "-1"},
		{"--image_crop", "100", "--image_size", "224"},
		{"stray"},
	}
	for _, args := range tests {
		var stderr bytes.Buffer
		if err := runServe(context.Background(), args, &bytes.Buffer{}, &stderr); !errors.Is(err, errUsage) {
			t.Errorf("serve %q: %v, want a usage error", args, err)
		}
	}
}

// syncBuffer is a log sink the test reads while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logLine waits for a JSON log line with the message msg and returns it.
func (s *syncBuffer) logLine(t *testing.T, msg string, done <-chan error) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(s.String()))
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
				return m
			}
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited (%v) before logging %q:\n%s", err, msg, s.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("no %q log line:\n%s", msg, s.String())
	return nil
}

// writeTinyCheckpoint saves a narrow ResNet with a torch-hub-style name.
func writeTinyCheckpoint(t *testing.T) string {
	t.Helper()
	a := model.NewArch(model.Basic, []int{1, 1, 1, 1}, 8, 10, 1, 64)
	sd, err := model.Init(context.Background(), a, 3)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tmp := filepath.Join(dir, "tiny.safetensors")
	if err := checkpoint.Save(tmp, sd); err != nil {
		t.Fatal(err)
	}
	// The loader checks a hub-style hash suffix against the content.
	b, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	p := filepath.Join(dir, "tiny-"+hex.EncodeToString(sum[:4])+".safetensors")
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeEndToEnd runs the serve command on the cpu engine, talks to it
// over both protocols with the client bench --url uses, and stops it as
// SIGTERM does.
func TestServeEndToEnd(t *testing.T) {
	ckpt := writeTinyCheckpoint(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, []string{"--checkpoint", ckpt, "--engine", "cpu", "--image_size", "16,24", "--threads", "1",
			"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--log_format", "json", "--max_queue_delay", "1ms",
			"--pprof", "127.0.0.1:0"}, &bytes.Buffer{}, &logs)
	}()
	ready := logs.logLine(t, "ready", done)
	prof := logs.logLine(t, "profiling endpoints", done)
	resp, err := http.Get("http://" + prof["addr"].(string) + "?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Errorf("--pprof index: %s %.200q", resp.Status, body)
	}
	if ready["model"] != "tiny" {
		t.Errorf("served as %q, want tiny (from tiny-<hash>.safetensors)", ready["model"])
	}
	x := make([]float32, 2*3*16*16)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	in, _ := tensor.FromFloat32(tensor.Shape{2, 3, 16, 16}, x)
	var first []float32
	for _, u := range []string{"http://" + ready["http"].(string), "grpc://" + ready["grpc"].(string)} {
		c, err := client.Dial(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		md, err := c.Metadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Two image sizes: height and width vary.
		if md.Model != "tiny" || md.Classes != 10 || md.InputShape[2] != -1 || md.InputShape[3] != -1 {
			t.Errorf("%s: metadata %+v", u, md)
		}
		got, err := c.Infer(ctx, in, nil)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		if first == nil {
			first = got
		} else {
			for i := range got {
				if got[i] != first[i] {
					t.Fatalf("HTTP and gRPC answers differ at %d: %v vs %v", i, first[i], got[i])
				}
			}
		}
		// Encoded images: decoded on the host (cpu engine) and cropped to
		// the largest size served.
		photo, err := os.ReadFile("../../testdata/photos/coffee.jpg")
		if err != nil {
			t.Fatal(err)
		}
		if res, err := c.InferImages(ctx, [][]byte{photo, photo}, 3); err != nil || len(res.Classes) != 2 || len(res.Classes[0]) != 3 {
			t.Errorf("%s: images: %+v, %v", u, res, err)
		}
		big, _ := tensor.FromFloat32(tensor.Shape{1, 3, 24, 24}, make([]float32, 3*24*24))
		if _, err := c.Infer(ctx, big, nil); err != nil {
			t.Errorf("%s: 24x24 image: %v", u, err)
		}
		c.Close()
	}
	cancel() // what SIGTERM does through main's signal.NotifyContext
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after SIGTERM: %v, want a clean exit", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	for _, msg := range []string{`"msg":"image input on","input":"image","preprocessing":"resize 27 (bilinear), center crop 24x24`, `"msg":"draining"`, `"msg":"drained"`, `"msg":"stopped"`} {
		if !strings.Contains(logs.String(), msg) {
			t.Errorf("log lacks %s", msg)
		}
	}
}

func TestServeExitsWhenTheModelFailsToLoad(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "broken.safetensors")
	if err := os.WriteFile(bad, []byte("not a checkpoint"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	err := runServe(context.Background(), []string{"--checkpoint", bad, "--engine", "cpu", "--http", "127.0.0.1:0",
		"--grpc", "127.0.0.1:0", "--log_format", "json"}, &bytes.Buffer{}, &logs)
	if err == nil || !strings.Contains(err.Error(), "broken.safetensors") {
		t.Fatalf("serve with a broken checkpoint: %v, want an error naming it", err)
	}
	if !strings.Contains(logs.String(), "model failed to load") {
		t.Errorf("log lacks the failure:\n%s", logs.String())
	}
}

// TestServeRefusesLabelsOfAnotherModel checks that --labels naming a
// different number of classes than the model has fails the load, saying
// both counts, instead of serving results without names.
func TestServeRefusesLabelsOfAnotherModel(t *testing.T) {
	ckpt := writeTinyCheckpoint(t)
	labels := filepath.Join(t.TempDir(), "labels.txt")
	if err := os.WriteFile(labels, []byte("cat\ndog\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	err := runServe(context.Background(), []string{"--checkpoint", ckpt, "--engine", "cpu", "--image_size", "16", "--threads", "1",
		"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--log_format", "json", "--labels", labels}, &bytes.Buffer{}, &logs)
	if err == nil || !strings.Contains(err.Error(), "2 class names for a model with 10 classes") {
		t.Fatalf("serve with 2 labels for 10 classes: %v", err)
	}
}
