package shm

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
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
	f, err := os.OpenFile(dir+key, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating shared memory object %q: %w", key, err)
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		os.Remove(dir + key)
		return nil, fmt.Errorf("sizing shared memory object %q to %d bytes: %w", key, size, err)
	}
	m, err := mapRange(int(f.Fd()), key, 0, uint64(size))
	if err != nil {
		os.Remove(dir + key)
		return nil, err
	}
	return m, nil
}

// Open maps byte_size bytes at offset of the existing object key,
// read-write. The range must lie within the object.
//
// The key is a client's word, and the server writes into what it names,
// so Open maps only what is verifiably a shared memory object: it does not
// follow a symbolic link in /dev/shm, and it checks the file it opened
// (not the name, which could change meanwhile) is a regular file on the
// /dev/shm file system with no other names. Anything else is refused with
// an error wrapping ErrNotObject.
func Open(key string, offset, size uint64) (*Mapping, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	// O_NONBLOCK keeps a FIFO or device planted under the key from
	// blocking the open; on a regular file it changes nothing.
	fd, err := unix.Open(dir+key, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, openError(key, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shared memory object %q: %w", key, err)
	}
	if err := checkObject(key, &st); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, fmt.Errorf("shared memory region of %q: byte_size is 0", key)
	}
	if end := offset + size; end < offset || end > uint64(st.Size) {
		return nil, fmt.Errorf("shared memory region [%d, %d+%d) lies outside object %q of %d bytes", offset, offset, size, key, st.Size)
	}
	return mapRange(fd, key, offset, size)
}

// openError explains why opening key failed. The open refused what is not
// an object (a link, a directory, a socket); Lstat names what it was for
// the message only, the refusal came from the open itself.
func openError(key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("shared memory object %q does not exist", key)
	}
	if errors.Is(err, unix.ELOOP) { // O_NOFOLLOW met a symbolic link
		return notObject(key, fileType(unix.S_IFLNK))
	}
	var st unix.Stat_t
	if unix.Lstat(dir+key, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return notObject(key, fileType(st.Mode))
	}
	return fmt.Errorf("opening shared memory object %q: %w", key, err)
}

// checkObject refuses an opened file that is not a shared memory object:
// not a regular file, on another file system than /dev/shm (reached by a
// mount), or with more than one name (a hard link to a file the client
// wants written that happens to sit on the same file system).
func checkObject(key string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return notObject(key, fileType(st.Mode))
	}
	var shmDir unix.Stat_t
	if err := unix.Stat(dir, &shmDir); err != nil {
		return fmt.Errorf("shared memory object %q: %w", key, err)
	}
	if st.Dev != shmDir.Dev {
		return notObject(key, "it lies on another file system than "+dir)
	}
	if st.Nlink != 1 {
		return notObject(key, fmt.Sprintf("it has %d names (a hard link)", st.Nlink))
	}
	return nil
}

func notObject(key, reason string) error {
	return fmt.Errorf("shared memory key %q: %w: %s", key, ErrNotObject, reason)
}

// fileType names a file's type for an error message.
func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "it is a symbolic link"
	case unix.S_IFDIR:
		return "it is a directory"
	case unix.S_IFIFO:
		return "it is a FIFO"
	case unix.S_IFSOCK:
		return "it is a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "it is a device"
	}
	return "it is not a regular file"
}

func mapRange(fd int, key string, offset, size uint64) (*Mapping, error) {
	page := uint64(os.Getpagesize())
	start := offset &^ (page - 1)
	length := offset - start + size
	if length > math.MaxInt || start > math.MaxInt64 {
		return nil, fmt.Errorf("shared memory region of %q is too large to map", key)
	}
	mem, err := unix.Mmap(fd, int64(start), int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
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
	err := unix.Munmap(m.mem)
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
