package server

import (
	"math/bits"
	"sync"
)

// bufPool recycles byte buffers by power-of-two size class, so that request
// bodies and logits do not allocate per request. Buffers of 64 bytes or
// more come from the Go allocator 8-byte aligned, so float32 views of them
// are safe.
type bufPool struct {
	classes [maxPooledClass + 1]sync.Pool
}

const minBufClass = 12 // 4 KiB

// maxPooledClass is the largest buffer class kept for reuse (64 MiB, a
// batch of 64 FP32 images of 224x224). Bigger buffers are rare (clients
// sending bodies near --max_request_bytes) and are left to the garbage
// collector: a pool that kept them would count as live heap, and the
// collector lets the heap grow to twice that before it runs.
const maxPooledClass = 26

func bufClass(n int) int {
	if n <= 1<<minBufClass {
		return minBufClass
	}
	return bits.Len(uint(n - 1))
}

// get returns a buffer of length n. Put it back with put when done.
func (p *bufPool) get(n int) *[]byte {
	c := bufClass(n)
	if c > maxPooledClass {
		b := make([]byte, n)
		return &b
	}
	if v := p.classes[c].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

// Get and Put make bufPool a mem.BufferPool for the gRPC codec. Unlike
// gRPC's default pool it does not zero buffers: every byte handed out is
// overwritten by the receive that asked for it.
func (p *bufPool) Get(n int) *[]byte { return p.get(n) }

// Put is put.
func (p *bufPool) Put(b *[]byte) { p.put(b) }

// put recycles b. It must not be used afterwards.
func (p *bufPool) put(b *[]byte) {
	c := bufClass(cap(*b))
	if c > maxPooledClass || cap(*b) != 1<<c {
		return
	}
	p.classes[c].Put(b)
}
