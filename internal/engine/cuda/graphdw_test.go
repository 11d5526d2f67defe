package cuda

import (
	"reflect"
	"slices"
	"testing"

	"goinfer/internal/ir"
)

// TestGraphPlanDepthwiseLowerings plans models with depthwise
// convolutions both ways (graph.cu's kernel for every shape, cuDNN's
// grouped convolution for every shape, and a mix) and simulates each plan
// against the float64 reference.
func TestGraphPlanDepthwiseLowerings(t *testing.T) {
	cases := []modelCase{tinyModels[1], {arch: "mobilenet_v3_large", size: 16}}
	for _, c := range cases {
		t.Run(c.arch, func(t *testing.T) {
			g := modelGraph(t, c)
			const batch = 2
			b, _, err := ir.Optimize(g, batch)
			if err != nil {
				t.Fatal(err)
			}
			shapes := depthwiseShapes(b, nil)
			if len(shapes) == 0 {
				t.Fatal("no depthwise convolutions found")
			}
			all, some := map[dwShape]dwTimed{}, map[dwShape]dwTimed{}
			for k, s := range shapes {
				all[s] = dwTimed{CuDNN: true}
				// The others: our untiled kernel, measured faster.
				some[s] = dwTimed{CuDNN: k%2 == 0}
			}
			layers := 0
			for _, n := range b.Nodes {
				if op, ok := n.Op.(*ir.Conv); ok && op.Group > 1 && op.Group == n.Inputs[0].Type.Shape[1] {
					layers++
				}
			}
			for _, tc := range []struct {
				name  string
				lib   map[dwShape]dwTimed
				ownDW int
			}{
				{"goinfer", nil, layers},
				{"cudnn", all, 0},
				{"mixed", some, -1},
			} {
				t.Run(tc.name, func(t *testing.T) {
					p := checkPlannedDW(t, g, b, batch, tc.lib, 1e-5)
					var own, lib int
					for _, s := range p.steps {
						switch {
						case s.kind == stDW:
							own++
							if tc.lib[s.conv.dwShape()].CuDNN {
								t.Errorf("%s: own kernel for a shape chosen for cuDNN", s.node)
							}
						case s.kind == stConv && s.conv.isDepthwise():
							lib++
							if !tc.lib[s.conv.dwShape()].CuDNN {
								t.Errorf("%s: cuDNN for a shape not chosen for it", s.node)
							}
						}
					}
					if own+lib != layers || (tc.ownDW >= 0 && own != tc.ownDW) {
						t.Errorf("%d own and %d cuDNN depthwise steps for %d layers; want %d own", own, lib, layers, tc.ownDW)
					}
				})
			}
		})
	}
}

// checkPlannedDW plans the optimized graph b (of g) channels-last with
// the cuDNN depthwise choices lib, simulates it and compares with g's
// float64 reference.
func checkPlannedDW(t *testing.T, g, b *ir.Graph, batch int, lib map[dwShape]dwTimed, tol float64) *gplan {
	t.Helper()
	p, err := planGraphDW(b, batch, 4, true, lib)
	if err != nil {
		t.Fatal(err)
	}
	in := randInput(b.Inputs[0].Type.Shape, uint64(batch))
	want := evalRef(t, g, batch, in)
	got := simulate(t, p, in.Data)
	for k := range want {
		if e := relErr64(got[k], want[k].Data); e > tol {
			t.Errorf("output %d: relative error %.3g > %.3g", k, e, tol)
		}
	}
	return p
}

// TestDWTileWidth checks which depthwise convolutions the tiled kernel
// takes: those graph.cu instantiates, in 16-bit storage.
func TestDWTileWidth(t *testing.T) {
	base := convGeom{n: 2, c: 96, h: 56, w: 56, k: 96, oh: 56, ow: 56, kh: 7, kw: 7, strH: 1, strW: 1, dilH: 1, dilW: 1, groups: 96}
	for _, tc := range []struct {
		name string
		edit func(g *convGeom)
		elem int
		want int
	}{
		{"convnext 7x7", func(*convGeom) {}, 2, 7},
		{"3x3 stride 2", func(g *convGeom) { g.kh, g.kw, g.strH, g.strW = 3, 3, 2, 2 }, 2, 7},
		{"5x5", func(g *convGeom) { g.kh, g.kw = 5, 5 }, 2, 7},
		{"float32", func(*convGeom) {}, 4, 0},
		{"channels not in vectors", func(g *convGeom) { g.c, g.k, g.groups = 36, 36, 36 }, 2, 0},
		{"9x9", func(g *convGeom) { g.kh, g.kw = 9, 9 }, 2, 0},
		{"rectangular", func(g *convGeom) { g.kw = 5 }, 2, 0},
		{"stride 3", func(g *convGeom) { g.strH, g.strW = 3, 3 }, 2, 0},
		{"unequal strides", func(g *convGeom) { g.strW = 2 }, 2, 0},
		{"dilated", func(g *convGeom) { g.dilH, g.dilW = 2, 2 }, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := base
			tc.edit(&g)
			if got := dwTileWidth(&g, tc.elem); got != tc.want {
				t.Errorf("dwTileWidth = %d, want %d", got, tc.want)
			}
		})
	}
	slides := []int{dwSlideTile(7), dwSlideTile(4), dwSlideTile(2)}
	blocks := []int{dwBlock14, dwBlock7}
	if got, want := dwTiles(&base, 2), slices.Concat([]int{7, 1, dwRows}, slides, blocks); !reflect.DeepEqual(got, want) {
		t.Errorf("7x7 tiles %v, want %v", got, want)
	}
	g3 := base
	g3.kh, g3.kw = 3, 3
	if got, want := dwTiles(&g3, 2), slices.Concat([]int{7, 4, 1, dwRows}, slides, blocks); !reflect.DeepEqual(got, want) {
		t.Errorf("3x3 tiles %v, want %v", got, want)
	}
	pre := g3
	pre.pre = preAct{op: ewHardSwish}
	if got, want := dwTiles(&pre, 2), slices.Concat([]int{7, 4, 1, dwRows}, blocks); !reflect.DeepEqual(got, want) {
		t.Errorf("3x3 tiles with a prologue %v, want %v (no sliding window)", got, want)
	}
	s2 := g3
	s2.strH, s2.strW = 2, 2
	if got, want := dwTiles(&s2, 2), slices.Concat([]int{7, 4, 1, dwRows}, slides, []int{dwBlock7}); !reflect.DeepEqual(got, want) {
		t.Errorf("3x3 stride 2 tiles %v, want %v (the shared-memory kernel's 7x7 tiles only)", got, want)
	}
	s27 := base
	s27.strH, s27.strW = 2, 2
	if got, want := dwTiles(&s27, 2), slices.Concat([]int{7, 1, dwRows}, slides); !reflect.DeepEqual(got, want) {
		t.Errorf("7x7 stride 2 tiles %v, want %v (no shared-memory kernel)", got, want)
	}
	if got := dwTileName(&s2, dwBlock7); got != "g_dwb_k3s2t7_" {
		t.Errorf("3x3 stride 2 shared-memory kernel %q, want g_dwb_k3s2t7_", got)
	}
	// The tiled kernel's threads: rows of ceil(OW/7) tiles of 8-channel vectors.
	g := base
	g.ow = 30
	s := dwStep(&g, 0, 1, make([]float32, 96*49), nil, int64(2*96*56*30), 2, ewCopy, 0, 0)
	if s.tile != 7 || dwWork(s, 2) != int64(2*56*5*12) {
		t.Errorf("tile %d, %d threads; want 7 and %d", s.tile, dwWork(s, 2), 2*56*5*12)
	}
	// The row split's: 8 lanes (7 filter rows) per output vector, whole warps.
	s.tile = dwRows
	if got, want := dwWork(s, 2), int64(2*56*30*12*8); got != want {
		t.Errorf("row split: %d threads, want %d", got, want)
	}
	// The sliding window's: a thread per channel and w outputs of a row.
	for _, tc := range []struct {
		w       int
		threads int64
		name    string
	}{{7, 2 * 56 * 5 * 96, "g_dws_k7s1t7_"}, {4, 2 * 56 * 8 * 96, "g_dws_k7s1t4_"}, {2, 2 * 56 * 15 * 96, "g_dws_k7s1t2_"}} {
		s.tile = dwSlideTile(tc.w)
		if got := dwWork(s, 2); got != tc.threads {
			t.Errorf("sliding window of %d: %d threads, want %d", tc.w, got, tc.threads)
		}
		if got := dwTileName(&g, s.tile); got != tc.name {
			t.Errorf("sliding-window kernel %q, want %s", got, tc.name)
		}
		if w, ok := dwSlideWidth(s.tile); !ok || w != tc.w {
			t.Errorf("dwSlideWidth(%d) = %d, %v; want %d, true", s.tile, w, ok, tc.w)
		}
	}
	// The shared-memory kernel's: a block per tile of outputs and block of
	// channels (56x30: 4x3 tiles of 14, 8x5 of 7; 96 channels: 3 blocks
	// of 32, 2 of 64), 224 threads each.
	for _, tc := range []struct {
		tile  int
		items int64
		name  string
	}{{dwBlock14, 2 * 4 * 3 * 3, "g_dwb_k7s1t14_"}, {dwBlock7, 2 * 8 * 5 * 2, "g_dwb_k7s1t7_"}} {
		s.tile = tc.tile
		n := dwWork(s, 2)
		if n != tc.items {
			t.Errorf("shared-memory kernel %d: %d items, want %d", tc.tile, n, tc.items)
		}
		if grid, block := dwLaunch(s, n); grid != int(tc.items) || block != dwBlockThreads {
			t.Errorf("shared-memory kernel %d: launch %d x %d, want %d x %d", tc.tile, grid, block, tc.items, dwBlockThreads)
		}
		if got := dwTileName(&g, s.tile); got != tc.name {
			t.Errorf("shared-memory kernel %q, want %s", got, tc.name)
		}
	}
	if grid, _ := dwLaunch(s, 1<<20); grid != 65535 {
		t.Errorf("shared-memory kernel: grid %d for 2^20 items, want 65535 (the kernel strides)", grid)
	}
	for _, tile := range []int{0, 1, 4, 7, dwRows, dwBlock14, dwBlock7} {
		if _, ok := dwSlideWidth(tile); ok {
			t.Errorf("dwSlideWidth(%d) names a sliding window", tile)
		}
	}
	g.ow = 7
	g.n = 1
	g.oh = 7
	g.c = 24
	s = dwStep(&g, 0, 1, make([]float32, 24*49), nil, int64(24*49), 2, ewCopy, 0, 0)
	s.tile = dwRows
	if got, want := dwWork(s, 2), int64((49*3*8+31)/32*32); got != want {
		t.Errorf("row split, 7x7x24: %d threads, want %d (rounded up to a warp)", got, want)
	}
	if got := dwTileName(&g, dwRows); got != "g_dwr_k7s1_" {
		t.Errorf("row split kernel %q, want g_dwr_k7s1_", got)
	}
}

// TestTuneFileDepthwise checks that depthwise measurements round-trip
// through the tuning cache, per precision, next to the ResNet path's
// entries.
func TestTuneFileDepthwise(t *testing.T) {
	const device = "NVIDIA H200 sm_90 driver 13000 cudnn 91900"
	path := tunePath(t.TempDir(), device)
	s1 := dwShape{N: 256, C: 96, H: 56, W: 56, OH: 56, OW: 56, KH: 7, KW: 7, SH: 1, SW: 1, PH: 3, PW: 3, DH: 1, DW: 1}
	s2 := dwShape{N: 1, C: 72, H: 56, W: 56, OH: 28, OW: 28, KH: 5, KW: 5, SH: 2, SW: 2, PH: 2, PW: 2, DH: 1, DW: 1}
	fp16 := map[dwShape]dwTimed{s1: {Own: 0.1, Tile: 7, Lib: 0.5, Algo: 1}, s2: {CuDNN: true, Own: 0.01, Tile: 4, Lib: 0.008, Algo: 6}}
	bf16 := map[dwShape]dwTimed{s1: {Own: 0.1, Lib: 0, Algo: -1}}
	f := newTuneFile(device, nil, nil)
	f.Find = []findEntry{{Key: tuneKey{N: 1, Precision: "fp16"}, Perf: []perfRow{{Algo: 1}}}}
	f.setDepthwise("fp16", map[dwShape]dwTimed{s2: {}})
	f.setDepthwise("bf16", bf16)
	f.setDepthwise("fp16", fp16) // replaces the first fp16 set
	if err := writeAtomic(path, f); err != nil {
		t.Fatal(err)
	}
	got, err := readTuneFile(path, device)
	if err != nil || got == nil {
		t.Fatalf("readTuneFile: %v, %v", got, err)
	}
	if !reflect.DeepEqual(got.depthwise("fp16"), fp16) || !reflect.DeepEqual(got.depthwise("bf16"), bf16) {
		t.Errorf("depthwise entries changed: %v / %v", got.depthwise("fp16"), got.depthwise("bf16"))
	}
	if len(got.Find) != 1 || len(got.Depthwise) != 3 {
		t.Errorf("%d find and %d depthwise entries; want 1 and 3", len(got.Find), len(got.Depthwise))
	}
}

// TestDWLowering checks how measured choices become the plan's lowering:
// cuDNN, a measured tile, the untiled kernel, and the default for shapes
// not measured or cache entries naming a tile this build lacks.
func TestDWLowering(t *testing.T) {
	g := &convGeom{n: 8, c: 64, h: 28, w: 28, k: 64, oh: 28, ow: 28, kh: 3, kw: 3, strH: 1, strW: 1, padH: 1, padW: 1, dilH: 1, dilW: 1, groups: 64}
	for _, tc := range []struct {
		name     string
		chosen   map[dwShape]dwTimed
		elem     int
		wantLib  bool
		wantTile int
	}{
		{"not measured", nil, 2, false, 7},
		{"not measured, float32", nil, 4, false, 0},
		{"cuDNN", map[dwShape]dwTimed{g.dwShape(): {CuDNN: true}}, 2, true, 0},
		{"tile 4", map[dwShape]dwTimed{g.dwShape(): {Tile: 4}}, 2, false, 4},
		{"untiled", map[dwShape]dwTimed{g.dwShape(): {Tile: 0}}, 2, false, 0},
		{"unknown tile", map[dwShape]dwTimed{g.dwShape(): {Tile: 5}}, 2, false, 7},
		{"other shape", map[dwShape]dwTimed{{N: 1}: {CuDNN: true}}, 2, false, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib, tile := dwLowering(g, tc.elem, tc.chosen)
			if lib != tc.wantLib || tile != tc.wantTile {
				t.Errorf("dwLowering = %v, %d; want %v, %d", lib, tile, tc.wantLib, tc.wantTile)
			}
		})
	}
}

// TestGraphPlanChanScale checks that squeeze-and-excitation's channel
// scale takes the vectorized kernel in channels-last plans, computing the
// same, and the strided kernel in row-major ones.
func TestGraphPlanChanScale(t *testing.T) {
	g, err := cachedModel("mobilenet_v3_large", 16)
	if err != nil {
		t.Fatal(err)
	}
	count := func(p *gplan) int {
		n := 0
		for _, s := range p.steps {
			if s.chanScale {
				n++
			}
		}
		return n
	}
	// mobilenet_v3_large has 8 squeeze-and-excitation blocks.
	for _, tc := range []struct {
		cl   bool
		want int
	}{{true, 8}, {false, 0}} {
		if n := count(checkPlanned(t, g, 2, tc.cl, 1e-5)); n != tc.want {
			t.Errorf("channels-last %v: %d channel-scale steps, want %d", tc.cl, n, tc.want)
		}
	}
}

// TestPickOwn checks the choice among our depthwise kernels' times: the
// default tile unless another is faster by more than dwMargin.
func TestPickOwn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		times    map[int]float32
		def      int
		wantTile int
		wantMS   float32
	}{
		// Batch-1 times (ms): a margin.
		{"default fastest", map[int]float32{0: 0.010, 7: 0.008, 4: 0.009}, 7, 7, 0.008},
		{"near tie keeps the default", map[int]float32{0: 0.0075, 7: 0.008, 4: 0.0079}, 7, 7, 0.008},
		{"clear win", map[int]float32{0: 0.005, 7: 0.008, 4: 0.0079}, 7, 0, 0.005},
		{"untiled default", map[int]float32{0: 0.006}, 0, 0, 0.006},
		{"default not timed", map[int]float32{0: 0.006, 4: 0.005}, 7, 4, 0.005},
		// Long kernels (batch 256): the fastest.
		{"long kernels, the fastest", map[int]float32{0: 0.75, 7: 0.8, 4: 0.79}, 7, 0, 0.75},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tile, ms := pickOwn(tc.times, tc.def)
			if tile != tc.wantTile || ms != tc.wantMS {
				t.Errorf("pickOwn = %d, %g; want %d, %g", tile, ms, tc.wantTile, tc.wantMS)
			}
		})
	}
	for _, tc := range []struct {
		ms, def float32
		want    bool
	}{{0.0089, 0.01, true}, {0.0095, 0.01, false}, {0.01, 0.01, false}, {0.012, 0.01, false}, {0.95, 1, true}, {1, 1, false}} {
		if got := beats(tc.ms, tc.def); got != tc.want {
			t.Errorf("beats(%g, %g) = %v, want %v", tc.ms, tc.def, got, tc.want)
		}
	}
}
