package hugepage

import (
	"testing"
	"unsafe"
)

func TestSmall(t *testing.T) {
	var bufs [][]float32
	for _, n := range []int{0, 1, 15, 16, 17, 1000, slabBytes/4 - 3, 7, MinBytes / 4, MinBytes/4 - 1} {
		b := Small(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("n=%d: got len %d cap %d", n, len(b), cap(b))
		}
		if n == 0 {
			continue
		}
		if p := uintptr(unsafe.Pointer(&b[0])); p%64 != 0 {
			t.Errorf("n=%d: starts at %#x, not on a 64-byte line", n, p)
		}
		for i := range b {
			if b[i] != 0 {
				t.Fatalf("n=%d: element %d not zero", n, i)
			}
		}
		bufs = append(bufs, b)
	}
	// No two buffers share memory: each is filled with its own value.
	for i, b := range bufs {
		for j := range b {
			b[j] = float32(i + 1)
		}
	}
	for i, b := range bufs {
		for j := range b {
			if b[j] != float32(i+1) {
				t.Fatalf("buffer %d element %d: %v, overwritten by another", i, j, b[j])
			}
		}
	}
}
