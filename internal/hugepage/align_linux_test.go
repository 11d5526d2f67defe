//go:build linux

package hugepage

import (
	"fmt"
	"os"
	"path/filepath"
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

// TestFreePageReporting reads sysfs-shaped trees of virtio devices: only a
// balloon (device 0x0005) with feature bit 5 set reports free pages.
func TestFreePageReporting(t *testing.T) {
	type dev struct{ id, features string }
	for _, tc := range []struct {
		name string
		devs []dev
		want bool
	}{
		{"balloon reporting", []dev{{"0x0001", "11000101"}, {"0x0005\n", "0110010100000000\n"}}, true},
		{"balloon without reporting", []dev{{"0x0005", "0110000100000000"}}, false},
		{"no balloon", []dev{{"0x0001", "11111111"}, {"0x0002", "00000100"}}, false},
		{"balloon with a short features file", []dev{{"0x0005", "011"}}, false},
		{"no virtio devices", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, d := range tc.devs {
				p := filepath.Join(dir, fmt.Sprintf("virtio%d", i))
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(p, "device"), []byte(d.id), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(p, "features"), []byte(d.features), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := freePageReporting(dir); got != tc.want {
				t.Errorf("freePageReporting = %v, want %v", got, tc.want)
			}
		})
	}
	if freePageReporting(filepath.Join(t.TempDir(), "absent")) {
		t.Error("a missing directory reports free pages")
	}
	t.Logf("this machine: huge-page advice %v", Advised())
}
