package cuda

import (
	"testing"

	cu "goinfer/internal/cuda"
	"goinfer/internal/engine"
	"goinfer/internal/ir"
)

// TestGraphGPUDepthwiseLowerings runs the depthwise cases with each
// lowering forced through the tuning cache (the untiled kernel, every
// tile width, cuDNN), eager and compiled, without and with the opt-in
// changes of engine.Options.GraphExperiments (depthwise prologues among
// them), against the
// float64 reference: measurement picks only one of them per shape on a
// given GPU, so the others would otherwise go unchecked.
func TestGraphGPUDepthwiseLowerings(t *testing.T) {
	needGPU(t)
	libs, err := cu.Load()
	if err != nil {
		t.Skipf("no CUDA libraries: %v", err)
	}
	device := tuneDevice(libs, 0)
	const batch = 3
	for _, c := range opCases() {
		if c.name != "depthwise_tiles" && c.name != "depthwise_hardswish" && c.name != "convnext_block" && c.name != "expand_prologue" {
			continue
		}
		g := c.g
		x, ref, per := refInputs(t, g, batch)
		var shapes []dwShape
		for _, n := range []int{1, batch} {
			b, _, err := ir.Optimize(g, n)
			if err != nil {
				t.Fatal(err)
			}
			// Keyed without and with the prologues, as each setting plans.
			shapes = append(shapes, depthwiseShapes(b, nil)...)
			shapes = append(shapes, depthwiseShapes(b, prologueCandidates(b, true))...)
		}
		for _, fuse := range []string{"", "noidentity,noprologue,nofindmath"} {
			for _, p := range []engine.Precision{engine.FP16, engine.BF16} {
				for _, force := range []dwTimed{{Tile: 0}, {Tile: 7}, {Tile: 4}, {Tile: 1}, {Tile: dwRows}, {Tile: dwSlideTile(7)}, {Tile: dwSlideTile(4)}, {Tile: dwSlideTile(2)}, {Tile: dwBlock14}, {Tile: dwBlock7}, {CuDNN: true}} {
					dir := t.TempDir()
					f := &tuneFile{Format: tuneFormat, Device: device}
					times := map[dwShape]dwTimed{}
					for _, s := range shapes {
						times[s] = force
					}
					f.setDepthwise(p.String(), times)
					if err := writeAtomic(tunePath(dir, device), f); err != nil {
						t.Fatal(err)
					}
					for _, compile := range []bool{false, true} {
						opts := engine.Options{Precision: p, Compile: compile, MaxBatch: batch, BatchSizes: []int{1, batch}, TuningCache: dir,
							GraphExperiments: fuse}
						outs := runGraphWith(t, g, opts, x, 1, batch)
						for j, n := range []int{1, batch} {
							if e := relErr64(f64s(outs[j]), ref[:n*per]); e > tolerance[p] {
								t.Errorf("%s %s %+v experiments %q compile=%v batch %d: relative error %.3g > %.3g", c.name, p, force, fuse, compile, n, e, tolerance[p])
							}
						}
					}
				}
			}
		}
	}
}
