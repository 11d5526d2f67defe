package tensor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goldenDir = "../../testdata/golden/"

// npyBytes builds a version-1.0 .npy file with the given header dict.
func npyBytes(header string, data []byte) []byte {
	var b bytes.Buffer
	b.WriteString(npyMagic + "\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func TestReadNPYGolden(t *testing.T) {
	tests := []struct {
		file  string
		dt    DType
		shape string
	}{
		{"resnet18_w8_input0.npy", Float32, "[2 3 64 64]"},
		{"resnet18_w8_input1.npy", Float32, "[3 3 45 37]"},
		{"resnet18_w8_ref0.npy", Float64, "[2 10]"},
		{"image_png_u8.npy", Uint8, "[224 224 3]"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := goldenDir + tt.file
			x, err := LoadNPY(path)
			if err != nil {
				t.Fatal(err)
			}
			if x.DType != tt.dt || x.Shape.String() != tt.shape {
				t.Fatalf("got %s%v, want %s%s", x.DType, x.Shape, tt.dt, tt.shape)
			}
			// numpy.save and WriteNPY must agree byte for byte.
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := WriteNPY(&out, x); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), raw) {
				t.Errorf("WriteNPY output differs from numpy's file (header %q vs %q)", out.Bytes()[:128], raw[:128])
			}
		})
	}
}

func TestNPYRoundTrip(t *testing.T) {
	dir := t.TempDir()
	tests := []*Tensor{
		New(Float32, 2, 3),
		New(Float16, 7),
		New(Float64),
		New(Uint8, 0, 4),
		New(Int8, 3, 1, 2),
		New(Int32, 5),
		New(Int64, 1, 1),
		New(Bool, 2),
	}
	for i, x := range tests {
		for j := range x.Data {
			x.Data[j] = byte(i*31 + j)
		}
		if x.DType == Bool {
			x.Data[0], x.Data[1] = 0, 1
		}
		p := filepath.Join(dir, x.DType.String()+".npy")
		if err := SaveNPY(p, x); err != nil {
			t.Fatal(err)
		}
		y, err := LoadNPY(p)
		if err != nil {
			t.Fatalf("%s%v: %v", x.DType, x.Shape, err)
		}
		if y.DType != x.DType || !y.Shape.Equal(x.Shape) || !bytes.Equal(y.Data, x.Data) {
			t.Errorf("%s%v came back as %s%v", x.DType, x.Shape, y.DType, y.Shape)
		}
		raw, _ := os.ReadFile(p)
		if hl := 10 + int(binary.LittleEndian.Uint16(raw[8:])); hl%64 != 0 {
			t.Errorf("%s: data starts at byte %d, not a multiple of 64", p, hl)
		}
	}
}

func TestWriteNPYLargeHeaderUsesVersion2(t *testing.T) {
	shape := make([]int, 30000) // a header over 64 KiB
	for i := range shape {
		shape[i] = 1
	}
	x := New(Uint8, shape...)
	var b bytes.Buffer
	if err := WriteNPY(&b, x); err != nil {
		t.Fatal(err)
	}
	if b.Bytes()[6] != 2 {
		t.Fatalf("version %d, want 2", b.Bytes()[6])
	}
	y, err := ReadNPY(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !y.Shape.Equal(x.Shape) {
		t.Error("shape changed")
	}
}

func TestReadNPYHeaders(t *testing.T) {
	f4 := make([]byte, 8)
	tests := []struct {
		name, header string
		data         []byte
		wantShape    string
		wantErr      string
	}{
		{"numpy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }   \n", f4, "[2]", ""},
		{"reordered double quotes", `{"shape": (1, 2), "fortran_order": False, "descr": "<f4"}` + "\n", f4, "[1 2]", ""},
		{"python2 long", "{'descr': '<f4', 'fortran_order': False, 'shape': (2L,), }\n", f4, "[2]", ""},
		{"list shape", "{'descr': '=f4', 'fortran_order': False, 'shape': [2], }\n", f4, "[2]", ""},
		{"scalar", "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", f4[:4], "[]", ""},
		{"fortran", "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }\n", f4, "", "Fortran order"},
		{"big endian", "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", f4, "", "big-endian"},
		{"complex", "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }\n", f4, "", `"<c8" is not supported`},
		{"structured", "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }\n", f4, "", "structured"},
		{"negative dim", "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }\n", f4, "", "dimension 0"},
		{"missing shape", "{'descr': '<f4', 'fortran_order': False}\n", f4, "", "'shape'"},
		{"not a dict", "('<f4', False)\n", f4, "", "not a dict"},
		{"garbage", "{'descr': '<f4', 'fortran_order': Fals", f4, "", "npy header"},
		{"trailing", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x\n", f4, "", "after the dict"},
		{"duplicate", "{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (2,)}\n", f4, "", "twice"},
		{"truncated data", "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", f4, "", "truncated"},
		{"huge claim", "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000,), }\n", f4, "", "truncated"},
		{"overflow", "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n", f4, "", "more than"},
		{"deep", "{'descr': " + strings.Repeat("(", 100) + "\n", f4, "", "nested too deeply"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := ReadNPY(bytes.NewReader(npyBytes(tt.header, tt.data)))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if x.Shape.String() != tt.wantShape {
				t.Errorf("shape %v, want %s", x.Shape, tt.wantShape)
			}
		})
	}
}

func TestReadNPYBadPrefix(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"not npy", []byte("PK\x03\x04 hello world"), "not a .npy file"},
		{"version", []byte(npyMagic + "\x04\x00\x10\x00"), "version 4.0"},
		{"short header", []byte(npyMagic + "\x01\x00\x50\x00{'descr'"), "truncated"},
		{"v2 huge header", []byte(npyMagic + "\x02\x00\xff\xff\xff\x7f"), "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadNPY(bytes.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := ReadNPY(bytes.NewReader(nil)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("empty input: %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestWriteNPYRejectsBFloat16(t *testing.T) {
	if err := WriteNPY(io.Discard, New(BFloat16, 2)); err == nil || !strings.Contains(err.Error(), "bfloat16") {
		t.Errorf("got %v", err)
	}
	if _, err := LoadNPY(filepath.Join(t.TempDir(), "missing.npy")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func FuzzReadNPY(f *testing.F) {
	f.Add(npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", make([]byte, 8)))
	f.Add(npyBytes("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 1), }\n", make([]byte, 2)))
	f.Add(npyBytes("{'descr': '<i8', 'fortran_order': False, 'shape': (), }\n", make([]byte, 8)))
	if raw, err := os.ReadFile(goldenDir + "resnet18_w8_ref0.npy"); err == nil {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		x, err := ReadNPY(bytes.NewReader(in))
		if err != nil {
			return
		}
		if err := x.Validate(); err != nil {
			t.Fatalf("ReadNPY returned an invalid tensor: %v", err)
		}
		// What was read must survive a write and a second read unchanged.
		var b bytes.Buffer
		if err := WriteNPY(&b, x); err != nil {
			t.Fatal(err)
		}
		y, err := ReadNPY(&b)
		if err != nil {
			t.Fatal(err)
		}
		if y.DType != x.DType || !y.Shape.Equal(x.Shape) || !bytes.Equal(y.Data, x.Data) {
			t.Fatal("round trip changed the array")
		}
	})
}
