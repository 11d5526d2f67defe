package checkpoint

import (
	"bytes"
	"math/rand/v2"
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

// FuzzLoadSafetensors starts from small files only: sample() (which
// holds bfloat16, float16 and empty tensors) and hand-made headers.
func FuzzLoadSafetensors(f *testing.F) {
	f.Add(smallFile(f, FormatSafetensors))
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"))
	f.Add([]byte("\x40\x00\x00\x00\x00\x00\x00\x00{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}    \x00\x00\x80\x3f"))
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

// FuzzLoadPTH mutates whole checkpoints: the zip container, the records'
// layout and the pickle. Its seeds are small (the golden checkpoints are
// hundreds of kilobytes, which made each execution and each minimisation
// slow): sample() written by goinfer, archives of one tensor, and
// testdata/fuzz/FuzzLoadPTH/torch-*-tiny, written by torch itself
// (testdata/torch_tiny_seeds.py).
func FuzzLoadPTH(f *testing.F) {
	f.Add(smallFile(f, FormatPTH))
	f.Add(archive(f, oneTensor("FloatStorage", 6, 0, []int64{3, 2}, []int64{1, 3}), map[string][]byte{"0": make([]byte, 24)}))
	f.Add(archive(f, oneTensor("HalfStorage", 3, 1, []int64{2}, []int64{1}), map[string][]byte{"0": make([]byte, 6)}, "byteorder", "little"))
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
// are valid, so that the fuzzer spends its time in the pickle path. The
// archive around the pickle is rebuilt per input; it is a few hundred
// bytes of stored (uncompressed) records.
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
	// testdata/fuzz/FuzzUnpicklePTH/torch-*-tiny is a data.pkl that torch
	// wrote, with the opcodes torch uses; it loads against storages.
	f.Fuzz(func(t *testing.T, pkl []byte) {
		got, err := readPTH(archive(t, pkl, storages))
		if err != nil {
			return
		}
		checkDict(t, got)
	})
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
