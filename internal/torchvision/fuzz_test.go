package torchvision

import (
	"testing"

	"goinfer/internal/checkpoint"
	"goinfer/internal/tensor"
)

// FuzzBuild feeds Build state dicts whose tensors have arbitrary shapes
// and dtypes: every one must be refused or built, never panic.
func FuzzBuild(f *testing.F) {
	f.Add("features.0.0.weight", uint8(4), uint8(8), uint8(3), uint8(3), uint8(0), false)
	f.Add("classifier.3.bias", uint8(1), uint8(4), uint8(0), uint8(0), uint8(1), true)
	f.Add("features.1.block.1.fc1.weight", uint8(2), uint8(0), uint8(8), uint8(1), uint8(2), false)
	cfg := MobileNetV3Config{Setting: []V3Block{{8, 3, 8, 8, true, false, 2}}, LastChannel: 16, WidthMult: 1, Classes: 4}
	base, err := RandomStateDictFor(cfg, 16, 1)
	if err != nil {
		f.Fatal(err)
	}
	dtypes := []tensor.DType{tensor.Float32, tensor.Float16, tensor.Int64, tensor.BFloat16}
	f.Fuzz(func(t *testing.T, key string, rank, d0, d1, d2, dt uint8, drop bool) {
		sd := checkpoint.NewStateDict()
		for _, k := range base.Names() {
			v, _ := base.Get(k)
			if k == key && drop {
				continue
			}
			sd.Set(k, v)
		}
		if !drop {
			shape := tensor.Shape{int(d0), int(d1), int(d2), 1}[:rank%5]
			sd.Set(key, tensor.New(dtypes[int(dt)%len(dtypes)], shape...))
		}
		for _, arch := range []string{"mobilenet_v3_small", ""} {
			if arch != "" {
				_, _ = Build(arch, sd, Options{ImageSize: 16})
			} else {
				_, _ = BuildWith(cfg, sd, Options{ImageSize: 16})
			}
		}
	})
}

// FuzzFromFileName checks that any name is recognised, refused with an
// error or passed over, without a panic, and that a recognised one is an
// entry of the table.
func FuzzFromFileName(f *testing.F) {
	for _, s := range []string{"resnet18-f37072fd.pth", "vit_b_16-00000000.pth", "x-.pth", "-abcdef12.pt", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		w, ok, err := FromFileName(name)
		if ok && (err != nil || w.Arch == "" || !Known(w.Arch)) {
			t.Fatalf("%q: %+v %v %v", name, w, ok, err)
		}
	})
}
