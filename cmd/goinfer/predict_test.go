package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/tensor"
)

// relDiff is max|got-ref| / max|ref|.
func relDiff(t *testing.T, got, ref *tensor.Tensor) float64 {
	t.Helper()
	if !got.Shape.Equal(ref.Shape) {
		t.Fatalf("logits shape %v, reference %v", got.Shape, ref.Shape)
	}
	g, err := got.ToFloat32()
	if err != nil {
		t.Fatal(err)
	}
	var maxDiff, maxRef float64
	for i := 0; i < ref.NumElements(); i++ {
		r := math.Float64frombits(leUint64(ref.Data[8*i:]))
		maxDiff = math.Max(maxDiff, math.Abs(float64(g[i])-r))
		maxRef = math.Max(maxRef, math.Abs(r))
	}
	return maxDiff / maxRef
}

func leUint64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// TestPredictGolden runs the golden checkpoints written by PyTorch through
// the cpu engine and compares the logits with PyTorch's float64 ones.
func TestPredictGolden(t *testing.T) {
	tests := []struct{ ckpt, input, ref string }{
		{"resnet18_w8.pth", "resnet18_w8_input0.npy", "resnet18_w8_ref0.npy"},
		{"resnet18_w8.pth", "resnet18_w8_input1.npy", "resnet18_w8_ref1.npy"},
		{"resnet18_w8.safetensors", "resnet18_w8_input0.npy", "resnet18_w8_ref0.npy"},
		{"resnet18_w8.safetensors", "resnet18_w8_input1.npy", "resnet18_w8_ref1.npy"},
		{"resnet18_w8_f16.safetensors", "resnet18_w8_input0.npy", "resnet18_w8_f16_ref0.npy"},
		{"bottleneck_w4_g2.pth", "bottleneck_w4_g2_input0.npy", "bottleneck_w4_g2_ref0.npy"},
		{"bottleneck_w4_g2_bf16.safetensors", "bottleneck_w4_g2_input0.npy", "bottleneck_w4_g2_bf16_ref0.npy"},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		for _, mode := range []string{"--no-compile", "--compile"} {
			t.Run(tt.ckpt+"/"+tt.input+"/"+mode, func(t *testing.T) {
				out := filepath.Join(dir, "logits.npy")
				code, _, stderr := goinfer(t, "predict", "--engine", "cpu", mode, "--checkpoint", goldenDir+tt.ckpt,
					"--input", goldenDir+tt.input, "--output", out, "--topk", "0", "--batch_size", "2")
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				got, err := tensor.LoadNPY(out)
				if err != nil {
					t.Fatal(err)
				}
				ref, err := tensor.LoadNPY(goldenDir + tt.ref)
				if err != nil {
					t.Fatal(err)
				}
				if got.DType != tensor.Float32 {
					t.Errorf("logits are %s, want float32", got.DType)
				}
				if d := relDiff(t, got, ref); d > 1e-4 {
					t.Errorf("max|got-ref|/max|ref| = %.3g, want <= 1e-4", d)
				} else {
					t.Logf("max|got-ref|/max|ref| = %.3g", d)
				}
			})
		}
	}
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPredictImages classifies the golden PNG and JPEG with a small seeded
// model, printing labels from each supported labels format.
func TestPredictImages(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "tiny.safetensors")
	if code, _, stderr := goinfer(t, "model", "init", "--width", "4", "--classes", "3", "--seed", "1", "--out", ckpt); code != 0 {
		t.Fatal(stderr)
	}
	labelFiles := map[string]string{
		"text":        writeFile(t, filepath.Join(dir, "labels.txt"), "tench\ngoldfish\ngreat white shark\n"),
		"json list":   writeFile(t, filepath.Join(dir, "labels.json"), `["tench", "goldfish", "great white shark"]`),
		"class index": writeFile(t, filepath.Join(dir, "index.json"), `{"1": ["n01443537", "goldfish"], "0": ["n01440364", "tench"], "2": ["n01484850", "great white shark"]}`),
	}
	var first []float32
	for name, labels := range labelFiles {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(dir, "img.npy")
			// Flags may follow positional inputs.
			code, stdout, stderr := goinfer(t, "predict", "--engine", "cpu", "--checkpoint", ckpt, "--labels", labels,
				"--input", goldenDir+"image.png", goldenDir+"image.jpg", "--topk", "3", "--output", out)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, want := range []string{"image.png:", "image.jpg:", "goldfish", "great white shark", "%  class"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("output lacks %q:\n%s", want, stdout)
				}
			}
			if n := strings.Count(stdout, "  class "); n != 6 {
				t.Errorf("%d class lines, want 3 per image:\n%s", n, stdout)
			}
			got, err := tensor.LoadNPY(out)
			if err != nil {
				t.Fatal(err)
			}
			if got.Shape.String() != "[2 3]" {
				t.Fatalf("logits shape %v, want [2 3]", got.Shape)
			}
			if first == nil {
				first = append([]float32(nil), got.Float32s()...)
			}
			for i, v := range got.Float32s() {
				if v != first[i] {
					t.Fatalf("logits differ between runs: %v vs %v", got.Float32s(), first)
				}
			}
		})
	}
}

func TestPredictBatchChunksAgree(t *testing.T) {
	dir := t.TempDir()
	var outs []*tensor.Tensor
	for _, bs := range []string{"1", "2", "16"} {
		out := filepath.Join(dir, "l"+bs+".npy")
		code, _, stderr := goinfer(t, "predict", "--engine", "cpu", "--checkpoint", goldenDir+"resnet18_w8.pth",
			"--input", goldenDir+"resnet18_w8_input1.npy", "--input", goldenDir+"resnet18_w8_input1.npy",
			"--output", out, "--topk", "0", "--batch_size", bs)
		if code != 0 {
			t.Fatal(stderr)
		}
		x, err := tensor.LoadNPY(out)
		if err != nil {
			t.Fatal(err)
		}
		if x.Shape.String() != "[6 10]" {
			t.Fatalf("batch_size %s: shape %v, want [6 10]", bs, x.Shape)
		}
		outs = append(outs, x)
	}
	for _, x := range outs[1:] {
		a, b := outs[0].Float32s(), x.Float32s()
		for i := range a {
			if math.Abs(float64(a[i]-b[i])) > 1e-5*math.Max(1, math.Abs(float64(a[i]))) {
				t.Fatalf("logit %d: %v with batch 1, %v with a larger batch", i, a[i], b[i])
			}
		}
	}
}

func TestPredictErrors(t *testing.T) {
	dir := t.TempDir()
	save := func(name string, x *tensor.Tensor) string {
		p := filepath.Join(dir, name)
		if err := tensor.SaveNPY(p, x); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rank3 := save("rank3.npy", tensor.New(tensor.Float32, 3, 8, 8))
	fourCh := save("four.npy", tensor.New(tensor.Float32, 1, 4, 16, 16))
	other := save("other.npy", tensor.New(tensor.Float32, 1, 3, 16, 16))
	empty := save("empty.npy", tensor.New(tensor.Float32, 0, 3, 16, 16))
	notImage := writeFile(t, filepath.Join(dir, "cat.png"), "not a png")
	badLabels := writeFile(t, filepath.Join(dir, "labels.txt"), "a\nb\n")
	ckpt := goldenDir + "resnet18_w8.pth"
	in := goldenDir + "resnet18_w8_input0.npy"
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no input", []string{"--checkpoint", ckpt}, 2, "give at least one --input"},
		{"float64 npy", []string{"--checkpoint", ckpt, "--input", goldenDir + "resnet18_w8_ref0.npy"}, 1, "is float64[2 10]: want float32 [N, C, H, W]"},
		{"uint8 npy", []string{"--checkpoint", ckpt, "--input", goldenDir + "image_png_u8.npy"}, 1, "is uint8[224 224 3]: want float32 [N, C, H, W]"},
		{"rank 3", []string{"--checkpoint", ckpt, "--input", rank3}, 1, "is float32[3 8 8]: want float32 [N, C, H, W]"},
		{"no images", []string{"--checkpoint", ckpt, "--input", empty}, 1, "no images"},
		{"wrong channels", []string{"--engine", "cpu", "--checkpoint", ckpt, "--input", fourCh}, 1, "the inputs have 4 channels, the model takes 3"},
		{"mixed sizes", []string{"--checkpoint", ckpt, "--input", in, "--input", other}, 1, "one run takes one size"},
		{"unreadable image", []string{"--checkpoint", ckpt, "--input", notImage}, 1, "cat.png: unsupported image format"},
		{"missing input", []string{"--checkpoint", ckpt, "--input", filepath.Join(dir, "gone.jpg")}, 1, "gone.jpg: no such file"},
		{"missing checkpoint", []string{"--engine", "cpu", "--checkpoint", filepath.Join(dir, "gone.pth"), "--input", in}, 1, "gone.pth: no such file"},
		{"labels count", []string{"--engine", "cpu", "--checkpoint", ckpt, "--input", in, "--labels", badLabels}, 1, "has 2 labels, the model has 10 classes"},
		{"missing labels", []string{"--checkpoint", ckpt, "--input", in, "--labels", filepath.Join(dir, "nope.txt")}, 1, "nope.txt"},
		{"output not npy", []string{"--checkpoint", ckpt, "--input", in, "--output", filepath.Join(dir, "x.csv")}, 1, "name the file *.npy"},
		{"batch size", []string{"--checkpoint", ckpt, "--input", in, "--batch_size", "0"}, 1, "--batch_size 0"},
		{"unknown engine", []string{"--engine", "tpu", "--checkpoint", ckpt, "--input", in}, 1, `unknown engine "tpu"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := goinfer(t, append([]string{"predict"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Fatalf("stderr lacks %q:\n%s", tt.want, stderr)
			}
			if tt.code == 1 {
				lines := strings.Split(strings.TrimSpace(stderr), "\n")
				last := lines[len(lines)-1]
				if !strings.HasPrefix(last, "goinfer predict: ") || !strings.Contains(last, tt.want) || strings.Count(stderr, "goinfer predict:") != 1 {
					t.Errorf("want the error as one last line, got:\n%s", stderr)
				}
			}
			if stdout != "" {
				t.Errorf("a failed run printed results: %s", stdout)
			}
		})
	}
}
