package codec

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Pool tiers: buffers of 2^minTier .. 2^maxTier bytes are pooled, one
// sync.Pool per power of two; larger ones are allocated and dropped.
// 2^24 (16 MiB) covers a full replica fetch response.
const (
	minTier = 8
	maxTier = 24
)

// Pool is a mem.BufferPool whose buffers are not zeroed when reused:
// gRPC's default pool clears every buffer it hands out, which showed as
// about a tenth of a broker's CPU under load (docs/benchmarks.md). That is
// safe here because every user of a buffer from the pool writes it whole
// before reading it: gRPC reads a frame into it (io.ReadFull), copies a
// message into it (materializing), or marshals into it from length 0;
// Codec does the same. Safe for concurrent use.
type Pool struct {
	tiers [maxTier - minTier + 1]sync.Pool
}

// DefaultPool is the Pool every Sluice server, inter-node connection and
// client uses.
var DefaultPool = &Pool{}

var _ mem.BufferPool = (*Pool)(nil)

// Get returns a buffer of length size whose contents are undefined.
func (p *Pool) Get(size int) *[]byte {
	t := tierFor(size)
	if t > maxTier {
		b := make([]byte, size)
		return &b
	}
	if bp, ok := p.tiers[t-minTier].Get().(*[]byte); ok {
		*bp = (*bp)[:size]
		return bp
	}
	b := make([]byte, size, 1<<t)
	return &b
}

// Put returns a buffer obtained from Get (or a prefix of one) to the
// pool. Buffers of other capacities are dropped.
func (p *Pool) Put(bp *[]byte) {
	c := cap(*bp)
	if c < 1<<minTier || c > 1<<maxTier || c&(c-1) != 0 {
		return
	}
	p.tiers[bits.Len(uint(c))-1-minTier].Put(bp)
}

// tierFor is the exponent of the smallest pooled power of two >= size.
func tierFor(size int) int {
	if size <= 1<<minTier {
		return minTier
	}
	return bits.Len(uint(size - 1))
}
