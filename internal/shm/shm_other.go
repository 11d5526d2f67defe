//go:build !linux

package shm

// Supported reports whether this platform has system shared memory.
func Supported() bool { return false }

// Create makes a new object of size bytes under key (Linux only).
func Create(key string, size int) (*Mapping, error) { return nil, ErrUnsupported }

// Open maps a range of an existing object (Linux only).
func Open(key string, offset, size uint64) (*Mapping, error) { return nil, ErrUnsupported }

// Close unmaps the range.
func (m *Mapping) Close() error { return nil }

// Unlink removes the object key (Linux only).
func Unlink(key string) error { return ErrUnsupported }
