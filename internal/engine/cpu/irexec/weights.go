package irexec

import (
	"fmt"
	"sync"
	"unsafe"

	"goinfer/internal/tensor"
)

// WeightCache holds constants converted for the kernels (aligned copies,
// float32 views, packed GEMM panels), keyed by the constant tensor, so
// that plans of one graph at several batch sizes, and all their Execs,
// share one copy. It is safe for concurrent use.
type WeightCache struct {
	mu     sync.Mutex
	raw    map[*tensor.Tensor][]byte
	packed map[packKey]any
	held   int64
}

// packKey names one derived form of a constant.
type packKey struct {
	t    *tensor.Tensor
	form string
}

// NewWeightCache returns an empty cache.
func NewWeightCache() *WeightCache {
	return &WeightCache{raw: map[*tensor.Tensor][]byte{}, packed: map[packKey]any{}}
}

// Bytes is the memory the cache holds.
func (w *WeightCache) Bytes() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held
}

// alignedBytes returns n zeroed bytes aligned for any dtype.
func alignedBytes(n int) []byte {
	if n == 0 {
		return nil
	}
	u := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), n)
}

// bytes returns t's data in memory aligned for its dtype.
func (w *WeightCache) bytes(t *tensor.Tensor) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b, ok := w.raw[t]; ok {
		return b, nil
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	b := alignedBytes(len(t.Data))
	copy(b, t.Data)
	w.raw[t] = b
	w.held += int64(len(b))
	return b, nil
}

// floats returns a float32 constant's values for a kernel to pack or keep:
// the tensor's own memory when it is aligned, else an aligned copy that the
// cache does not keep.
func (w *WeightCache) floats(t *tensor.Tensor) ([]float32, error) {
	if t.DType != tensor.Float32 {
		return nil, fmt.Errorf("constant is %s, want float32", t.DType)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if len(t.Data) == 0 || uintptr(unsafe.Pointer(&t.Data[0]))%4 == 0 {
		return f32(t.Data), nil
	}
	b := alignedBytes(len(t.Data))
	copy(b, t.Data)
	return f32(b), nil
}

// derived returns the form of t that make builds, building it once.
func (w *WeightCache) derived(t *tensor.Tensor, form string, size func(any) int64, build func() (any, error)) (any, error) {
	k := packKey{t, form}
	w.mu.Lock()
	if v, ok := w.packed[k]; ok {
		w.mu.Unlock()
		return v, nil
	}
	w.mu.Unlock()
	v, err := build()
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.packed[k]; ok {
		return old, nil
	}
	w.packed[k] = v
	w.held += size(v)
	return v, nil
}

// f32 views b as float32s.
func f32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// i64 views b as int64s.
func i64(b []byte) []int64 {
	if len(b) < 8 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&b[0])), len(b)/8)
}

// i32 views b as int32s.
func i32(b []byte) []int32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), len(b)/4)
}
