package torchvision

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"goinfer/internal/checkpoint"
	"goinfer/internal/ir"
	"goinfer/internal/tensor"
)

const fixtureDir = "../../testdata/torchvision"

// fixtureConfigs are the Go twins of tools/torchvision_fixtures.py's
// models, under the same names.
var fixtureConfigs = map[string]Config{
	"mobilenet_v2": MobileNetV2Config{WidthMult: 0.25, Setting: [][4]int{{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 2, 2}}, Classes: 10},
	"mobilenet_v3": MobileNetV3Config{WidthMult: 1, Setting: []V3Block{
		{8, 3, 8, 8, true, false, 2}, {8, 3, 24, 16, false, false, 2},
		{16, 5, 32, 16, true, true, 1}, {16, 3, 48, 24, true, true, 1},
	}, LastChannel: 32, Classes: 10},
	"vit": ViTConfig{PatchSize: 8, Layers: 2, Heads: 2, Hidden: 32, MLP: 48, Classes: 10},
}

type fixtureEntry struct {
	File      string `json:"file"`
	ImageSize int    `json:"image_size"`
	Params    int64  `json:"params"`
}

func loadNPY(t *testing.T, path string) *ir.Array {
	t.Helper()
	tt, err := tensor.LoadNPY(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ir.ArrayFromTensor(tt)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestFixtures builds each tiny torchvision model from the state dict
// PyTorch saved and compares the float64 reference evaluation of the graph
// with PyTorch's float64 logits.
func TestFixtures(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(fixtureDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest map[string]fixtureEntry
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	for name := range fixtureConfigs {
		if _, ok := manifest[name]; !ok {
			t.Errorf("fixture %s is not in the manifest: re-run tools/torchvision_fixtures.py", name)
		}
	}
	for name, fx := range manifest {
		t.Run(name, func(t *testing.T) {
			cfg, ok := fixtureConfigs[name]
			if !ok {
				t.Fatalf("no Go configuration for fixture %s", name)
			}
			n, err := ParamCount(cfg, fx.ImageSize)
			if err != nil {
				t.Fatal(err)
			}
			if n != fx.Params {
				t.Errorf("%d parameters, torchvision's model has %d", n, fx.Params)
			}
			sd, err := checkpoint.Load(filepath.Join(fixtureDir, fx.File))
			if err != nil {
				t.Fatal(err)
			}
			g, err := BuildWith(cfg, sd, Options{ImageSize: fx.ImageSize})
			sd.Close()
			if err != nil {
				t.Fatal(err)
			}
			in := loadNPY(t, filepath.Join(fixtureDir, name+".input.npy"))
			want := loadNPY(t, filepath.Join(fixtureDir, name+".logits.npy"))
			in.DType = tensor.Float32
			out, err := ir.EvaluateBound(context.Background(), g, map[string]*ir.Array{InputName: in})
			if err != nil {
				t.Fatal(err)
			}
			got := out[0]
			if !got.Shape.Equal(want.Shape) {
				t.Fatalf("logits shape %v, PyTorch's %v", got.Shape, want.Shape)
			}
			var maxDiff, maxRef float64
			for i := range want.Data {
				maxDiff = math.Max(maxDiff, math.Abs(got.Data[i]-want.Data[i]))
				maxRef = math.Max(maxRef, math.Abs(want.Data[i]))
			}
			rel := maxDiff / maxRef
			t.Logf("%d nodes, logits %v, max|got-ref|/max|ref| = %.3g", len(g.Nodes), got.Shape, rel)
			if !(rel <= 1e-12) {
				t.Errorf("max|got-ref|/max|ref| = %.3g, want <= 1e-12", rel)
			}
		})
	}
}
