// Package shm maps POSIX shared memory objects, the system shared memory
// of Triton's shared-memory extension to the KServe v2 protocol: a client
// on the same host puts tensors in an object it created under a key such
// as "/goinfer-input", registers a region of it with the server, and then
// sends requests that name the region instead of carrying the bytes.
//
// The owner of an object can shrink it while another process has it
// mapped; touching a page past the new end raises SIGBUS. Copy turns that
// fault into an error instead of a crash, so a server reads and writes
// client memory only through it.
package shm

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
)

// ErrUnsupported is returned where the platform has no POSIX shared memory
// this package can reach without cgo (everything but Linux).
var ErrUnsupported = errors.New("system shared memory is only supported on Linux")

// ErrNotObject is wrapped by the error for a key that names something
// other than a shared memory object: a symbolic link, a directory, a FIFO,
// a socket, a device, a file on another file system or one with several
// names. Mapping it could read or write a file the client has no claim on.
var ErrNotObject = errors.New("not a shared memory object")

// MaxKeyLen bounds a key, as NAME_MAX bounds a file name.
const MaxKeyLen = 255

// CheckKey reports whether key names a shared memory object: a slash, then
// a file name (no further slashes, not "." or "..").
func CheckKey(key string) error {
	name, ok := strings.CutPrefix(key, "/")
	switch {
	case !ok:
		return fmt.Errorf("shared memory key %q must start with '/'", key)
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("shared memory key %q names no object", key)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("shared memory key %q may hold no '/' or NUL after the first '/'", key)
	case len(name) > MaxKeyLen:
		return fmt.Errorf("shared memory key %q is longer than %d bytes", key, MaxKeyLen)
	}
	return nil
}

// Mapping is a byte range of a shared memory object mapped into this
// process. Its methods are not safe for concurrent use with Close.
type Mapping struct {
	key  string
	mem  []byte // the whole mapping, from a page boundary
	data []byte // the range asked for
}

// Key is the object's key.
func (m *Mapping) Key() string { return m.key }

// Bytes is the mapped range. Read and write it through Copy when another
// process owns the object.
func (m *Mapping) Bytes() []byte { return m.data }

// Pages is the whole mapping: the range asked for, from the start of the
// page it begins in (for page-locking it).
func (m *Mapping) Pages() []byte { return m.mem }

// Len is the length of the mapped range.
func (m *Mapping) Len() int { return len(m.data) }

// Copy copies src to dst like the built-in copy, but a fault on a mapped
// page (the object shrank under its mapping) is returned as an error
// instead of killing the process.
func Copy(dst, src []byte) (n int, err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if v := recover(); v != nil {
			if _, ok := v.(interface{ Addr() uintptr }); !ok {
				panic(v)
			}
			n, err = 0, errors.New("shared memory fault: the object was truncated while mapped")
		}
	}()
	return copy(dst, src), nil
}
