package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestModelInspectONNX(t *testing.T) {
	code, stdout, stderr := goinfer(t, "model", "inspect", goldenDir+"tiny_cnn.onnx")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// tools/golden/make_onnx_fixture.py's TinyCNN, batch norms folded:
	// stem 8x27+8, depthwise 8x9+8, pointwise 16x8+16, fc 5x16+5.
	// MACs at batch 1: stem 8*8*8 outputs x 27, depthwise 8*8*8 x 9,
	// pointwise 16*4*4 x 8, fc 5 x 16.
	for _, w := range []string{
		"format:      onnx (IR version 7)",
		"producer:    pytorch 1.13.0",
		"opsets:      ai.onnx 13",
		"inputs:      image float32[N,3,16,16]",
		"outputs:     logits float32[N,5]",
		"parameters:  533 (in 8 float32 tensors)",
		"nodes:       10: Conv 3, Relu 3, Flatten 1, Gemm 1, GlobalAveragePool 1, MaxPool 1",
		"compute:     20,560 MACs at batch 1",
	} {
		if !strings.Contains(stdout, w) {
			t.Errorf("output lacks %q:\n%s", w, stdout)
		}
	}
}

func TestModelInspectONNXErrors(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile(goldenDir + "tiny_cnn.onnx")
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.onnx")
	if err := os.WriteFile(truncated, raw[:len(raw)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		file string
		want string
	}{
		{"truncated", truncated, "truncated.onnx: onnx: not a valid ONNX model"},
		{"missing", filepath.Join(dir, "gone.onnx"), "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := goinfer(t, "model", "inspect", tt.file)
			if code != 1 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit 1 and %q", code, stderr, tt.want)
			}
		})
	}
}
