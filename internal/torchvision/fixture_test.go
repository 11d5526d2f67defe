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
	"efficientnet": EfficientNetConfig{Stages: []MBConv{
		{false, 1, 3, 1, 16, 16, 1}, {false, 6, 5, 2, 16, 24, 3}, {false, 4, 3, 1, 24, 24, 2},
	}, WidthMult: 0.5, DepthMult: 0.5, Classes: 10},
	"efficientnet_v2": EfficientNetConfig{Stages: []MBConv{
		{true, 1, 3, 1, 8, 8, 2}, {true, 4, 3, 2, 8, 16, 2}, {false, 4, 3, 2, 16, 24, 2},
	}, WidthMult: 1, DepthMult: 1, LastChannel: 48, Eps: 1e-3, Classes: 10},
	"regnet_y":      RegNetConfig{Depth: 4, W0: 8, WA: 8.5, WM: 2, GroupWidth: 4, SERatio: 0.25, StemWidth: 8, Classes: 10},
	"regnet_x":      RegNetConfig{Depth: 5, W0: 8, WA: 6.3, WM: 2.2, GroupWidth: 8, StemWidth: 8, Classes: 10},
	"convnext":      ConvNeXtConfig{Stages: []ConvNeXtStage{{8, 16, 1}, {16, 0, 2}}, Classes: 10},
	"densenet":      DenseNetConfig{Growth: 4, Blocks: []int{2, 3}, InitFeat: 8, BNSize: 2, Classes: 10},
	"shufflenet_v2": ShuffleNetV2Config{Repeats: []int{2, 1, 2}, Channels: []int{8, 16, 32, 64, 96}, Classes: 10},
	"squeezenet1_0": SqueezeNetConfig{Version: "1_0", Classes: 10},
	"squeezenet1_1": SqueezeNetConfig{Version: "1_1", Classes: 10},
	"resnet18":      ResNetConfig{Layers: []int{2, 2, 2, 2}, Groups: 1, WidthPerGroup: 64, Base: 64, Classes: 10},
	"mnasnet0_5":    MNASNetConfig{Alpha: 0.5, Classes: 10},
	"mnasnet0_5_v1": MNASNetConfig{Alpha: 0.5, V1Stem: true, Classes: 10},
	"googlenet":     GoogLeNetConfig{TransformInput: true, Classes: 10},
	"maxvit": MaxViTConfig{Stem: 8, Channels: []int{16, 16}, Layers: []int{1, 2}, HeadDim: 8, PartitionSize: 2,
		Expansion: 4, Squeeze: 0.25, MLPRatio: 4, Classes: 10},
	"swin":         SwinConfig{Patch: 4, EmbedDim: 8, Depths: []int{2, 2}, Heads: []int{2, 4}, Window: 4, MLPRatio: 4, Classes: 10},
	"swin_v2":      SwinConfig{V2: true, Patch: 4, EmbedDim: 8, Depths: []int{2, 2}, Heads: []int{2, 4}, Window: 4, MLPRatio: 4, Classes: 10},
	"inception_v3": InceptionV3Config{TransformInput: true, AuxLogits: true, Classes: 10},
	"resnext":      ResNetConfig{Bottleneck: true, Layers: []int{1, 2, 1, 1}, Groups: 4, WidthPerGroup: 4, Base: 64, Classes: 10},
}

// fixtureTolerance loosens the comparison where the graph rounds to
// float32 what PyTorch keeps in float64: the Inception input transform's
// scales are float32 constants, and ir's Reduce evaluation (Swin V2's
// ReduceL2 of queries and keys) rounds its outputs to the input dtype.
var fixtureTolerance = map[string]float64{"googlenet": 1e-8, "inception_v3": 1e-8, "swin_v2": 1e-7}

type fixtureEntry struct {
	// File is the saved state dict; without one, the weights are
	// RandomStateDictFor's with Seed.
	File      string `json:"file"`
	Seed      uint32 `json:"seed"`
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
// PyTorch saved (or the seeded one both compute) and compares the float64
// reference evaluation of the graph with PyTorch's float64 logits.
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
		if testing.Short() && fx.Params > 1e6 {
			continue
		}
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
			var sd *checkpoint.StateDict
			if fx.File != "" {
				sd, err = checkpoint.Load(filepath.Join(fixtureDir, fx.File))
			} else {
				sd, err = RandomStateDictFor(cfg, fx.ImageSize, fx.Seed)
			}
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
			// The unbound graph's evaluation: its constant subgraphs (Swin
			// V2's position bias) are not folded into float32 constants.
			out, err := ir.Evaluate(context.Background(), g, map[string]*ir.Array{InputName: in})
			if err != nil {
				t.Fatal(err)
			}
			got := out[0]
			if !got.Shape.Equal(want.Shape) {
				t.Fatalf("logits shape %v, PyTorch's %v", got.Shape, want.Shape)
			}
			rel := relDiff(got.Data, want.Data)
			tol := 1e-12
			if v, ok := fixtureTolerance[name]; ok {
				tol = v
			}
			if !(rel <= tol) {
				t.Errorf("max|got-ref|/max|ref| = %.3g, want <= %g", rel, tol)
			}
			// As engines see it: bound (every shape inferred, constants
			// folded), with the engine-neutral passes (BatchNorm folding,
			// composite recognition, epilogue fusion) and then decomposed
			// back to primitives. Folded weights are float32, hence the
			// looser bound.
			opt, _, err := ir.Optimize(g, in.Shape[0])
			if err != nil {
				t.Fatal(err)
			}
			var relOpt [2]float64
			for i, decompose := range []bool{false, true} {
				if decompose {
					if _, err := ir.Decompose(opt, nil); err != nil {
						t.Fatal(err)
					}
				}
				res, err := ir.Evaluate(context.Background(), opt, map[string]*ir.Array{InputName: in})
				if err != nil {
					t.Fatalf("optimized (decomposed %v): %v", decompose, err)
				}
				if relOpt[i] = relDiff(res[0].Data, want.Data); !(relOpt[i] <= 1e-6) {
					t.Errorf("optimized (decomposed %v): max|got-ref|/max|ref| = %.3g, want <= 1e-6", decompose, relOpt[i])
				}
			}
			t.Logf("%d nodes, logits %v, max|got-ref|/max|ref| = %.3g (optimized %.3g, decomposed %.3g)", len(g.Nodes), got.Shape, rel, relOpt[0], relOpt[1])
		})
	}
}

// relDiff is max|got-want| / max|want|.
func relDiff(got, want []float64) float64 {
	var maxDiff, maxRef float64
	for i := range want {
		maxDiff = math.Max(maxDiff, math.Abs(got[i]-want[i]))
		maxRef = math.Max(maxRef, math.Abs(want[i]))
	}
	return maxDiff / maxRef
}
