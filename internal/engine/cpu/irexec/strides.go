package irexec

import "goinfer/internal/tensor"

// stridesOf returns the row-major element strides of shape.
func stridesOf(shape tensor.Shape) []int {
	s := make([]int, len(shape))
	n := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = n
		n *= shape[i]
	}
	return s
}

// broadcastStrides returns, per dimension of out, the element stride of an
// input of shape in under NumPy broadcasting: 0 where in is broadcast.
func broadcastStrides(in, out tensor.Shape) []int {
	str := make([]int, len(out))
	inStr := stridesOf(in)
	off := len(out) - len(in)
	for i := range in {
		if in[i] != 1 || out[off+i] == 1 {
			str[off+i] = inStr[i]
		}
	}
	return str
}

// collapse drops size-1 dimensions of shape and merges neighbours that
// every operand walks as one (stride[i-1] == stride[i]*shape[i]), so that
// loops run over the longest possible rows. Operands' strides are per
// dimension of shape; the result has at least one dimension.
func collapse(shape []int, strs ...[]int) ([]int, [][]int) {
	var sh []int
	ss := make([][]int, len(strs))
	for d, n := range shape {
		if n == 1 {
			continue
		}
		if k := len(sh) - 1; k >= 0 {
			merge := true
			for o, s := range strs {
				if ss[o][k] != s[d]*n {
					merge = false
					break
				}
			}
			if merge {
				sh[k] *= n
				for o, s := range strs {
					ss[o][k] = s[d]
				}
				continue
			}
		}
		sh = append(sh, n)
		for o, s := range strs {
			ss[o] = append(ss[o], s[d])
		}
	}
	if len(sh) == 0 {
		sh = []int{1}
		for o := range ss {
			ss[o] = []int{0}
		}
	}
	return sh, ss
}

// rowIter walks the rows (all dimensions but the last) of a collapsed
// iteration space, giving each operand's element offset.
type rowIter struct {
	outer []int   // shape without its last dimension
	strs  [][]int // per operand, strides of outer
	inner int     // the last dimension
	in    []int   // per operand, the stride along the last dimension
	rows  int
}

func newRowIter(shape []int, strs [][]int) *rowIter {
	r := len(shape) - 1
	it := &rowIter{outer: shape[:r], inner: shape[r], rows: 1}
	for _, n := range it.outer {
		it.rows *= n
	}
	for _, s := range strs {
		it.strs = append(it.strs, s[:r])
		it.in = append(it.in, s[r])
	}
	return it
}

// offset returns operand o's element offset of row.
func (it *rowIter) offset(o, row int) int {
	off := 0
	s := it.strs[o]
	for d := len(it.outer) - 1; d >= 0; d-- {
		n := it.outer[d]
		off += (row % n) * s[d]
		row /= n
	}
	return off
}
