package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/checkpoint"
	"goinfer/internal/model"
	"goinfer/internal/tensor"
)

const goldenDir = "../../testdata/golden/"

// goinfer runs the command line in-process and returns its exit code and
// output.
func goinfer(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestModelInit(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args  []string
		file  string
		want  model.Arch
		dtype tensor.DType
	}{
		{[]string{"--arch", "resnet18", "--width", "8", "--classes", "10"}, "r18.safetensors",
			model.NewArch(model.Basic, []int{2, 2, 2, 2}, 8, 10, 1, 64), tensor.Float32},
		{[]string{"--arch", "resnet34", "--width", "4", "--classes", "3", "--dtype", "fp16"}, "r34.pth",
			model.NewArch(model.Basic, []int{3, 4, 6, 3}, 4, 3, 1, 64), tensor.Float16},
		{[]string{"--arch", "resnext50_32x4d", "--width", "16", "--layers", "1,1,1,1", "--classes", "5", "--dtype", "bf16"}, "rx.pt",
			model.NewArch(model.Bottleneck, []int{1, 1, 1, 1}, 16, 5, 32, 4), tensor.BFloat16},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			out := filepath.Join(dir, tt.file)
			code, stdout, stderr := goinfer(t, append([]string{"model", "init", "--out", out, "--seed", "3"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if !strings.Contains(stdout, "wrote "+out) || !strings.Contains(stdout, tt.want.Name()) {
				t.Errorf("output %q should name the file and %s", stdout, tt.want.Name())
			}
			sd, err := checkpoint.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			defer sd.Close()
			got, err := model.InferArch(sd)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name() != tt.want.Name() || !slicesEqual(got.Widths(), tt.want.Widths()) || got.Classes != tt.want.Classes {
				t.Errorf("file holds %s %v, want %s %v", got.Name(), got.Widths(), tt.want.Name(), tt.want.Widths())
			}
			if w, _ := sd.Get("conv1.weight"); w.DType != tt.dtype {
				t.Errorf("conv1.weight is %s, want %s", w.DType, tt.dtype)
			}
			if _, err := model.FromStateDict(sd); err != nil {
				t.Errorf("the written checkpoint does not build: %v", err)
			}
		})
	}
	t.Run("deterministic", func(t *testing.T) {
		a, b := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
		for _, p := range []string{a, b} {
			if code, _, stderr := goinfer(t, "model", "init", "--width", "4", "--classes", "2", "--seed", "7", "--out", p); code != 0 {
				t.Fatal(stderr)
			}
		}
		x, _ := os.ReadFile(a)
		y, _ := os.ReadFile(b)
		if !bytes.Equal(x, y) {
			t.Error("the same seed wrote different files")
		}
	})
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestModelInitErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "m.safetensors")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", nil, 2, "Usage: goinfer model"},
		{"unknown subcommand", []string{"export"}, 2, `unknown subcommand "export"`},
		{"no out", []string{"init"}, 2, "--out is required"},
		{"unknown arch", []string{"init", "--arch", "vgg17", "--out", out}, 1, `unknown architecture "vgg17"`},
		{"bad extension", []string{"init", "--out", filepath.Join(dir, "m.onnx")}, 1, ".safetensors, .pth or .pt"},
		{"bad dtype", []string{"init", "--dtype", "int8", "--out", out}, 1, `--dtype "int8"`},
		{"bad layers", []string{"init", "--layers", "2,x", "--out", out}, 1, `--layers "2,x"`},
		{"bad width", []string{"init", "--width", "0", "--out", out}, 1, "--width 0"},
		{"no dir", []string{"init", "--width", "4", "--out", filepath.Join(dir, "nope", "m.pth")}, 1, "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := goinfer(t, append([]string{"model"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.code, tt.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("a failed init left %s", out)
			}
		})
	}
}

func TestModelInspect(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile(goldenDir + "resnet18_w8.pth")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	hubName := filepath.Join(dir, "resnet18_w8-"+hex.EncodeToString(sum[:])[:8]+".pth")
	if err := os.WriteFile(hubName, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		file string
		want []string
	}{
		{goldenDir + "resnet18_w8.pth", []string{"format:      pth", "resnet-basic[2 2 2 2]-w8", "[8 16 32 64]", "classes:     10", "102 float32, 20 int64", "no torch.hub hash"}},
		{goldenDir + "resnet18_w8_f16.safetensors", []string{"format:      safetensors", "102 float16, 20 int64"}},
		{goldenDir + "bottleneck_w4_g2_bf16.safetensors", []string{"bottleneck [1 2 1 1]", "groups:      2", "classes:     7"}},
		{hubName, []string{"hub hash:    verified"}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			code, stdout, stderr := goinfer(t, "model", "inspect", tt.file)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, stdout)
				}
			}
		})
	}
}

func TestModelInspectErrors(t *testing.T) {
	dir := t.TempDir()
	// A checkpoint missing one tensor and with one of the wrong shape.
	sd, err := checkpoint.Load(goldenDir + "resnet18_w8.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	broken := checkpoint.NewStateDict()
	for _, n := range sd.Names() {
		x, _ := sd.Get(n)
		switch n {
		case "layer2.0.bn1.running_var":
			continue
		case "fc.bias":
			x = tensor.New(tensor.Float32, 11)
		}
		broken.Set(n, x)
	}
	misfit := filepath.Join(dir, "misfit.safetensors")
	if err := checkpoint.Save(misfit, broken); err != nil {
		t.Fatal(err)
	}
	badHash := filepath.Join(dir, "w8-00000000.pth")
	raw, _ := os.ReadFile(goldenDir + "resnet18_w8.pth")
	os.WriteFile(badHash, raw, 0o644)
	notCkpt := filepath.Join(dir, "notes.pth")
	os.WriteFile(notCkpt, []byte("just text"), 0o644)

	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"misfit", []string{misfit}, 1, []string{`"layer2.0.bn1.running_var"`, `"fc.bias" has shape [11], want [10]`}},
		{"hash mismatch", []string{badHash}, 1, []string{"sha256", "00000000"}},
		{"not a checkpoint", []string{notCkpt}, 1, []string{"unknown checkpoint format"}},
		{"missing", []string{filepath.Join(dir, "gone.pth")}, 1, []string{"gone.pth", "no such file"}},
		{"no file", nil, 2, []string{"exactly one checkpoint FILE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := goinfer(t, append([]string{"model", "inspect"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d: %s", code, tt.code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q: %s", w, stderr)
				}
			}
			if tt.code == 1 && strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("want one error line, got:\n%s", stderr)
			}
		})
	}
}
