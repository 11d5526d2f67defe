package main

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

func TestTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n, classes = 7, 50
	logits := make([]float32, n*classes)
	for i := range logits {
		logits[i] = float32(r.IntN(20)) // ties on purpose
	}
	for _, k := range []int{1, 3, 5, classes, classes + 4} {
		kk := min(k, classes)
		got := topK(logits, n, classes, k, make([]int, n*kk))
		for i := 0; i < n; i++ {
			row := logits[i*classes : (i+1)*classes]
			want := make([]float32, classes)
			copy(want, row)
			sort.Slice(want, func(a, b int) bool { return want[a] > want[b] })
			var vals []float32
			for _, c := range got[i*kk : (i+1)*kk] {
				vals = append(vals, row[c])
			}
			if !slices.Equal(vals, want[:kk]) {
				t.Fatalf("k=%d image %d: top values %v, want %v", k, i, vals, want[:kk])
			}
		}
	}
}
