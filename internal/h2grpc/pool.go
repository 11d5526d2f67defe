package h2grpc

import (
	"math/bits"
	"sync"
)

// bufPool hands out message buffers by power-of-two size class, not
// zeroed: every byte a request uses is overwritten by what arrives.
type bufPool struct{ classes [33]sync.Pool }

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
