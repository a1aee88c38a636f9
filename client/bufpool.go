package client

import (
	"sync"

	"google.golang.org/grpc/mem"
)

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

// wirePool is a mem.BufferPool over p: a batch's data wrapped as a
// reference-counted buffer (recordBatch.wire) comes back to p when its
// last reference is freed. It never hands out buffers itself.
type wirePool struct{ p *bufPool }

func (w wirePool) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

func (w wirePool) Put(b *[]byte) { w.p.put(*b) }

// wireBuffer returns b's data as a reference-counted buffer whose last
// Free gives data back to bufs.
func wireBuffer(data []byte, bufs *bufPool) mem.Buffer {
	return mem.NewBuffer(&data, wirePool{bufs})
}
