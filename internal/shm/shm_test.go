package shm

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

func testKey(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("/goinfer-test-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
}

func needLinux(t *testing.T) {
	t.Helper()
	if !Supported() {
		t.Skipf("system shared memory is not supported on %s", runtime.GOOS)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("no %s on this machine: %v", dir, err)
	}
}

func TestCheckKey(t *testing.T) {
	for _, tc := range []struct {
		key, err string
	}{
		{"/input", ""},
		{"/a.b-c_d", ""},
		{"input", "must start with '/'"},
		{"", "must start with '/'"},
		{"/", "names no object"},
		{"/..", "names no object"},
		{"/a/b", "no '/'"},
		{"/a\x00b", "no '/' or NUL"},
		{"/" + strings.Repeat("x", 256), "longer than 255"},
	} {
		err := CheckKey(tc.key)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("CheckKey(%q) = %v; want error containing %q", tc.key, err, tc.err)
		}
	}
}

func TestCreateOpenShare(t *testing.T) {
	needLinux(t)
	key := testKey(t)
	const size = 3*4096 + 100
	owner, err := Create(key, size)
	if err != nil {
		t.Fatal(err)
	}
	defer Unlink(key)
	defer owner.Close()
	if _, err := Create(key, size); err == nil {
		t.Fatal("creating an existing key succeeded")
	}
	for i := range owner.Bytes() {
		owner.Bytes()[i] = byte(i * 7)
	}
	// A range that starts off a page boundary and ends at the object's end.
	const off = 4096 + 13
	m, err := Open(key, off, size-off)
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != size-off || !bytes.Equal(m.Bytes(), owner.Bytes()[off:]) {
		t.Fatal("the opened range does not show the owner's bytes")
	}
	// Writes through either mapping show in the other.
	if _, err := Copy(m.Bytes()[:4], []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(owner.Bytes()[off:off+4], []byte{1, 2, 3, 4}) {
		t.Fatal("a write through the server's mapping is not visible to the owner")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	needLinux(t)
	key := testKey(t)
	owner, err := Create(key, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer Unlink(key)
	defer owner.Close()
	for _, tc := range []struct {
		name      string
		key       string
		off, size uint64
		err       string
	}{
		{"missing", key + "-none", 0, 10, "does not exist"},
		{"bad key", "noslash", 0, 10, "must start with '/'"},
		{"past the end", key, 4000, 100, "lies outside"},
		{"offset past the end", key, 5000, 1, "lies outside"},
		{"overflow", key, 1 << 63, 1 << 63, "lies outside"},
		{"empty", key, 0, 0, "byte_size is 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Open(tc.key, tc.off, tc.size)
			if err == nil {
				m.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %q does not say %q", err, tc.err)
			}
		})
	}
}

// TestCopyAfterTruncate checks that a mapping whose object shrank gives an
// error from Copy rather than a SIGBUS that kills the process.
func TestCopyAfterTruncate(t *testing.T) {
	needLinux(t)
	key := testKey(t)
	owner, err := Create(key, 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer Unlink(key)
	defer owner.Close()
	m, err := Open(key, 0, 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.Truncate(dir+key, 0); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 8192)
	if _, err := Copy(dst, m.Bytes()); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("Copy from a truncated object: %v; want a truncation error", err)
	}
	if _, err := Copy(m.Bytes(), dst); err == nil {
		t.Fatal("Copy into a truncated object succeeded")
	}
}

func TestUnlinkKeepsMappings(t *testing.T) {
	needLinux(t)
	key := testKey(t)
	owner, err := Create(key, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	owner.Bytes()[99] = 42
	if err := Unlink(key); err != nil {
		t.Fatal(err)
	}
	if owner.Bytes()[99] != 42 {
		t.Fatal("mapping changed after Unlink")
	}
	if _, err := Open(key, 0, 100); err == nil {
		t.Fatal("an unlinked key still opens")
	}
	if err := Unlink(key); err == nil {
		t.Fatal("unlinking twice succeeded")
	}
}
