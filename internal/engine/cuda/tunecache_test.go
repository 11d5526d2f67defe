package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
)

func TestTuneFileRoundTrip(t *testing.T) {
	k1 := algoKey{n: 32, c: 64, h: 63, w: 63, k: 64, r: 3, stride: 1, pad: 1, groups: 1, prec: engine.FP16}
	k2 := algoKey{n: 1, c: 3, h: 250, w: 250, k: 64, r: 7, stride: 2, pad: 3, groups: 1, prec: engine.BF16}
	algos := map[algoKey][]cu.ConvFwdPerf{
		k1: {{Algo: 1, Time: 0.02, Memory: 1 << 20, MathType: 1}, {Algo: 6, Status: 3, Time: -1}},
		k2: {{Algo: 0, Time: 0.5, Determinism: 1}},
	}
	fused := map[fusedKey]tuned{
		{k1, true, false}: {fused: 1, plain: 1, math: 1},
		{k2, false, true}: {fused: -1, plain: 0, math: -1},
	}
	const device = "NVIDIA H200 sm_90 driver 13000 cudnn 91900"
	path := tunePath(t.TempDir(), device)
	if base := filepath.Base(path); strings.ContainsAny(base, " /") {
		t.Fatalf("cache file name %q has spaces or slashes", base)
	}
	if err := writeAtomic(path, newTuneFile(device, algos, fused)); err != nil {
		t.Fatal(err)
	}
	f, err := readTuneFile(path, device)
	if err != nil || f == nil {
		t.Fatalf("readTuneFile: %v, %v", f, err)
	}
	gotA, gotF := f.entries()
	if !reflect.DeepEqual(gotA, algos) || !reflect.DeepEqual(gotF, fused) {
		t.Fatalf("round trip changed the entries:\n%v\n%v", gotA, gotF)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("%d files in the cache directory; want only the cache (no temporary left)", len(entries))
	}
}

func TestReadTuneFileErrors(t *testing.T) {
	dir := t.TempDir()
	const device = "GPU sm_80 driver 1 cudnn 2"
	if f, err := readTuneFile(filepath.Join(dir, "none.json"), device); f != nil || err != nil {
		t.Fatalf("a missing file: %v, %v; want nil, nil", f, err)
	}
	for _, tc := range []struct {
		name, body, err string
	}{
		{"corrupt", `{"format": 1, "device": `, "not a tuning cache"},
		{"other device", fmt.Sprintf(`{"format": %d, "device": "GPU sm_90 driver 1 cudnn 2"}`, tuneFormat), fmt.Sprintf("not format %d on", tuneFormat)},
		{"before split convolutions", `{"format": 1, "device": "` + device + `"}`, "written for format 1"},
		{"other format", `{"format": 99, "device": "` + device + `"}`, "written for format 99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".json")
			if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := readTuneFile(path, device); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v; want one saying %q", err, tc.err)
			}
		})
	}
	// Entries it cannot read are skipped, not fatal.
	f := tuneFile{Find: []findEntry{{Key: tuneKey{Precision: "fp8"}, Perf: []perfRow{{}}}, {Key: tuneKey{Precision: "fp16"}}}}
	if a, fu := f.entries(); len(a) != 0 || len(fu) != 0 {
		t.Fatalf("unreadable entries kept: %v %v", a, fu)
	}
}
