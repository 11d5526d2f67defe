package imagegpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"goinfer/internal/tensor"
	"goinfer/internal/topk"
)

// topkRows are logits that exercise the ranking: random rows, rows of a
// few distinct values (ties, broken by index), large values (the softmax
// from the maximum), a NaN, +Inf twice, all -Inf, -Inf among numbers.
func topkRows(classes int) [][]float32 {
	r := rand.New(rand.NewPCG(3, 5))
	var rows [][]float32
	row := func(f func(i int) float32) {
		v := make([]float32, classes)
		for i := range v {
			v[i] = f(i)
		}
		rows = append(rows, v)
	}
	for range 6 {
		row(func(int) float32 { return float32(r.NormFloat64() * 4) })
	}
	row(func(int) float32 { return float32(r.IntN(4)) })
	row(func(int) float32 { return 0 })
	row(func(int) float32 { return float32(r.NormFloat64()*3 + 1e4) })
	row(func(i int) float32 {
		if i == classes/3 {
			return float32(math.NaN())
		}
		return float32(i)
	})
	row(func(i int) float32 {
		if i == 1 || i == classes-1 {
			return float32(math.Inf(1))
		}
		return float32(i % 7)
	})
	row(func(int) float32 { return float32(math.Inf(-1)) })
	row(func(i int) float32 {
		if i%2 == 0 {
			return float32(math.Inf(-1))
		}
		return float32(r.NormFloat64())
	})
	return rows
}

// TestTopKOnGPU compares softmax_topk with package topk (SoftmaxRows, then
// the best classes) for several class counts and k: the same classes in
// the same order; logits exactly, probabilities to a float32 ulp or two
// (the GPU sums in another order and has its own exp).
func TestTopKOnGPU(t *testing.T) {
	libs := gpu(t)
	tk, err := NewRanker(libs, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Close()
	rt := libs.Runtime
	for _, classes := range []int{10, 1000, 21843} {
		rows := topkRows(classes)
		n := len(rows)
		flat := make([]float32, 0, n*classes)
		for _, r := range rows {
			flat = append(flat, r...)
		}
		logits, err := rt.Malloc(int64(4 * len(flat)))
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Free(logits)
		if err := rt.MemcpyHtoD(logits, tensor.F32Bytes(flat)); err != nil {
			t.Fatal(err)
		}
		probs := append([]float32(nil), flat...)
		topk.SoftmaxRows(probs, classes)
		ks := []int{1, 5, min(100, classes)}
		if classes <= 1000 {
			ks = append(ks, classes)
		}
		for _, k := range ks {
			for _, softmax := range []bool{false, true} {
				t.Run(fmt.Sprintf("%d/top%d/softmax%v", classes, k, softmax), func(t *testing.T) {
					dst, err := rt.Malloc(int64(n * k * PairSize))
					if err != nil {
						t.Fatal(err)
					}
					defer rt.Free(dst)
					if err := tk.Launch(logits, n, classes, k, softmax, dst, 0); err != nil {
						t.Fatal(err)
					}
					raw := make([]byte, n*k*PairSize)
					if err := rt.DeviceSynchronize(); err != nil {
						t.Fatal(err)
					}
					if err := rt.MemcpyDtoH(raw, dst); err != nil {
						t.Fatal(err)
					}
					got := make([]topk.Class, n*k)
					Pairs(got, raw)
					src := flat
					if softmax {
						src = probs
					}
					close := func(a, b float32) bool {
						return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b ||
							softmax && math.Abs(float64(a-b)) <= 2.5e-7*math.Abs(float64(b))
					}
					for i := range n {
						row := src[i*classes : (i+1)*classes]
						want := topk.Best(nil, row, k)
						seen := map[int]bool{}
						for j, w := range want {
							g := got[i*k+j]
							ok := g.Index == w.Index && close(g.Value, w.Value)
							if softmax && !ok && g.Index >= 0 && g.Index < classes && !seen[g.Index] {
								ok = close(g.Value, w.Value) && close(row[g.Index], w.Value)
							}
							if !ok {
								t.Fatalf("row %d, rank %d: got class %d = %v, want %d = %v", i, j, g.Index, g.Value, w.Index, w.Value)
							}
							seen[g.Index] = true
						}
					}
				})
			}
		}
	}
}

// BenchmarkRanker ranks a batch of 256 rows of 1000 logits (top 5, by the
// softmax) and copies the pairs back, against copying the logits back.
func BenchmarkRanker(b *testing.B) {
	libs := gpu(b)
	tk, err := NewRanker(libs, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer tk.Close()
	rt := libs.Runtime
	const rows, classes, k = 256, 1000, 5
	logits, _ := rt.Malloc(rows * classes * 4)
	defer rt.Free(logits)
	dst, _ := rt.Malloc(rows * k * PairSize)
	defer rt.Free(dst)
	s, _ := rt.StreamCreate()
	defer rt.StreamDestroy(s)
	hostPairs, _ := rt.HostAlloc(rows * k * PairSize)
	defer rt.FreeHost(hostPairs)
	hostLogits, _ := rt.HostAlloc(rows * classes * 4)
	defer rt.FreeHost(hostLogits)
	b.Run("gpu-topk", func(b *testing.B) {
		for range b.N {
			if err := tk.Launch(logits, rows, classes, k, true, dst, s); err != nil {
				b.Fatal(err)
			}
			if err := rt.MemcpyDtoHAsync(hostPairs, dst, s); err != nil {
				b.Fatal(err)
			}
			if err := rt.StreamSynchronize(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("logits-back", func(b *testing.B) {
		for range b.N {
			if err := rt.MemcpyDtoHAsync(hostLogits, logits, s); err != nil {
				b.Fatal(err)
			}
			if err := rt.StreamSynchronize(s); err != nil {
				b.Fatal(err)
			}
			top := make([]topk.Class, rows*k)
			topk.BestRows(top, tensor.BytesF32(hostLogits), classes, k, true)
		}
	})
}
