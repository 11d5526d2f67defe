package cuda

import (
	"testing"

	"goinfer/internal/engine"
)

func TestMMAEligible(t *testing.T) {
	fp16, bf16, fp32 := mustPrecision(t, engine.FP16), mustPrecision(t, engine.BF16), mustPrecision(t, engine.FP32)
	stage4 := mmaProblem{n: 1, c: 512, h: 7, w: 7, outC: 512, outH: 7, outW: 7, k: 3, stride: 1, pad: 1, groups: 1}
	for _, c := range []struct {
		name string
		prec precision
		p    mmaProblem
		want bool
	}{
		{"resnet stage 4, fp16", fp16, stage4, true},
		{"bf16", bf16, stage4, true},
		{"fp32 has no tensor-core form here", fp32, stage4, false},
		{"space-to-depth stem: 4 taps of 16 channels per row", fp16, mmaProblem{n: 1, c: 16, h: 115, w: 115, outC: 64, outH: 112, outW: 112, k: 4, stride: 1, groups: 1}, true},
		{"channels not in 16-byte pieces", fp16, mmaProblem{n: 1, c: 12, h: 115, w: 115, outC: 64, outH: 112, outW: 112, k: 8, stride: 1, groups: 1}, false},
		{"filter row not in whole chunks", fp16, mmaProblem{n: 1, c: 8, h: 56, w: 56, outC: 64, outH: 56, outW: 56, k: 3, stride: 1, pad: 1, groups: 1}, false},
		{"grouped", fp16, func() mmaProblem { p := stage4; p.groups = 2; return p }(), false},
		{"output channels not in tiles", fp16, func() mmaProblem { p := stage4; p.outC = 1000; return p }(), false},
		{"downsample 1x1 stride 2", fp16, mmaProblem{n: 1, c: 256, h: 14, w: 14, outC: 512, outH: 7, outW: 7, k: 1, stride: 2, groups: 1}, true},
		{"large batch left to cuDNN", fp16, func() mmaProblem { p := stage4; p.n = 512; return p }(), false},
	} {
		if got := mmaEligible(c.prec, c.p); got != c.want {
			t.Errorf("%s: eligible %v, want %v", c.name, got, c.want)
		}
	}
}

func mustPrecision(t *testing.T, p engine.Precision) precision {
	t.Helper()
	pr, err := precisionOf(p)
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

// TestMMACandidates checks the launches the tuner times: every split
// covers the reduction without an empty split, fits the partials' space
// and the counters, and the unsplit launch comes first.
func TestMMACandidates(t *testing.T) {
	for _, c := range []struct {
		name     string
		p        mmaProblem
		sms      int
		wantMore bool // some split candidates
	}{
		{"stage 4 batch 1", mmaProblem{n: 1, c: 512, h: 7, w: 7, outC: 512, outH: 7, outW: 7, k: 3, stride: 1, pad: 1, groups: 1}, 132, true},
		{"stage 1 batch 1", mmaProblem{n: 1, c: 64, h: 56, w: 56, outC: 64, outH: 56, outW: 56, k: 3, stride: 1, pad: 1, groups: 1}, 132, true},
		{"1x1 of one chunk", mmaProblem{n: 1, c: 32, h: 7, w: 7, outC: 64, outH: 7, outW: 7, k: 1, groups: 1}, 132, false},
		{"many tiles", mmaProblem{n: 2, c: 64, h: 56, w: 56, outC: 64, outH: 56, outW: 56, k: 3, stride: 1, pad: 1, groups: 1}, 132, true},
	} {
		gs := mmaCandidates(c.p, c.sms)
		if len(gs) == 0 || gs[0].splits != 1 || gs[0].chunks != c.p.chunks() {
			t.Fatalf("%s: first candidate %+v, want the unsplit launch", c.name, gs)
		}
		if (len(gs) > 1) != c.wantMore {
			t.Errorf("%s: %d candidates %+v", c.name, len(gs), gs)
		}
		tilesM := (c.p.rows() + mmaTile - 1) / mmaTile
		seen := map[int]bool{}
		for _, g := range gs {
			if g.tiles != tilesM*c.p.outC/mmaTile {
				t.Errorf("%s: %d tiles, want %d", c.name, g.tiles, tilesM*c.p.outC/mmaTile)
			}
			if seen[g.splits] {
				t.Errorf("%s: split %d offered twice", c.name, g.splits)
			}
			seen[g.splits] = true
			if g.splits*g.chunks < c.p.chunks() || (g.splits-1)*g.chunks >= c.p.chunks() {
				t.Errorf("%s: %d splits of %d chunks for %d: an empty or missing split", c.name, g.splits, g.chunks, c.p.chunks())
			}
			if g.splits > 1 && (g.tiles > mmaCounters || c.p.rows()*c.p.outC*4 > mmaPartBytes) {
				t.Errorf("%s: split %d exceeds the scratch", c.name, g.splits)
			}
		}
	}
}

func TestCurrentImage(t *testing.T) {
	fat, ptx := []byte("fat"), []byte("ptx")
	for _, c := range []struct {
		name, sums, want string
	}{
		{"same source", "aa goinfer.fatbin\naa goinfer.ptx\n", "fat"},
		{"fatbin behind", "bb goinfer.fatbin\naa goinfer.ptx\n", "ptx"},
		{"no fatbin line", "aa goinfer.ptx\n", "ptx"},
		{"other kernels' lines", "aa graph.fatbin\naa goinfer.ptx\n", "ptx"},
	} {
		if got := string(currentImage(c.sums, "goinfer", fat, ptx)); got != c.want {
			t.Errorf("%s: loads %s, want %s", c.name, got, c.want)
		}
	}
}
