package checkpoint

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// fileBytes is a checkpoint file's content, either a memory mapping (unmap
// set) or a heap copy. It is the io.Closer a StateDict releases.
type fileBytes struct {
	data  []byte
	unmap func([]byte) error
	once  sync.Once
	err   error
}

// Close unmaps the file; tensors aliasing it must not be used afterwards.
// Closing twice is harmless.
func (b *fileBytes) Close() error {
	b.once.Do(func() {
		if b.unmap != nil {
			b.err = b.unmap(b.data)
		}
		b.data = nil
	})
	return b.err
}

// readWhole reads a file of the given size into memory.
func readWhole(f *os.File, size int64) (*fileBytes, error) {
	if size != int64(int(size)) {
		return nil, fmt.Errorf("%s: %d bytes do not fit in memory", f.Name(), size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.Name(), err)
	}
	return &fileBytes{data: data}, nil
}
