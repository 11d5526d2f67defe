package h2grpc

import (
	"math/bits"
	"sync"
)

// bufPool hands out message buffers by power-of-two size class, not
// zeroed: every byte a request uses is overwritten by what arrives.
type bufPool struct{ classes [33]sync.Pool }

var messageBuffers bufPool

// get returns an empty buffer of capacity at least n.
func (p *bufPool) get(n int) []byte {
	c := bits.Len(uint(max(n, 1) - 1))
	if v := p.classes[c].Get(); v != nil {
		return (*v.(*[]byte))[:0]
	}
	return make([]byte, 0, 1<<c)
}

// put returns b to its class (buffers not from get are dropped).
func (p *bufPool) put(b []byte) {
	if c := bits.Len(uint(cap(b) - 1)); cap(b) > 0 && cap(b) == 1<<c {
		b = b[:0]
		p.classes[c].Put(&b)
	}
}

// reserve makes room for n more bytes in b, moving it to a larger pooled
// buffer when needed (the old one goes back to the pool).
func (p *bufPool) reserve(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := append(p.get(max(len(b)+n, 2*cap(b))), b...)
	p.put(b)
	return nb
}

// growTo makes b's capacity at least n, moving it to a pooled buffer when
// needed (the old one goes back to the pool).
func (p *bufPool) growTo(b []byte, n int) []byte {
	if cap(b) >= n {
		return b
	}
	nb := append(p.get(n), b...)
	p.put(b)
	return nb
}
