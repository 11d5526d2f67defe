//go:build !unix

package checkpoint

import (
	"fmt"
	"os"
)

// mapFile reads the whole file into memory: this platform has no mmap.
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
	return readWhole(f, st.Size())
}
