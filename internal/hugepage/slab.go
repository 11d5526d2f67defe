package hugepage

import "sync"

// slabBytes is the size of the huge-page-advised blocks that Small carves.
const slabBytes = 4 << 20

// slab is the block Small carves from; when the next request does not fit,
// a fresh block replaces it. A block is freed by the garbage collector
// once nothing carved from it is referenced.
var slab struct {
	mu   sync.Mutex
	free []float32
}

// Small returns a zeroed []float32 of length n; below MinBytes it is carved,
// 64-byte aligned, from a shared huge-page-advised block instead of being
// an allocation of its own. Many small buffers read on every forward (a
// model's per-layer packed weights) then share huge pages: at batch 1 a
// small CNN's weights are streamed from the last-level cache once per
// forward, and with 4 KiB pages they span more pages than a core's
// second-level TLB maps. It is safe for concurrent use.
func Small(n int) []float32 {
	if 4*n >= MinBytes || n == 0 {
		return Float32s(n)
	}
	const line = 16 // floats per 64-byte line
	slab.mu.Lock()
	defer slab.mu.Unlock()
	if len(slab.free) < n {
		slab.free = Float32s(slabBytes / 4)
	}
	b := slab.free[:n:n]
	skip := min(len(slab.free), (n+line-1)/line*line)
	slab.free = slab.free[skip:]
	return b
}
