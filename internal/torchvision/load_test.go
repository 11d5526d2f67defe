package torchvision

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/checkpoint"
	"goinfer/internal/ir"
	"goinfer/internal/preprocess"
	"goinfer/internal/tensor"
)

// shapeOnly is a state dict with arch's keys and shapes but no data:
// enough for Detect, which reads only shapes, without allocating a large
// model's weights.
func shapeOnly(t *testing.T, arch string, classes, size int) *checkpoint.StateDict {
	t.Helper()
	cfg, err := NamedConfig(arch, classes)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := ParamSpecs(cfg, size)
	if err != nil {
		t.Fatal(err)
	}
	sd := checkpoint.NewStateDict()
	for _, s := range specs {
		dt := tensor.Float32
		if s.Int {
			dt = tensor.Int64
		}
		sd.Set(s.Key, &tensor.Tensor{DType: dt, Shape: s.Shape})
	}
	return sd
}

func TestDetect(t *testing.T) {
	for _, arch := range Archs() {
		if testing.Short() && !strings.HasSuffix(arch, "0") {
			continue
		}
		size := 224
		if w, ok := DefaultWeights(arch); ok && strings.HasPrefix(arch, "vit_") {
			size = w.ImageSize() // Detect reads it off the position embedding
		}
		got, err := Detect(shapeOnly(t, arch, 10, size))
		if err != nil || got != arch {
			t.Errorf("Detect(%s) = %q, %v", arch, got, err)
		}
	}
	// The published GoogLeNet weights hold the auxiliary classifiers,
	// inception_v3 checkpoints may lack them: both are recognised.
	for arch, cfg := range map[string]Config{
		"googlenet":    GoogLeNetConfig{TransformInput: true, AuxLogits: true, Classes: 1000},
		"inception_v3": InceptionV3Config{TransformInput: true, Classes: 1000},
	} {
		sd, err := RandomStateDictFor(cfg, 299, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := Detect(sd); err != nil || got != arch {
			t.Errorf("Detect(%s variant) = %q, %v", arch, got, err)
		}
		if _, err := Build(arch, sd, Options{}); err != nil {
			t.Errorf("Build(%s variant): %v", arch, err)
		}
	}
	sd := shapeOnly(t, "resnet18", 1000, 224)
	sd.Set("extra.weight", &tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{3}})
	if _, err := Detect(sd); err == nil || !strings.Contains(err.Error(), "closest is resnet18") || !strings.Contains(err.Error(), "unexpected extra.weight") {
		t.Errorf("Detect of a near miss: %v", err)
	}
	if _, err := Detect(checkpoint.NewStateDict()); err == nil {
		t.Error("Detect of an empty state dict succeeded")
	}
}

func TestBuildErrors(t *testing.T) {
	cfg := MobileNetV3Config{Setting: []V3Block{{8, 3, 8, 8, true, false, 2}}, LastChannel: 16, WidthMult: 1, Classes: 4}
	good := func() *checkpoint.StateDict {
		sd, err := RandomStateDictFor(cfg, 32, 1)
		if err != nil {
			t.Fatal(err)
		}
		return sd
	}
	if _, err := BuildWith(cfg, good(), Options{ImageSize: 32}); err != nil {
		t.Fatal(err)
	}
	// Every problem is named at once, each with its key.
	sd := good()
	bad := checkpoint.NewStateDict()
	for _, k := range sd.Names() {
		v, _ := sd.Get(k)
		switch k {
		case "features.1.block.0.1.running_var": // dropped
		case "classifier.0.weight":
			bad.Set(k, tensor.New(tensor.Float32, 16, 5))
		default:
			bad.Set(k, v)
		}
	}
	bad.Set("features.9.weight", tensor.New(tensor.Float32, 2))
	bad.Set("features.0.0.weight", tensor.New(tensor.Int64, 8, 3, 3, 3))
	_, err := BuildWith(cfg, bad, Options{ImageSize: 32})
	if err == nil {
		t.Fatal("a broken state dict was accepted")
	}
	for _, want := range []string{
		`missing key "features.1.block.0.1.running_var" (want shape [8])`,
		`key "classifier.0.weight" has shape [16 5], the architecture needs [16 48]`,
		`unexpected key "features.9.weight"`,
		`key "features.0.0.weight"`,
		"4 problems",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := Build("resnet19", good(), Options{}); err == nil || !strings.Contains(err.Error(), "resnet18") {
		t.Errorf("unknown arch: %v, want the known names", err)
	}
	if _, err := BuildWith(ViTConfig{PatchSize: 8, Layers: 1, Heads: 3, Hidden: 16, MLP: 8, Classes: 2}, checkpoint.NewStateDict(), Options{ImageSize: 32}); err == nil || !strings.Contains(err.Error(), "heads") {
		t.Errorf("invalid config: %v", err)
	}
}

// TestPreprocessTravels checks that the graph carries the weights'
// transform, and ImageNet's scaled to the input otherwise.
func TestPreprocessTravels(t *testing.T) {
	w, ok, err := FromFileName("efficientnet_b3_rwightman-cf984f9c.pth")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	cfg := SqueezeNetConfig{Version: "1_1", Classes: 3}
	sd, err := RandomStateDictFor(cfg, 64, 3)
	if err != nil {
		t.Fatal(err)
	}
	g, err := BuildWith(cfg, sd, Options{Weights: &w})
	if err != nil {
		t.Fatal(err)
	}
	if g.Preprocess == nil || *g.Preprocess != w.Preprocess || g.Inputs[0].Type.Shape[2] != 300 {
		t.Errorf("graph preprocess %v, input %s; want the weights' %v at 300px", g.Preprocess, g.Inputs[0].Type, w.Preprocess)
	}
	b, err := ir.Bind(g, 2)
	if err != nil {
		t.Fatal(err)
	}
	if b.Preprocess != g.Preprocess {
		t.Error("Bind dropped the preprocessing")
	}
	g, err = BuildWith(cfg, sd, Options{ImageSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	want := preprocess.ImageNet(64, 64)
	if *g.Preprocess != want {
		t.Errorf("default preprocess %v, want %v", g.Preprocess, want)
	}
}

// TestLoad saves a state dict, loads it back by path without naming the
// architecture, and runs it.
func TestLoad(t *testing.T) {
	sd, err := RandomStateDict("squeezenet1_1", 5, 9)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"sq.safetensors", "module.pth"} {
		path := filepath.Join(dir, name)
		save := sd
		if name == "module.pth" {
			// DataParallel checkpoints prefix every key.
			save = checkpoint.NewStateDict()
			for _, k := range sd.Names() {
				v, _ := sd.Get(k)
				save.Set("module."+k, v)
			}
		}
		if err := checkpoint.Save(path, save); err != nil {
			t.Fatal(err)
		}
		g, err := Load(path, "", Options{ImageSize: 48})
		if err != nil {
			t.Fatal(err)
		}
		if g.Meta["arch"] != "squeezenet1_1" {
			t.Errorf("%s: arch %q", name, g.Meta["arch"])
		}
		// Without weights metadata the arch's original transform applies,
		// scaled to the size asked for.
		if d, _ := DefaultWeights("squeezenet1_1"); g.Preprocess == nil || *g.Preprocess != d.Preprocess.WithSize(48, 48) {
			t.Errorf("%s: preprocess %v", name, g.Preprocess)
		}
		x := ir.NewArray(tensor.Float32, tensor.Shape{1, 3, 48, 48})
		for i := range x.Data {
			x.Data[i] = float64(i%7) / 7
		}
		out, err := ir.EvaluateBound(context.Background(), g, map[string]*ir.Array{InputName: x})
		if err != nil {
			t.Fatal(err)
		}
		if !out[0].Shape.Equal(tensor.Shape{1, 5}) {
			t.Errorf("%s: logits %v", name, out[0].Shape)
		}
	}
	if _, err := Load(filepath.Join(dir, "sq.safetensors"), "resnet18", Options{}); err == nil || !strings.Contains(err.Error(), "missing key") {
		t.Errorf("wrong arch: %v", err)
	}
}

// TestMNASNetV1 builds the published mnasnet0_5 layout (torchvision's first
// MNASNet version, with a fixed 32/16 stem) by name: Build tells it from
// the stem's shape.
func TestMNASNetV1(t *testing.T) {
	sd, err := RandomStateDictFor(MNASNetConfig{Alpha: 0.5, V1Stem: true, Classes: 1000}, 224, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build("mnasnet0_5", sd, Options{}); err != nil {
		t.Fatal(err)
	}
	if a, err := Detect(sd); err != nil || a != "mnasnet0_5" {
		t.Errorf("Detect = %q, %v", a, err)
	}
}

// TestHalfPrecisionWeights builds from fp16 and bf16 state dicts: the
// weights widen to float32 exactly, so the graph equals the one built
// from the float32 weights rounded the same way.
func TestHalfPrecisionWeights(t *testing.T) {
	cfg := ShuffleNetV2Config{Repeats: []int{1, 1, 1}, Channels: []int{8, 16, 32, 64, 32}, Classes: 3}
	sd, err := RandomStateDictFor(cfg, 32, 4)
	if err != nil {
		t.Fatal(err)
	}
	x := ir.NewArray(tensor.Float32, tensor.Shape{1, 3, 32, 32})
	for i := range x.Data {
		x.Data[i] = float64(i%11)/11 - 0.5
	}
	run := func(sd *checkpoint.StateDict) []float64 {
		g, err := BuildWith(cfg, sd, Options{ImageSize: 32})
		if err != nil {
			t.Fatal(err)
		}
		out, err := ir.EvaluateBound(context.Background(), g, map[string]*ir.Array{InputName: x})
		if err != nil {
			t.Fatal(err)
		}
		return out[0].Data
	}
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
		half, err := checkpoint.CastFloats(sd, dt)
		if err != nil {
			t.Fatal(err)
		}
		back, err := checkpoint.CastFloats(half, tensor.Float32)
		if err != nil {
			t.Fatal(err)
		}
		got, want := run(half), run(back)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s weights: logits %v, want %v", dt, got, want)
			}
		}
	}
}

// TestLoadDefaultPreprocess loads a checkpoint whose name says nothing: it
// gets its architecture's original weights' transform (mnasnet0_75's
// resizes to 232), at their size or scaled to the size asked for.
func TestLoadDefaultPreprocess(t *testing.T) {
	sd, err := RandomStateDict("mnasnet0_75", 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mine.safetensors")
	if err := checkpoint.Save(path, sd); err != nil {
		t.Fatal(err)
	}
	d, _ := DefaultWeights("mnasnet0_75")
	for _, size := range []int{0, 112} {
		g, err := Load(path, "", Options{ImageSize: size})
		if err != nil {
			t.Fatal(err)
		}
		want := d.Preprocess
		if size != 0 {
			want = want.WithSize(size, size)
		}
		if g.Preprocess == nil || *g.Preprocess != want || want.Resize == 256 {
			t.Errorf("size %d: preprocess %v, want %v", size, g.Preprocess, want)
		}
		if got := g.Inputs[0].Type.Shape[2]; got != want.Height {
			t.Errorf("size %d: input %s", size, g.Inputs[0].Type)
		}
	}
}
