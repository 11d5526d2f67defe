package hugepage

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

const hugeSize = 2 << 20

// advise asks for huge pages on the 2 MiB-aligned pages inside b; errors
// (a kernel without transparent huge pages) leave b as it is, which is
// what advice is for.
func advise[T any](b []T) {
	if len(b) == 0 {
		return
	}
	var zero T
	p := unsafe.Pointer(&b[0])
	start := uintptr(p)
	end := start + uintptr(len(b))*unsafe.Sizeof(zero)
	lo := (start + hugeSize - 1) &^ (hugeSize - 1)
	hi := end &^ (hugeSize - 1)
	if hi <= lo {
		return
	}
	_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, lo-start)), hi-lo), unix.MADV_HUGEPAGE)
}
