//go:build linux

package hugepage

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeSize is the size of a transparent huge page on the platforms Go
// supports (x86-64, arm64 with 4 KiB base pages).
const hugeSize = 2 << 20

// alloc returns n zeroed Ts (size bytes each, a divisor of hugeSize); from
// minBytes on, they start at a huge-page boundary and, where the advice
// helps (Advised), the whole huge pages they reach are advised
// MADV_HUGEPAGE before anything touches them.
func alloc[T any](n, size int) []T {
	if n*size < minBytes {
		return make([]T, n)
	}
	span := (n*size + hugeSize - 1) &^ (hugeSize - 1)
	raw := make([]T, (span+hugeSize)/size)
	start := uintptr(unsafe.Pointer(&raw[0]))
	off := int((hugeSize-start%hugeSize)%hugeSize) / size
	b := raw[off : off+n : off+n]
	if Advised() {
		// The advice is a hint: where the kernel refuses it the buffer is
		// still ordinary memory.
		_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Pointer(&raw[off])), span), unix.MADV_HUGEPAGE)
	}
	return b
}

// Advised reports whether this process advises its large buffers for huge
// pages: everywhere but on virtual machines whose balloon device reports
// free memory to the host. Such a guest hands its free blocks of 2 MiB
// and more back to the host, so a huge page is memory the host must supply
// anew on first touch, while small pages come from recycled memory: there
// advised buffers were several times slower to touch, where elsewhere one
// fault per 2 MiB instead of 512 made them faster.
func Advised() bool { return advised() }

var advised = sync.OnceValue(func() bool { return !freePageReporting("/sys/bus/virtio/devices") })

// virtioBalloon is the virtio device ID of a memory balloon, and
// balloonReporting the feature bit of free page reporting
// (VIRTIO_BALLOON_F_REPORTING).
const (
	virtioBalloon    = "0x0005"
	balloonReporting = 5
)

// freePageReporting reports whether a virtio device under dir (sysfs's
// /sys/bus/virtio/devices) is a balloon that negotiated free page
// reporting: its features file is a string of 0s and 1s, bit i at index i.
func freePageReporting(dir string) bool {
	devs, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, d := range devs {
		id, err := os.ReadFile(filepath.Join(dir, d.Name(), "device"))
		if err != nil || strings.TrimSpace(string(id)) != virtioBalloon {
			continue
		}
		f, err := os.ReadFile(filepath.Join(dir, d.Name(), "features"))
		if err == nil && len(f) > balloonReporting && f[balloonReporting] == '1' {
			return true
		}
	}
	return false
}
