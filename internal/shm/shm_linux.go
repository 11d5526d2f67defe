package shm

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"syscall"
)

// dir is where glibc's shm_open keeps objects; opening files there is
// shm_open without cgo.
const dir = "/dev/shm"

// Supported reports whether this platform has system shared memory.
func Supported() bool { return true }

// Create makes a new object of size bytes under key, mapped read-write.
// It fails if the key exists. The caller unmaps it with Close and removes
// it with Unlink.
func Create(key string, size int) (*Mapping, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fmt.Errorf("shared memory object %q: size %d is not positive", key, size)
	}
	f, err := os.OpenFile(dir+key, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating shared memory object %q: %w", key, err)
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		os.Remove(dir + key)
		return nil, fmt.Errorf("sizing shared memory object %q to %d bytes: %w", key, size, err)
	}
	m, err := mapRange(f, key, 0, uint64(size))
	if err != nil {
		os.Remove(dir + key)
		return nil, err
	}
	return m, nil
}

// Open maps byte_size bytes at offset of the existing object key,
// read-write. The range must lie within the object.
func Open(key string, offset, size uint64) (*Mapping, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(dir+key, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("shared memory object %q does not exist", key)
		}
		return nil, fmt.Errorf("opening shared memory object %q: %w", key, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("shared memory object %q: %w", key, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("shared memory key %q is not a shared memory object", key)
	}
	if size == 0 {
		return nil, fmt.Errorf("shared memory region of %q: byte_size is 0", key)
	}
	if end := offset + size; end < offset || end > uint64(st.Size()) {
		return nil, fmt.Errorf("shared memory region [%d, %d+%d) lies outside object %q of %d bytes", offset, offset, size, key, st.Size())
	}
	return mapRange(f, key, offset, size)
}

func mapRange(f *os.File, key string, offset, size uint64) (*Mapping, error) {
	page := uint64(os.Getpagesize())
	start := offset &^ (page - 1)
	length := offset - start + size
	if length > math.MaxInt || start > math.MaxInt64 {
		return nil, fmt.Errorf("shared memory region of %q is too large to map", key)
	}
	mem, err := syscall.Mmap(int(f.Fd()), int64(start), int(length), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping shared memory object %q: %w", key, err)
	}
	return &Mapping{key: key, mem: mem, data: mem[offset-start : offset-start+size : offset-start+size]}, nil
}

// Close unmaps the range. The object itself stays until Unlink.
func (m *Mapping) Close() error {
	if m.mem == nil {
		return nil
	}
	err := syscall.Munmap(m.mem)
	m.mem, m.data = nil, nil
	if err != nil {
		return fmt.Errorf("unmapping shared memory object %q: %w", m.key, err)
	}
	return nil
}

// Unlink removes the object key; mappings of it stay valid until closed.
func Unlink(key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := os.Remove(dir + key); err != nil {
		return fmt.Errorf("removing shared memory object %q: %w", key, err)
	}
	return nil
}
