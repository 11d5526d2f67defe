package checkpoint

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"goinfer/internal/tensor"
)

const golden = "../../testdata/golden/"

func mustLoad(t *testing.T, path string) *StateDict {
	t.Helper()
	sd, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sd.Close() })
	return sd
}

// equalDicts reports the first difference between two state dicts, by
// name set, dtype, shape and bytes.
func equalDicts(a, b *StateDict) error {
	if !slices.Equal(a.SortedNames(), b.SortedNames()) {
		return errors.New("different key sets: " + strings.Join(a.SortedNames(), ",") + " vs " + strings.Join(b.SortedNames(), ","))
	}
	for _, n := range a.Names() {
		x, _ := a.Get(n)
		y, _ := b.Get(n)
		if x.DType != y.DType || !x.Shape.Equal(y.Shape) || !bytes.Equal(x.Data, y.Data) {
			return errors.New("tensor " + n + " differs: " + x.DType.String() + x.Shape.String() + " vs " + y.DType.String() + y.Shape.String())
		}
	}
	return nil
}

// aliases reports whether every non-empty tensor's data lies inside the
// memory the state dict's closer maps, i.e. was not copied.
func aliases(sd *StateDict) bool {
	fb, ok := sd.closer.(*fileBytes)
	if !ok || fb.unmap == nil || len(fb.data) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(&fb.data[0]))
	hi := lo + uintptr(len(fb.data))
	for _, n := range sd.Names() {
		t, _ := sd.Get(n)
		if len(t.Data) == 0 {
			continue
		}
		p := uintptr(unsafe.Pointer(&t.Data[0]))
		if p < lo || p >= hi {
			return false
		}
	}
	return true
}

func TestLoadGoldenPTHMatchesSafetensors(t *testing.T) {
	for _, name := range []string{"resnet18_w8", "bottleneck_w4_g2"} {
		t.Run(name, func(t *testing.T) {
			pth := mustLoad(t, golden+name+".pth")
			st := mustLoad(t, golden+name+".safetensors")
			if err := equalDicts(pth, st); err != nil {
				t.Fatal(err)
			}
			if got := pth.Names()[0]; got != "conv1.weight" {
				t.Errorf("first .pth key %q, want conv1.weight (file order)", got)
			}
			w, _ := pth.Get("conv1.weight")
			if w.DType != tensor.Float32 || w.Shape.String() != "[8 3 7 7]" && name == "resnet18_w8" {
				t.Errorf("conv1.weight is %s%v", w.DType, w.Shape)
			}
			nb, _ := pth.Get("bn1.num_batches_tracked")
			if nb.DType != tensor.Int64 || len(nb.Shape) != 0 || nb.Data[0] != 7 {
				t.Errorf("bn1.num_batches_tracked = %s%v %v, want int64 scalar 7", nb.DType, nb.Shape, nb.Data)
			}
			for _, sd := range []*StateDict{pth, st} {
				if !aliases(sd) {
					t.Errorf("tensors were copied instead of aliasing the mapped file")
				}
			}
		})
	}
}

func TestLoadGoldenReducedPrecision(t *testing.T) {
	tests := []struct {
		file, base string
		dt         tensor.DType
	}{
		{"resnet18_w8_f16.safetensors", "resnet18_w8.safetensors", tensor.Float16},
		{"bottleneck_w4_g2_bf16.safetensors", "bottleneck_w4_g2.safetensors", tensor.BFloat16},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			sd := mustLoad(t, golden+tt.file)
			base := mustLoad(t, golden+tt.base)
			w, _ := sd.Get("layer1.0.conv1.weight")
			if w.DType != tt.dt {
				t.Fatalf("dtype %s, want %s", w.DType, tt.dt)
			}
			got, err := w.ToFloat32()
			if err != nil {
				t.Fatal(err)
			}
			ref, _ := base.Get("layer1.0.conv1.weight")
			want := ref.Float32s()
			for i := range want {
				// bf16 keeps 8 significant bits, f16 11: relative error below 2^-8.
				if d := got[i] - want[i]; d > 4e-3*abs32(want[i])+1e-6 || -d > 4e-3*abs32(want[i])+1e-6 {
					t.Fatalf("element %d: %g, full precision %g", i, got[i], want[i])
				}
			}
		})
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// sample returns a state dict exercising every dtype and odd shapes.
func sample() *StateDict {
	sd := NewStateDict()
	f32, _ := tensor.FromFloat32(tensor.Shape{2, 3}, []float32{1, -2, 3.5, 4, 5, -6})
	sd.Set("z.weight", f32)
	h := tensor.New(tensor.Float16, 3)
	copy(h.Data, []byte{0, 0x3c, 0, 0xc0, 0x55, 0x35}) // 1, -2, 0.333
	sd.Set("half", h)
	bf := tensor.New(tensor.BFloat16, 1, 1, 1)
	copy(bf.Data, []byte{0x80, 0x3f})
	sd.Set("bf", bf)
	d := tensor.New(tensor.Float64, 2)
	copy(d.Data, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 1, 2, 3, 4, 5, 6, 7, 8})
	sd.Set("double", d)
	n := tensor.New(tensor.Int64)
	n.Data[0] = 7
	sd.Set("a.num_batches_tracked", n)
	sd.Set("empty", tensor.New(tensor.Float32, 0, 3))
	u := tensor.New(tensor.Uint8, 5)
	copy(u.Data, "hello")
	sd.Set("bytes", u)
	sd.Set("i32", tensor.New(tensor.Int32, 2, 2))
	return sd
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, ext := range []string{".pth", ".pt", ".safetensors"} {
		t.Run(ext, func(t *testing.T) {
			want := sample()
			path := filepath.Join(dir, "sample"+ext)
			if err := Save(path, want); err != nil {
				t.Fatal(err)
			}
			got := mustLoad(t, path)
			if err := equalDicts(want, got); err != nil {
				t.Fatal(err)
			}
			if ext != ".safetensors" && !slices.Equal(got.Names(), want.Names()) {
				t.Errorf("order %v, want %v", got.Names(), want.Names())
			}
			if !aliases(got) {
				t.Error("tensors of a file goinfer wrote were copied, not mapped")
			}
		})
	}
	t.Run("golden", func(t *testing.T) {
		src := mustLoad(t, golden+"resnet18_w8.pth")
		for _, ext := range []string{".pth", ".safetensors"} {
			path := filepath.Join(dir, "resnet"+ext)
			if err := Save(path, src); err != nil {
				t.Fatal(err)
			}
			if err := equalDicts(src, mustLoad(t, path)); err != nil {
				t.Fatalf("%s: %v", ext, err)
			}
		}
	})
}

func TestSavePTHLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pth")
	if err := Save(path, sample()); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		if f.Method != zip.Store {
			t.Errorf("%s is compressed; torch stores records", f.Name)
		}
		off, err := f.DataOffset()
		if err != nil {
			t.Fatal(err)
		}
		if off%64 != 0 {
			t.Errorf("%s starts at byte %d, not 64-byte aligned", f.Name, off)
		}
		rc, err := f.Open() // reading to the end checks the CRC
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bytes.NewBuffer(nil).ReadFrom(rc); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
		rc.Close()
	}
	want := []string{"archive/data.pkl", "archive/.format_version", "archive/.storage_alignment", "archive/byteorder"}
	if !slices.Equal(names[:4], want) || names[len(names)-1] != "archive/version" || names[4] != "archive/data/0" {
		t.Errorf("records %v", names)
	}
}

func TestSaveRejects(t *testing.T) {
	dir := t.TempDir()
	sd := NewStateDict()
	sd.Set("x", tensor.New(tensor.Int8, 2))
	if err := Save(filepath.Join(dir, "x.onnx"), sd); err == nil || !strings.Contains(err.Error(), ".onnx") {
		t.Errorf("unknown extension: %v", err)
	}
	bad := NewStateDict()
	bad.Set("w", &tensor.Tensor{DType: tensor.Float32, Shape: tensor.Shape{3}, Data: make([]byte, 8)})
	for _, ext := range []string{".pth", ".safetensors"} {
		p := filepath.Join(dir, "bad"+ext)
		if err := Save(p, bad); err == nil || !strings.Contains(err.Error(), `"w"`) {
			t.Errorf("%s: tensor with short data: %v", ext, err)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: failed save left a file", ext)
		}
	}
}

func TestCastFloats(t *testing.T) {
	sd := NewStateDict()
	w, _ := tensor.FromFloat32(tensor.Shape{3}, []float32{1, -2.5, 1.0 / 3})
	sd.Set("w", w)
	n := tensor.New(tensor.Int64)
	n.Data[0] = 9
	sd.Set("n", n)
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16, tensor.Float32} {
		out, err := CastFloats(sd, dt)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := out.Get("w")
		if c.DType != dt {
			t.Fatalf("w is %s, want %s", c.DType, dt)
		}
		v, _ := c.ToFloat32()
		if v[0] != 1 || v[1] != -2.5 || v[2] < 0.332 || v[2] > 0.334 {
			t.Errorf("%s: %v", dt, v)
		}
		if m, _ := out.Get("n"); m.DType != tensor.Int64 || m.Data[0] != 9 {
			t.Errorf("%s: integer tensor changed to %s %v", dt, m.DType, m.Data)
		}
	}
	if _, err := CastFloats(sd, tensor.Int8); err == nil {
		t.Error("cast to int8 accepted")
	}
}

// TestPTHCompressedRecords loads an archive whose records were deflated
// (a .pth re-zipped by a tool): storages are then copied, not aliased.
func TestPTHCompressedRecords(t *testing.T) {
	stored := smallFile(t, FormatPTH)
	zr, err := zip.NewReader(bytes.NewReader(stored), int64(len(stored)))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, f := range zr.File {
		w, err := zw.Create(f.Name) // deflate
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := f.Open()
		if _, err := io.Copy(w, rc); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	zw.Close()
	path := filepath.Join(t.TempDir(), "deflated.pth")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	got := mustLoad(t, path)
	if err := equalDicts(sample(), got); err != nil {
		t.Fatal(err)
	}
}
