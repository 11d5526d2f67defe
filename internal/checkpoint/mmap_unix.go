//go:build unix

package checkpoint

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile returns the whole file's bytes, memory-mapped read-only so that
// tensors can alias the page cache instead of holding a second copy. When
// the file cannot be mapped (an empty file, a pipe, a file system without
// mmap) it is read into memory instead.
func mapFile(path string) (*fileBytes, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	size := st.Size()
	if size > 0 && size == int64(int(size)) {
		data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
		if err == nil {
			// The weights are read once, front to back, by the model builder.
			_ = unix.Madvise(data, unix.MADV_SEQUENTIAL)
			return &fileBytes{data: data, unmap: unix.Munmap}, nil
		}
	}
	return readWhole(f, size)
}
