package topk

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

var (
	nan  = float32(math.NaN())
	pinf = float32(math.Inf(1))
	ninf = float32(math.Inf(-1))
)

func TestIndices(t *testing.T) {
	tests := []struct {
		name string
		row  []float32
		k    int
		want []int
	}{
		{"top 2", []float32{1, 5, 10, 4}, 2, []int{2, 1}},
		{"all", []float32{1, 5, 10, 4}, 4, []int{2, 1, 3, 0}},
		{"k over classes", []float32{1, 5, 10, 4}, 9, []int{2, 1, 3, 0}},
		{"k zero", []float32{1, 2}, 0, []int{}},
		{"k negative", []float32{1, 2}, -3, []int{}},
		{"empty row", nil, 3, []int{}},
		{"ties keep index order", []float32{3, 7, 3, 7, 3}, 4, []int{1, 3, 0, 2}},
		{"tie at the cut", []float32{2, 1, 1, 1}, 2, []int{0, 1}},
		{"NaN ranks last", []float32{nan, -1, nan, ninf}, 4, []int{1, 3, 0, 2}},
		{"NaN not chosen over numbers", []float32{nan, -5, 2}, 2, []int{2, 1}},
		{"all NaN", []float32{nan, nan, nan}, 2, []int{0, 1}},
		{"infinities", []float32{0, pinf, ninf, pinf}, 3, []int{1, 3, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Indices(nil, tt.row, tt.k)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Indices(%v, %d) = %v, want %v", tt.row, tt.k, got, tt.want)
			}
		})
	}
}

// TestIndicesMatchesSort checks both strategies (insertion for small k,
// sorting for large) against a stable sort on random rows with many ties.
func TestIndicesMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 1 + r.IntN(300)
		row := make([]float32, n)
		for i := range row {
			row[i] = float32(r.IntN(20)) // plenty of ties
			if r.IntN(50) == 0 {
				row[i] = nan
			}
		}
		k := r.IntN(n + 3)
		ref := make([]int, n)
		for i := range ref {
			ref[i] = i
		}
		sort.SliceStable(ref, func(a, b int) bool { return better(row[ref[a]], row[ref[b]]) })
		want := ref[:min(k, n)]
		if got := Indices(nil, row, k); !slices.Equal(got, want) {
			t.Fatalf("trial %d: n=%d k=%d: got %v, want %v", trial, n, k, got, want)
		}
	}
}

func TestSoftmax(t *testing.T) {
	tests := []struct {
		name string
		in   []float32
		want []float64 // NaN where NaN is wanted
	}{
		{"uniform", []float32{0, 0, 0, 0}, []float64{0.25, 0.25, 0.25, 0.25}},
		{"two", []float32{0, float32(math.Log(3))}, []float64{0.25, 0.75}},
		{"large logits do not overflow", []float32{1000, 1000}, []float64{0.5, 0.5}},
		{"tiny ones underflow to 0", []float32{0, -200}, []float64{1, 0}},
		{"-Inf is impossible", []float32{ninf, 0}, []float64{0, 1}},
		{"+Inf takes all", []float32{pinf, 3, pinf}, []float64{0.5, 0, 0.5}},
		{"NaN poisons the row", []float32{1, nan, 2}, []float64{math.NaN(), math.NaN(), math.NaN()}},
		{"all -Inf", []float32{ninf, ninf}, []float64{math.NaN(), math.NaN()}},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make([]float32, len(tt.in))
			Softmax(got, tt.in)
			for i, w := range tt.want {
				g := float64(got[i])
				if math.IsNaN(w) != math.IsNaN(g) || math.Abs(g-w) > 1e-6 {
					t.Fatalf("Softmax(%v) = %v, want %v", tt.in, got, tt.want)
				}
			}
		})
	}
}

func TestSoftmaxRowsSumsToOne(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const classes = 1000
	x := make([]float32, 3*classes)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 8)
	}
	orig := slices.Clone(x)
	SoftmaxRows(x, classes)
	for i := range 3 {
		var sum float64
		for _, p := range x[i*classes : (i+1)*classes] {
			if p < 0 || p > 1 {
				t.Fatalf("probability %v out of [0, 1]", p)
			}
			sum += float64(p)
		}
		if math.Abs(sum-1) > 1e-5 {
			t.Errorf("row %d sums to %v", i, sum)
		}
		// Softmax keeps the order of distinct logits.
		a := Indices(nil, orig[i*classes:(i+1)*classes], 5)
		b := Indices(nil, x[i*classes:(i+1)*classes], 5)
		if !slices.Equal(a, b) {
			t.Errorf("row %d: top-5 of logits %v, of probabilities %v", i, a, b)
		}
	}
}

func TestClassify(t *testing.T) {
	x := []float32{
		0.1, 0.7, 0.2, // image 0
		nan, 0.5, 0.5, // image 1
	}
	labels := []string{"cat", "", "dog"}
	tests := []struct {
		k    int
		want string
	}{
		{2, "0.700000:1 0.200000:2:dog | 0.500000:1 0.500000:2:dog"},
		{5, "0.700000:1 0.200000:2:dog 0.100000:0:cat | 0.500000:1 0.500000:2:dog NaN:0:cat"},
		{0, " | "},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint("k=", tt.k), func(t *testing.T) {
			var rows [2][]string
			n := 0
			Classify(x, 3, tt.k, labels, func(e []byte) {
				img := n / max(min(tt.k, 3), 1)
				rows[img] = append(rows[img], string(e))
				n++
			})
			got := strings.Join(rows[0], " ") + " | " + strings.Join(rows[1], " ")
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func BenchmarkIndicesTop5Of1000(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	row := make([]float32, 1000)
	for i := range row {
		row[i] = float32(r.NormFloat64())
	}
	idx := make([]int, 0, 5)
	for b.Loop() {
		idx = Indices(idx, row, 5)
	}
}

// TestBestRowsMatchesClassify checks that ranking rows ahead (BestRows,
// then ClassifyRanked) emits what Classify emits on the same values, the
// softmax applied by SoftmaxRows first where asked.
func TestBestRowsMatchesClassify(t *testing.T) {
	const classes, k = 7, 3
	x := []float32{1, 3, 3, 2, float32(math.NaN()), -1, 0, 5, 4, 3, 2, 1, 0, -1}
	for _, softmax := range []bool{false, true} {
		vals := append([]float32(nil), x...)
		if softmax {
			SoftmaxRows(vals, classes)
		}
		var want, got []string
		Classify(vals, classes, k, nil, func(e []byte) { want = append(want, string(e)) })
		top := make([]Class, 2*k)
		BestRows(top, x, classes, k, softmax)
		ClassifyRanked(top, nil, func(e []byte) { got = append(got, string(e)) })
		if !slices.Equal(got, want) {
			t.Errorf("softmax %v: got %v, want %v", softmax, got, want)
		}
	}
}
