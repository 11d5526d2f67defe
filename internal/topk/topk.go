// Package topk turns a classifier's logits into its answer: softmax
// probabilities, the k best classes of each image, and the KServe
// classification extension's "value:index[:label]" strings.
//
// Order. Classes are ranked by value, highest first; equal values keep
// class-index order (the lower index first), and NaN ranks below every
// number, -Inf included, so that a broken logit never hides a real class.
package topk

import (
	"math"
	"slices"
	"strconv"
)

// better reports whether class a with value va ranks before class b with
// value vb (a < b as indices when the values tie).
func better(va, vb float32) bool {
	if vb != vb { // NaN: everything but NaN is better
		return va == va
	}
	return va > vb
}

// Indices writes the indices of the min(k, len(row)) best classes of row
// into idx[:0], best first, and returns it. k <= 0 gives none.
func Indices(idx []int, row []float32, k int) []int {
	idx = idx[:0]
	k = min(k, len(row))
	if k <= 0 {
		return idx
	}
	if k > 32 && k > len(row)/8 {
		// Many classes asked for: a stable sort beats insertion.
		for c := range row {
			idx = append(idx, c)
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case better(row[a], row[b]):
				return -1
			case better(row[b], row[a]):
				return 1
			}
			return 0
		})
		return idx[:k]
	}
	// Insertion into a sorted list of the best so far: no allocation, and
	// a class that only ties the last kept one stays out (the earlier
	// index wins).
	for c, v := range row {
		m := len(idx)
		if m == k && !better(v, row[idx[m-1]]) {
			continue
		}
		if m < k {
			idx = append(idx, c)
		}
		j := len(idx) - 1
		for j > 0 && better(v, row[idx[j-1]]) {
			idx[j] = idx[j-1]
			j--
		}
		idx[j] = c
	}
	return idx
}

// Softmax writes the softmax of logits into dst (len(dst) >= len(logits);
// dst may be logits), computed in float64 from the largest logit so that
// large values do not overflow. A row with a NaN gives NaN everywhere, as
// the mathematics does; +Inf logits share all of the probability; a row
// of -Inf only has no distribution and gives NaN.
func Softmax(dst, logits []float32) {
	if len(logits) == 0 {
		return
	}
	maxv := math.Inf(-1)
	nan := false
	for _, v := range logits {
		x := float64(v)
		if math.IsNaN(x) {
			nan = true
			break
		}
		maxv = max(maxv, x)
	}
	if nan || math.IsInf(maxv, -1) {
		for i := range logits {
			dst[i] = float32(math.NaN())
		}
		return
	}
	if math.IsInf(maxv, 1) {
		n := 0
		for _, v := range logits {
			if math.IsInf(float64(v), 1) {
				n++
			}
		}
		for i, v := range logits {
			if math.IsInf(float64(v), 1) {
				dst[i] = float32(1 / float64(n))
			} else {
				dst[i] = 0
			}
		}
		return
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - maxv)
	}
	for i, v := range logits {
		dst[i] = float32(math.Exp(float64(v)-maxv) / sum)
	}
}

// SoftmaxRows applies Softmax to each row of classes values of x, in
// place.
func SoftmaxRows(x []float32, classes int) {
	if classes <= 0 {
		return
	}
	for i := 0; i+classes <= len(x); i += classes {
		row := x[i : i+classes]
		Softmax(row, row)
	}
}

// Class is one ranked class of an image: its index and its value (a
// probability or a logit).
type Class struct {
	Index int
	Value float32
}

// Best writes the min(k, len(row)) best classes of row into dst[:0],
// best first, and returns it.
func Best(dst []Class, row []float32, k int) []Class {
	idx := Indices(make([]int, 0, min(max(k, 0), len(row))), row, k)
	dst = dst[:0]
	for _, c := range idx {
		dst = append(dst, Class{Index: c, Value: row[c]})
	}
	return dst
}

// BestRows writes the k best classes of each row of x (rows of classes
// values) into dst, k per row (len(dst) >= rows*k, k <= classes), ranked
// by the softmax of the row with softmax set (then valued by it too),
// else by the values themselves: what Classify emits, as Class values.
// x is not modified.
func BestRows(dst []Class, x []float32, classes, k int, softmax bool) {
	if classes <= 0 || k <= 0 {
		return
	}
	var probs []float32
	if softmax {
		probs = make([]float32, classes)
	}
	idx := make([]int, 0, min(k, classes))
	for r := 0; (r+1)*classes <= len(x); r++ {
		row := x[r*classes : (r+1)*classes]
		if softmax {
			Softmax(probs, row)
			row = probs
		}
		idx = Indices(idx, row, k)
		for j, c := range idx {
			dst[r*k+j] = Class{Index: c, Value: row[c]}
		}
	}
}

// ClassifyRanked emits the AppendEntry strings of classes already ranked
// (rows of k, best first, as BestRows writes them). Each string passed to
// emit is only valid during the call.
func ClassifyRanked(top []Class, labels []string, emit func(entry []byte)) {
	var buf []byte
	for _, c := range top {
		buf = AppendEntry(buf[:0], c.Value, c.Index, labels)
		emit(buf)
	}
}

// AppendEntry appends one classification result as the KServe
// classification extension writes it: "value:index", then ":label" when
// the class has a non-empty label. The value has six decimals.
func AppendEntry(dst []byte, value float32, index int, labels []string) []byte {
	dst = strconv.AppendFloat(dst, float64(value), 'f', 6, 32)
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, int64(index), 10)
	if index < len(labels) && labels[index] != "" {
		dst = append(dst, ':')
		dst = append(dst, labels[index]...)
	}
	return dst
}

// Classify emits, for each of the len(x)/classes rows of x, the k best
// classes as AppendEntry strings, best first. Each string passed to emit
// is only valid during the call.
func Classify(x []float32, classes, k int, labels []string, emit func(entry []byte)) {
	if classes <= 0 {
		return
	}
	idx := make([]int, 0, min(k, classes))
	var buf []byte
	for i := 0; i+classes <= len(x); i += classes {
		row := x[i : i+classes]
		idx = Indices(idx, row, k)
		for _, c := range idx {
			buf = AppendEntry(buf[:0], row[c], c, labels)
			emit(buf)
		}
	}
}
