package irexec

import "testing"

func TestSplitChunk(t *testing.T) {
	for _, c := range []struct{ n, threads, want int }{
		{32, 2, 4}, // 8 chunks, 4 a thread
		{8, 2, 2},  // chunks of 4 would give each thread one
		{6, 2, 1},
		{4, 2, 1},
		{3, 2, 0}, // no chunk gives both threads as many
		{2, 2, 0}, // one chunk a thread: the whole-batch plan does as well
		{32, 1, 0},
		{48, 3, 4},
		{9, 3, 1},
		{32, 16, 1},
		{16, 16, 0},
	} {
		if got := SplitChunk(c.n, c.threads); got != c.want {
			t.Errorf("SplitChunk(%d, %d) = %d, want %d", c.n, c.threads, got, c.want)
		}
		if c.want > 0 && !SplitPossible(c.n, c.threads) {
			t.Errorf("SplitPossible(%d, %d) = false where SplitChunk splits", c.n, c.threads)
		}
	}
}
