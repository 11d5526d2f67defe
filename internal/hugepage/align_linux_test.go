//go:build linux

package hugepage

import (
	"testing"
	"unsafe"
)

// TestAligned checks that buffers from minBytes on start on a huge-page
// boundary, whatever their element size, so that all of them is advised.
func TestAligned(t *testing.T) {
	for _, n := range []int{minBytes, minBytes + 3, 3*hugeSize + 1} {
		f, d, b := Float32s(n/4), Float64s(n/8), Bytes(n)
		for _, p := range []unsafe.Pointer{unsafe.Pointer(&f[0]), unsafe.Pointer(&d[0]), unsafe.Pointer(&b[0])} {
			if uintptr(p)%hugeSize != 0 {
				t.Errorf("%d bytes: buffer at %#x, not on a %d-byte boundary", n, p, hugeSize)
			}
		}
		if cap(f) != n/4 || cap(d) != n/8 || cap(b) != n {
			t.Errorf("%d bytes: capacities %d, %d, %d beyond the lengths", n, cap(f), cap(d), cap(b))
		}
	}
}
