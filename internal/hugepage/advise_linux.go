//go:build linux

package hugepage

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeSize is the size of a transparent huge page on the platforms Go
// supports (x86-64, arm64 with 4 KiB base pages).
const hugeSize = 2 << 20

// alloc returns n zeroed Ts (size bytes each, a divisor of hugeSize); from
// minBytes on, they start at a huge-page boundary and the whole huge pages
// they reach are advised MADV_HUGEPAGE before anything touches them.
func alloc[T any](n, size int) []T {
	if n*size < minBytes {
		return make([]T, n)
	}
	span := (n*size + hugeSize - 1) &^ (hugeSize - 1)
	raw := make([]T, (span+hugeSize)/size)
	start := uintptr(unsafe.Pointer(&raw[0]))
	off := int((hugeSize-start%hugeSize)%hugeSize) / size
	b := raw[off : off+n : off+n]
	// The advice is a hint: where the kernel refuses it the buffer is
	// still ordinary memory.
	_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Pointer(&raw[off])), span), unix.MADV_HUGEPAGE)
	return b
}
