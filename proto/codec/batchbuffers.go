package codec

import (
	"sync"
	"unsafe"

	"google.golang.org/grpc/mem"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
)

// BatchBuffers holds the buffers the batches of one message to send live
// in, and keeps them alive until gRPC has written the message: pooled
// buffers it hands out (Alloc: a leader's replica fetch answer, which
// storage.Log.ReadInto reads the follower's batches into), or references
// the sender adds (Add: a producer's batch buffers, recycled once the
// batch is answered and gRPC is done with it). Marshal takes a reference
// to the buffer for each batch inside one, which gRPC frees once the bytes
// are on the wire, and the sender frees its own references with Free after
// SendMsg; the last reference gives a buffer back to its pool. A fresh
// buffer per fetch cost the leader its zeroing (make) and the collector's
// work, a copy per produce request cost the producer a memmove of every
// byte: docs/benchmarks.md, issue 19 third pass. Add and Alloc are safe
// for concurrent use; Free is called once the message is sent (or
// dropped).
type BatchBuffers struct {
	// Pool supplies the buffers; nil is DefaultPool.
	Pool mem.BufferPool

	mu   sync.Mutex
	bufs []mem.Buffer
}

// Add makes buf one of r's buffers, taking a reference to it (the
// caller keeps its own).
func (r *BatchBuffers) Add(buf mem.Buffer) {
	buf.Ref()
	r.mu.Lock()
	r.bufs = append(r.bufs, buf)
	r.mu.Unlock()
}

// Alloc returns a buffer of length n with undefined contents, owned by r
// until Free.
func (r *BatchBuffers) Alloc(n int) []byte {
	pool := r.Pool
	if pool == nil {
		pool = DefaultPool
	}
	bp := pool.Get(n)
	buf := mem.NewBuffer(bp, pool)
	r.mu.Lock()
	r.bufs = append(r.bufs, buf)
	r.mu.Unlock()
	return *bp
}

// Free drops r's references; buffers no marshalled message still
// references go back to the pool. r is empty afterwards.
func (r *BatchBuffers) Free() {
	if r == nil {
		return
	}
	r.mu.Lock()
	bufs := r.bufs
	r.bufs = nil
	r.mu.Unlock()
	for _, b := range bufs {
		b.Free()
	}
}

// piece returns b as a piece of a marshalled message: a new reference to
// the part of r's buffer holding it, or b itself when it is not inside one
// of r's buffers (or r is nil).
func (r *BatchBuffers) piece(b []byte) mem.Buffer {
	if r == nil || len(b) == 0 {
		return mem.SliceBuffer(b)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, buf := range r.bufs {
		if off, ok := within(buf.ReadOnlyData(), b); ok {
			return buf.Slice(off, off+len(b))
		}
	}
	return mem.SliceBuffer(b)
}

// within reports whether inner lies inside outer's bytes, and where.
func within(outer, inner []byte) (int, bool) {
	if len(outer) == 0 || len(inner) == 0 {
		return 0, false
	}
	o := uintptr(unsafe.Pointer(unsafe.SliceData(outer)))
	i := uintptr(unsafe.Pointer(unsafe.SliceData(inner)))
	if i < o || i+uintptr(len(inner)) > o+uintptr(len(outer)) {
		return 0, false
	}
	return int(i - o), true
}

// OutgoingProduceStreamRequest is a ProduceStreamRequest to send whose
// batches may be slices of Buffers' buffers (nil: none are): Marshal
// references those instead of copying them. The sender calls
// Buffers.Free after SendMsg returns.
type OutgoingProduceStreamRequest struct {
	*internalv1.ProduceStreamRequestView
	Buffers *BatchBuffers
}

// OutgoingReplicaFetchResponse is a ReplicaFetchResponse to send whose
// batches may be slices of Buffers' buffers (nil: none are): Marshal
// references those instead of copying them. The sender calls
// Buffers.Free after SendMsg returns.
type OutgoingReplicaFetchResponse struct {
	*internalv1.ReplicaFetchResponse
	Buffers *BatchBuffers
}
