package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"goinfer/internal/tensor"
)

// archive builds a torch.save-style zip from a pickle and storages.
func archive(t testing.TB, pkl []byte, storages map[string][]byte, extra ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := &alignedZip{zw: zip.NewWriter(&b)}
	if err := zw.add("archive/data.pkl", pkl); err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if err := zw.add("archive/"+extra[i], []byte(extra[i+1])); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range storages {
		if err := zw.add("archive/data/"+k, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func newPickler() *pickler {
	p := &pickler{memo: map[string]int{}}
	p.op(0x80, 2)
	return p
}

// oneTensor is a pickle of {"w": view} over storage "0" of storage type st.
func oneTensor(st string, numel, offset int64, size, stride []int64) []byte {
	p := newPickler()
	p.emptyOrderedDict()
	p.op('(')
	p.str("w")
	p.tensor(st, "0", numel, offset, size, stride)
	p.op('u', '.')
	return p.b.Bytes()
}

// sharedStorage is a pickle of {"a", "b"} viewing one storage "0", first as
// storage type st1 of numel1 elements, then as st2 of numel2.
func sharedStorage(st1 string, numel1 int64, st2 string, numel2 int64) []byte {
	p := newPickler()
	p.emptyOrderedDict()
	p.op('(')
	p.str("a")
	p.tensor(st1, "0", numel1, 0, []int64{numel1}, []int64{1})
	p.str("b")
	p.tensor(st2, "0", numel2, numel2-1, []int64{1}, []int64{1})
	p.op('u', '.')
	return p.b.Bytes()
}

func f32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func TestPTHViews(t *testing.T) {
	storage := map[string][]byte{"0": f32s(0, 1, 2, 3, 4, 5)}
	tests := []struct {
		name         string
		offset       int64
		size, stride []int64
		want         []float32
		wantErr      string
	}{
		{"contiguous", 0, []int64{2, 3}, []int64{3, 1}, []float32{0, 1, 2, 3, 4, 5}, ""},
		{"offset", 2, []int64{2, 2}, []int64{2, 1}, []float32{2, 3, 4, 5}, ""},
		{"transposed", 0, []int64{3, 2}, []int64{1, 3}, []float32{0, 3, 1, 4, 2, 5}, ""},
		{"expanded", 1, []int64{2, 2}, []int64{0, 1}, []float32{1, 2, 1, 2}, ""},
		{"size-1 dims ignore stride", 1, []int64{1, 3, 1}, []int64{99, 1, 7}, []float32{1, 2, 3}, ""},
		{"empty", 0, []int64{0, 3}, []int64{3, 1}, []float32{}, ""},
		{"expanded past the storage size", 0, []int64{1 << 20, 1 << 20}, []int64{0, 0}, nil, "more elements than its storage"},
		{"past the end", 1, []int64{2, 3}, []int64{3, 1}, nil, "reaches past its storage"},
		{"offset outside", 6, []int64{1}, []int64{1}, nil, "outside its storage"},
		{"huge stride", 0, []int64{2}, []int64{1 << 62}, nil, "outside its storage"},
		{"negative size", 0, []int64{-1}, []int64{1}, nil, "invalid dimension"},
		{"rank mismatch", 0, []int64{2, 3}, []int64{1}, nil, "differ in rank"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd, err := readPTH(archive(t, oneTensor("FloatStorage", 6, tt.offset, tt.size, tt.stride), storage))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w, _ := sd.Get("w")
			got := w.Float32s()
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestPTHWrappers(t *testing.T) {
	w := tensor.New(tensor.Float32, 2)
	ok := func(p *pickler) { p.stateDict([]string{"fc.weight"}, []*tensor.Tensor{w}) }
	tests := []struct {
		name    string
		build   func(p *pickler)
		wantErr string
	}{
		{"ordered dict", ok, ""},
		{"state_dict() with _metadata", func(p *pickler) {
			// nn.Module.state_dict() returns an OrderedDict carrying a
			// _metadata attribute, which pickles as a BUILD after the items.
			ok(p)
			p.op('}', '(')
			p.str("_metadata")
			p.emptyOrderedDict()
			p.op('(')
			p.str("")
			p.op('}', '(')
			p.str("version")
			p.int(1)
			p.op('u', 'u', 'u', 'b')
		}, ""},
		{"cuda storage", func(p *pickler) {
			p.emptyOrderedDict()
			p.op('(')
			p.str("fc.weight")
			p.global("torch._utils", "_rebuild_tensor_v2")
			p.op('(', '(')
			p.str("storage")
			p.global("torch.cuda", "FloatStorage")
			p.str("0")
			p.str("cuda:0")
			p.int(2)
			p.op('t', 'Q')
			p.int(0)
			p.tuple([]int64{2})
			p.tuple([]int64{1})
			p.op(0x89)
			p.emptyOrderedDict()
			p.op('t', 'R', 'u')
		}, ""},
		{"plain dict", func(p *pickler) {
			p.op('}', '(')
			p.str("fc.weight")
			p.tensor("FloatStorage", "0", 2, 0, []int64{2}, []int64{1})
			p.op('u')
		}, ""},
		{"state_dict wrapper", func(p *pickler) {
			p.op('}', '(')
			p.str("epoch")
			p.int(3)
			p.str("args")
			p.global("argparse", "Namespace")
			p.op(')', 'R')
			p.str("state_dict")
			ok(p)
			p.op('u')
		}, ""},
		{"model wrapper", func(p *pickler) {
			p.op('}', '(')
			p.str("model")
			ok(p)
			p.op('u')
		}, ""},
		{"pickled module", func(p *pickler) {
			p.op('}', '(')
			p.str("model")
			p.global("torchvision.models.resnet", "ResNet")
			p.op(')', 'R')
			p.op('u')
		}, "pickled torchvision.models.resnet.ResNet object"},
		{"not a dict", func(p *pickler) { p.op(']') }, "want a state dict"},
		{"non-tensor value", func(p *pickler) {
			p.op('}', '(')
			p.str("fc.weight")
			p.int(3)
			p.op('u')
		}, `key "fc.weight" holds the integer 3, not a tensor`},
		{"non-string key", func(p *pickler) {
			p.op('}', '(')
			p.int(1)
			p.tensor("FloatStorage", "0", 2, 0, []int64{2}, []int64{1})
			p.op('u')
		}, "key, want strings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPickler()
			tt.build(p)
			p.op('.')
			sd, err := readPTH(archive(t, p.b.Bytes(), map[string][]byte{"0": make([]byte, 8)}))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := sd.Get("fc.weight"); !ok || sd.Len() != 1 {
				t.Fatalf("got %v (%v)", sd, sd.Names())
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(golden + "resnet18_w8.pth")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(golden + "resnet18_w8.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	stHeader := func(h string, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		return append(append(b, h...), make([]byte, data)...)
	}
	corruptPickle := bytes.Clone(good)
	copy(corruptPickle[bytes.Index(corruptPickle, []byte("_rebuild_tensor_v2")):], "\xff\xfe\xfd")
	tests := []struct {
		name    string
		content []byte
		want    string
	}{
		{"empty", nil, "empty"},
		{"garbage", []byte("hello, world: not a checkpoint"), "unknown checkpoint format"},
		{"legacy torch.save", []byte("\x80\x02\x8a\x0alegacy"), "legacy torch.save format"},
		{"truncated pth", good[:len(good)*2/3], "corrupt or truncated zip archive"},
		{"corrupt zip", append([]byte("PK\x03\x04"), bytes.Repeat([]byte{0xab}, 100)...), "corrupt or truncated zip archive"},
		{"corrupt pickle", corruptPickle, "corrupt pickle"},
		{"truncated pickle", archive(t, []byte("\x80\x02}q\x00(X\x01\x00\x00\x00a"), nil), "corrupt pickle"},
		{"pickle without STOP", archive(t, []byte("\x80\x02}q\x00"), nil), "no STOP opcode"},
		{"no data.pkl", noPickle(t), "no <archive>/data.pkl record"},
		{"unknown storage type", archive(t, oneTensor("ShortStorage", 2, 0, []int64{2}, []int64{1}), map[string][]byte{"0": make([]byte, 4)}), `key "w": storage type torch.ShortStorage is not supported`},
		{"missing storage", archive(t, oneTensor("FloatStorage", 2, 0, []int64{2}, []int64{1}), nil), "storage record archive/data/0 is missing"},
		{"short storage", archive(t, oneTensor("FloatStorage", 2, 0, []int64{2}, []int64{1}), map[string][]byte{"0": make([]byte, 7)}), "holds 7 bytes, want 8"},
		{"one storage as two types", archive(t, sharedStorage("ByteStorage", 6, "DoubleStorage", 2), map[string][]byte{"0": make([]byte, 6)}), `key "b": storage 0 is referenced as 2 x float64 but holds 6 bytes`},
		{"big endian", archive(t, oneTensor("FloatStorage", 2, 0, []int64{2}, []int64{1}), map[string][]byte{"0": make([]byte, 8)}, "byteorder", "big"), "only little-endian"},
		{"safetensors truncated", st[:len(st)-100], "reach past the"},
		{"safetensors header past end", st[:5000], "truncated safetensors file"},
		{"safetensors huge header length", append(binary.LittleEndian.AppendUint64(nil, 1<<40), '{'), "over the 100000000 byte limit"},
		{"safetensors not json", stHeader(`{"a": nope}`, 0), "not valid JSON"},
		{"safetensors unknown dtype", stHeader(`{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}`, 8), `key "a": dtype "C64" is not supported`},
		{"safetensors size mismatch", stHeader(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), `key "a": data_offsets [0, 8] span 8 bytes, but F32[3] needs 12`},
		{"safetensors negative dim", stHeader(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, 0), `key "a": shape [-1] has an invalid dimension`},
		{"safetensors reversed offsets", stHeader(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, 4), `end before they begin`},
		{"safetensors overlap", stHeader(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), `key "b": data_offsets [4, 8] overlap key "a"`},
		{"safetensors hole", stHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), `leave a hole`},
		{"safetensors trailing data", stHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8), `cover 4`},
		{"safetensors duplicate", stHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), `key "a" twice`},
		{"safetensors missing field", stHeader(`{"a":{"dtype":"F32","shape":[1]}}`, 4), `key "a": record needs dtype, shape and data_offsets`},
		{"safetensors bad metadata", stHeader(`{"__metadata__":{"a":1}}`, 0), `__metadata__`},
		{"safetensors text after JSON", stHeader(`{} {}`, 0), `trailing data`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".pth")
			if err := os.WriteFile(path, tt.content, 0o644); err != nil {
				t.Fatal(err)
			}
			sd, err := Load(path)
			if err == nil {
				sd.Close()
				t.Fatalf("loaded %v, want an error containing %q", sd, tt.want)
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.Contains(msg, tt.want) || !strings.Contains(msg, path) || strings.Contains(msg, "\n") {
				t.Fatalf("error %q, want one line naming %s and containing %q", msg, path, tt.want)
			}
		})
	}
	_, err = Load(filepath.Join(dir, "missing.pth"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing.pth") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
}

func noPickle(t *testing.T) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, err := zw.Create("archive/version")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("3\n"))
	zw.Close()
	return b.Bytes()
}
