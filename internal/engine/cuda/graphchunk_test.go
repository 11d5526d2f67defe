package cuda

import "testing"

func TestChunkCount(t *testing.T) {
	// fits models a workspace proportional to the images of one call.
	perImage := func(bytes int64, limit int64) func(int) bool {
		return func(per int) bool { return int64(per)*bytes <= limit }
	}
	for _, tc := range []struct {
		name        string
		n           int
		need, limit int64
		fits        func(int) bool
		want        int
	}{
		{"fits whole", 256, 100, 100, perImage(1, 1), 1},
		{"half", 256, 462, 256, perImage(2, 256), 2},
		{"odd batch, uneven calls", 255, 600, 256, perImage(2, 256), 3},
		{"batch 1 cannot split", 1, 300, 256, perImage(300, 256), 0},
		{"nothing fits", 8, 1000, 10, func(int) bool { return false }, 0},
		{"one image per call", 4, 1000, 260, perImage(250, 260), 4},
		// The estimate undershoots when the need is not proportional: the
		// search goes on to more calls.
		{"estimate too low", 100, 200, 100, func(per int) bool { return per <= 20 }, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := chunkCount(tc.n, tc.need, tc.limit, tc.fits); got != tc.want {
				t.Errorf("chunkCount(%d, %d, %d) = %d calls, want %d", tc.n, tc.need, tc.limit, got, tc.want)
			}
		})
	}
}

func TestChunkCountSkipsRepeatedShares(t *testing.T) {
	// 10 images in 6 to 9 calls all give shares of 2 (5 calls already
	// did): the probe must never be asked twice for the same share.
	seen := map[int]bool{}
	got := chunkCount(10, 2, 1, func(per int) bool {
		if seen[per] {
			t.Errorf("share %d probed twice", per)
		}
		seen[per] = true
		return per <= 1
	})
	if got != 10 {
		t.Errorf("chunkCount = %d calls, want 10", got)
	}
}
