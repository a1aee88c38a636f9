package client

import "sync"

// Batches are built with batch.Builder into buffers the producer recycles
// once a batch is acknowledged (Builder.ResetBuffer), so a full batch costs
// no allocation and no growth copies.

// bufPool holds batch buffers of the producer's batch size (plus slack).
type bufPool struct {
	size int
	pool sync.Pool
}

func (p *bufPool) get() []byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, p.size)
}

func (p *bufPool) put(b []byte) {
	if cap(b) >= p.size && cap(b) <= 2*p.size {
		p.pool.Put(&b)
	}
}
