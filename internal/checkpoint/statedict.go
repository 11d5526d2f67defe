// Package checkpoint reads and writes the weight files PyTorch users have:
// torch.save'd state dicts (.pth/.pt, a zip of a pickle and raw storages) and
// .safetensors. Tensors are memory-mapped where the file allows it, so loading
// never holds two copies of the weights.
package checkpoint

import (
	"fmt"
	"io"
	"sort"

	"goinfer/internal/tensor"
)

// StateDict is an ordered map from parameter names (torchvision's key names,
// e.g. "layer1.0.conv1.weight") to tensors. Tensors may alias a memory-mapped
// file: they are valid until Close.
type StateDict struct {
	names   []string
	tensors map[string]*tensor.Tensor
	closer  io.Closer
}

// NewStateDict returns an empty state dict.
func NewStateDict() *StateDict {
	return &StateDict{tensors: make(map[string]*tensor.Tensor)}
}

// Set adds or replaces a tensor, keeping first-insertion order.
func (sd *StateDict) Set(name string, t *tensor.Tensor) {
	if _, ok := sd.tensors[name]; !ok {
		sd.names = append(sd.names, name)
	}
	sd.tensors[name] = t
}

// Get returns the named tensor, or nil and false.
func (sd *StateDict) Get(name string) (*tensor.Tensor, bool) {
	t, ok := sd.tensors[name]
	return t, ok
}

// Names returns the keys in file order.
func (sd *StateDict) Names() []string { return append([]string(nil), sd.names...) }

// SortedNames returns the keys in lexical order.
func (sd *StateDict) SortedNames() []string {
	n := sd.Names()
	sort.Strings(n)
	return n
}

// Len is the number of tensors.
func (sd *StateDict) Len() int { return len(sd.names) }

// NumParams is the total element count over all tensors.
func (sd *StateDict) NumParams() int64 {
	var n int64
	for _, t := range sd.tensors {
		n += int64(t.NumElements())
	}
	return n
}

// DTypeCounts returns how many tensors there are of each dtype.
func (sd *StateDict) DTypeCounts() map[tensor.DType]int {
	m := map[tensor.DType]int{}
	for _, t := range sd.tensors {
		m[t.DType]++
	}
	return m
}

// SetCloser makes Close release c (a memory mapping, an open file).
func (sd *StateDict) SetCloser(c io.Closer) { sd.closer = c }

// Close releases the memory the tensors may alias. Tensors must not be used
// afterwards.
func (sd *StateDict) Close() error {
	if sd.closer == nil {
		return nil
	}
	err := sd.closer.Close()
	sd.closer = nil
	return err
}

// String summarizes the dict for error messages.
func (sd *StateDict) String() string {
	return fmt.Sprintf("state dict of %d tensors", len(sd.names))
}
