package shm

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOpenRefusesNonObjects plants under a key each kind of file that is
// not a shared memory object and checks that Open refuses it with
// ErrNotObject, names the key and the reason, and that no file the key led
// to changed.
func TestOpenRefusesNonObjects(t *testing.T) {
	needLinux(t)
	secret := []byte("bytes outside /dev/shm that no client may read or write")
	for _, tc := range []struct {
		name   string
		reason string
		// plant makes path and returns a file whose bytes must stay as
		// they are, or "".
		plant func(t *testing.T, path string) string
	}{
		{"symlink to a file elsewhere", "symbolic link", func(t *testing.T, path string) string {
			target := filepath.Join(t.TempDir(), "target")
			if err := os.WriteFile(target, secret, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			return target
		}},
		{"symlink to an object", "symbolic link", func(t *testing.T, path string) string {
			target := path + "-target"
			if err := os.WriteFile(target, secret, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(target) })
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			return target
		}},
		{"dangling symlink", "symbolic link", func(t *testing.T, path string) string {
			if err := os.Symlink(filepath.Join(t.TempDir(), "none"), path); err != nil {
				t.Fatal(err)
			}
			return ""
		}},
		{"directory", "directory", func(t *testing.T, path string) string {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
			return ""
		}},
		{"FIFO", "FIFO", func(t *testing.T, path string) string {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Skipf("cannot make a FIFO in %s: %v", dir, err)
			}
			return ""
		}},
		{"socket", "socket", func(t *testing.T, path string) string {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Skipf("cannot make a socket in %s: %v", dir, err)
			}
			t.Cleanup(func() { l.Close() })
			return ""
		}},
		{"hard link", "hard link", func(t *testing.T, path string) string {
			other := path + "-other"
			if err := os.WriteFile(other, secret, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(other) })
			if err := os.Link(other, path); err != nil {
				t.Skipf("cannot hard-link in %s: %v", dir, err)
			}
			return other
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := testKey(t)
			path := dir + key
			os.RemoveAll(path)
			t.Cleanup(func() { os.RemoveAll(path) })
			target := tc.plant(t, path)
			m, err := Open(key, 0, uint64(len(secret)))
			if err == nil {
				copy(m.Bytes(), "overwritten")
				m.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, ErrNotObject) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("error %q; want ErrNotObject naming %q and %q", err, key, tc.reason)
			}
			t.Log(err)
			if target != "" {
				if b, err := os.ReadFile(target); err != nil || !bytes.Equal(b, secret) {
					t.Fatalf("the file the key led to holds %q (%v); want it untouched", b, err)
				}
			}
		})
	}
}

// TestCreateRefusesSymlink checks that Create does not make an object
// through a link planted under its key.
func TestCreateRefusesSymlink(t *testing.T) {
	needLinux(t)
	key := testKey(t)
	target := filepath.Join(t.TempDir(), "target")
	if err := os.Symlink(target, dir+key); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir + key) })
	if m, err := Create(key, 4096); err == nil {
		m.Close()
		t.Fatal("Create through a symlink succeeded")
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the link's target exists after Create: %v", err)
	}
}
