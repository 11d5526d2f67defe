package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"goinfer/internal/engine"
	"goinfer/internal/tensor"
)

func TestParseInts(t *testing.T) {
	got, err := parseInts("batch_sizes", "1, 32,256")
	if err != nil || len(got) != 3 || got[2] != 256 {
		t.Errorf("parseInts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "a", "-3"} {
		if _, err := parseInts("batch_sizes", bad); err == nil || !strings.Contains(err.Error(), "--batch_sizes") {
			t.Errorf("parseInts(%q): error %v, want one naming the flag", bad, err)
		}
	}
}

func TestQuantile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5}
	for q, want := range map[float64]float64{0: 1, 0.5: 3, 0.9: 4.6, 1: 5} {
		if got := quantile(v, q); math.Abs(got-want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
}

func TestFillInputSeeded(t *testing.T) {
	a, b := make([]byte, 64), make([]byte, 64)
	fillInput(a, tensor.Float32, 7)
	fillInput(b, tensor.Float32, 7)
	if !bytes.Equal(a, b) {
		t.Error("same seed, different input")
	}
	fillInput(b, tensor.Float32, 8)
	if bytes.Equal(a, b) {
		t.Error("different seeds, same input")
	}
}

// TestComputeCPU runs the benchmark end to end on the cpu engine (what CI
// has) on a tiny cell and checks the table and CSV it writes.
func TestComputeCPU(t *testing.T) {
	e, err := engine.Get("cpu")
	if err != nil {
		t.Skip("cpu engine not registered")
	}
	cfg := computeConfig{src: source{Random: true, Arch: "resnet18"}, batchSizes: []int{2}, imageSizes: []int{32},
		precisions: []engine.Precision{engine.FP32}, compile: []bool{false, true}, iters: 2, warmup: 1, inputDType: tensor.Float32, threads: 1}
	var stderr bytes.Buffer
	rows, err := runCompute(context.Background(), e, cfg, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2 (eager and compiled)", len(rows))
	}
	for _, r := range rows {
		if r.Engine != "cpu" || r.Batch != 2 || r.Image != 32 || !(r.ImgPerSec > 0) || !(r.P90 >= r.P50) {
			t.Errorf("row %+v", r)
		}
	}
	md := computeMarkdown(rows, cfg, []string{"goinfer", "compute"})
	if !strings.Contains(md, "| cpu | fp32 | true | 32 | 2 |") {
		t.Errorf("markdown lacks the compiled row:\n%s", md)
	}
	path := filepath.Join(t.TempDir(), "c.csv")
	if err := writeComputeCSV(path, rows); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if lines := strings.Count(string(b), "\n"); lines != 3 {
		t.Errorf("CSV has %d lines, want header + 2", lines)
	}
}

// TestComputeCPUProfile runs --profile on the cpu engine with an ONNX
// model, whole and split batches, and checks the per-layer and by-kind
// tables.
func TestComputeCPUProfile(t *testing.T) {
	e, err := engine.Get("cpu")
	if err != nil {
		t.Skip("cpu engine not registered")
	}
	cfg := computeConfig{src: source{Path: "../../testdata/onnx/torchscript17/mobilenet_v3_small.onnx"}, batchSizes: []int{1, 4}, imageSizes: []int{48},
		precisions: []engine.Precision{engine.FP32}, compile: []bool{true}, iters: 2, warmup: 1, inputDType: tensor.Float32,
		threads: 2, splitBatch: 1, profile: true, profileIters: 2}
	var stderr bytes.Buffer
	rows, err := runCompute(context.Background(), e, cfg, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	md := computeMarkdown(rows, cfg, []string{"goinfer", "compute"})
	for _, r := range rows {
		if len(r.Layers) < 10 {
			t.Errorf("batch %d: %d layers", r.Batch, len(r.Layers))
		}
		for _, want := range []string{
			fmt.Sprintf("### per-layer time: cpu fp32 compile=true 48 batch %d", r.Batch),
			fmt.Sprintf("### by kind: cpu fp32 compile=true 48 batch %d", r.Batch),
		} {
			if !strings.Contains(md, want) {
				t.Errorf("markdown lacks %q", want)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "layers.csv")
	if err := writeLayersCSV(path, rows); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if lines, want := strings.Count(string(b), "\n"), 1+len(rows[0].Layers)+len(rows[1].Layers); lines != want {
		t.Errorf("layers CSV has %d lines, want %d", lines, want)
	}
	if !strings.Contains(md, "| Conv | ") || !strings.Contains(md, "dwBlockStep") {
		t.Errorf("markdown lacks the convolution kind or the depthwise kernel:\n%s", md)
	}
}

func TestLayersByKind(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layers []engine.LayerTime
		want   []kindTime
	}{
		{"none", nil, nil},
		{"summed, largest first", []engine.LayerTime{{Kind: "Conv", Time: 3}, {Kind: "Gemm", Time: 5}, {Kind: "Conv", Time: 4}},
			[]kindTime{{"Conv", 2, 7}, {"Gemm", 1, 5}}},
		{"ties by kind", []engine.LayerTime{{Kind: "Mul", Time: 2}, {Kind: "Add", Time: 2}}, []kindTime{{"Add", 1, 2}, {"Mul", 1, 2}}},
	} {
		if got := layersByKind(tc.layers); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestComputeFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--compile", "maybe", "--engine", "cpu"},
		{"--batch_sizes", "x", "--engine", "cpu"},
		{"--precisions", "fp8", "--engine", "cpu"},
		{"--iters", "0", "--engine", "cpu"},
		{"--cpu_split_batch", "-1", "--engine", "cpu"},
		{"--cpu_split_batch", "some", "--engine", "cpu"},
	} {
		var out, errb bytes.Buffer
		if err := runComputeCmd(context.Background(), args, &out, &errb); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestDoctorWithoutGPU(t *testing.T) {
	var out, errb bytes.Buffer
	if err := runDoctor(context.Background(), nil, &out, &errb); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "cuda engine:") {
		t.Errorf("doctor output lacks the verdict:\n%s", s)
	}
	if strings.Contains(s, "cuda engine: usable") {
		return // a GPU machine
	}
	if !strings.Contains(s, "No NVIDIA GPU") || !strings.Contains(s, "fix:") {
		t.Errorf("without a GPU doctor should say so and how to fix it:\n%s", s)
	}
	out.Reset()
	if err := runDoctor(context.Background(), []string{"--json"}, &out, &errb); err != nil || !strings.Contains(out.String(), `"cuda_engine_usable": false`) {
		t.Errorf("doctor --json: %v\n%s", err, out.String())
	}
}
