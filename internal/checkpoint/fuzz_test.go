package checkpoint

import (
	"archive/zip"
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"goinfer/internal/tensor"
)

// smallFile returns sample() written in format f.
func smallFile(t testing.TB, f Format) []byte {
	var b bytes.Buffer
	write := writeSafetensors
	if f == FormatPTH {
		write = writePTH
	}
	if err := write(&b, sample()); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// checkDict fails unless every tensor of sd is self-consistent.
func checkDict(t *testing.T, sd *StateDict) {
	for _, n := range sd.Names() {
		x, _ := sd.Get(n)
		if err := x.Validate(); err != nil {
			t.Fatalf("tensor %q: %v", n, err)
		}
	}
}

func FuzzLoadSafetensors(f *testing.F) {
	f.Add(smallFile(f, FormatSafetensors))
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"))
	f.Add([]byte("\x40\x00\x00\x00\x00\x00\x00\x00{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}    \x00\x00\x80\x3f"))
	if raw, err := os.ReadFile(golden + "bottleneck_w4_g2_bf16.safetensors"); err == nil {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sd, err := readSafetensors(data)
		if err != nil {
			return
		}
		checkDict(t, sd)
		// Whatever loads must survive a save and a second load unchanged.
		var b bytes.Buffer
		if err := writeSafetensors(&b, sd); err != nil {
			t.Fatal(err)
		}
		again, err := readSafetensors(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if err := equalDicts(sd, again); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzLoadPTH(f *testing.F) {
	f.Add(smallFile(f, FormatPTH))
	if raw, err := os.ReadFile(golden + "bottleneck_w4_g2.pth"); err == nil {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sd, err := readPTH(data)
		if err != nil {
			return
		}
		checkDict(t, sd)
		var b bytes.Buffer
		if err := writePTH(&b, sd); err != nil {
			t.Fatal(err)
		}
		again, err := readPTH(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if err := equalDicts(sd, again); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzUnpicklePTH mutates only data.pkl, inside an archive whose storages
// are valid, so that the fuzzer spends its time in the pickle path.
func FuzzUnpicklePTH(f *testing.F) {
	sd := sample()
	storages := map[string][]byte{}
	for i, n := range sd.Names() {
		x, _ := sd.Get(n)
		storages[strconv.Itoa(i)] = x.Data
	}
	f.Add(statePickle(sd.Names(), func() []*tensor.Tensor {
		var ts []*tensor.Tensor
		for _, n := range sd.Names() {
			x, _ := sd.Get(n)
			ts = append(ts, x)
		}
		return ts
	}()))
	f.Add(oneTensor("FloatStorage", 6, 0, []int64{3, 2}, []int64{1, 3}))
	f.Add(oneTensor("HalfStorage", 3, 1, []int64{2}, []int64{1}))
	if raw, err := os.ReadFile(golden + "resnet18_w8.pth"); err == nil {
		if old, err := readRecordNamed(raw, "resnet18_w8/data.pkl"); err == nil {
			f.Add(old)
		}
	}
	f.Fuzz(func(t *testing.T, pkl []byte) {
		got, err := readPTH(archive(t, pkl, storages))
		if err != nil {
			return
		}
		checkDict(t, got)
	})
}

// readRecordNamed returns one record of a zip held in memory.
func readRecordNamed(raw []byte, name string) ([]byte, error) {
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return nil, err
	}
	for _, f := range zr.File {
		if f.Name == name {
			return readRecord(raw, f, maxPickleBytes)
		}
	}
	return nil, os.ErrNotExist
}

// TestRandomCorruption is a deterministic stand-in for the fuzzers in
// ordinary test runs: thousands of randomly corrupted archives and
// safetensors files must each load or fail with one line, never panic.
func TestRandomCorruption(t *testing.T) {
	seeds := map[string][]byte{
		"pth":         smallFile(t, FormatPTH),
		"safetensors": smallFile(t, FormatSafetensors),
	}
	r := rand.New(rand.NewPCG(7, 7))
	for name, seed := range seeds {
		loaded := 0
		for i := 0; i < 3000; i++ {
			d := bytes.Clone(seed)
			for range 1 + r.IntN(8) {
				d[r.IntN(len(d))] = byte(r.IntN(256))
			}
			if r.IntN(4) == 0 {
				d = d[:r.IntN(len(d))]
			}
			sd, err := parse("x", d)
			if err != nil {
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("%s mutation %d: multi-line error %q", name, i, err)
				}
				continue
			}
			loaded++
			for _, n := range sd.Names() {
				x, _ := sd.Get(n)
				if err := x.Validate(); err != nil {
					t.Fatalf("%s mutation %d: tensor %q: %v", name, i, n, err)
				}
			}
		}
		t.Logf("%s: %d of 3000 corrupted files still loaded (changed data bytes)", name, loaded)
	}
}
