package cuda

import "testing"

// TestLNGroupLanes pins layernorm_group's lanes per row (graph.cu computes
// the same): ConvNeXt's rows of 96, 192 and 384 halves (12, 24 and 48
// vectors) take 4, 8 and 16 lanes; ViT's 768 (96 vectors) a whole warp,
// which the engine leaves to the other kernels.
func TestLNGroupLanes(t *testing.T) {
	for _, tc := range []struct{ nv, want int }{
		{1, 1}, {3, 1}, {4, 1}, {5, 2}, {12, 4}, {24, 8}, {48, 16}, {64, 16}, {65, 32}, {96, 32}, {500, 32},
	} {
		if got := lnGroupLanes(tc.nv); got != tc.want {
			t.Errorf("lnGroupLanes(%d) = %d, want %d", tc.nv, got, tc.want)
		}
	}
}
