package client

import (
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-io/sluice/proto/batch"
)

// batchEncoder writes a canonical batch like batch.Builder (byte for byte:
// a test checks it), but into a buffer the producer recycles once the
// batch is acknowledged, so that a full batch costs no allocation and no
// growth copies.
type batchEncoder struct {
	buf    []byte
	n      int32
	baseTS int64
	maxTS  int64
}

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

func (e *batchEncoder) reset(buf []byte, baseTS int64) {
	e.buf = append(buf[:0], make([]byte, batch.HeaderSize)...)
	e.n = 0
	e.baseTS, e.maxTS = baseTS, baseTS
}

func (e *batchEncoder) count() int { return int(e.n) }
func (e *batchEncoder) size() int  { return len(e.buf) }

func headerEntrySize(h batch.RecordHeader) int {
	n := 0
	if len(h.Key) > 0 {
		n += 1 + protowire.SizeBytes(len(h.Key))
	}
	if len(h.Value) > 0 {
		n += 1 + protowire.SizeBytes(len(h.Value))
	}
	return n
}

// add appends a record, encoded as proto.Marshal of sluice.v1.Record
// would (fields in order, zero values omitted).
func (e *batchEncoder) add(ts int64, key, value []byte, headers []batch.RecordHeader) {
	d := ts - e.baseTS
	body := 0
	if d != 0 {
		body += 1 + protowire.SizeVarint(protowire.EncodeZigZag(d))
	}
	if e.n != 0 {
		body += 1 + protowire.SizeVarint(protowire.EncodeZigZag(int64(e.n)))
	}
	if len(key) > 0 {
		body += 1 + protowire.SizeBytes(len(key))
	}
	if len(value) > 0 {
		body += 1 + protowire.SizeBytes(len(value))
	}
	for _, h := range headers {
		body += 1 + protowire.SizeBytes(headerEntrySize(h))
	}
	buf := append(e.buf, 12<<3|2)
	buf = protowire.AppendVarint(buf, uint64(body))
	if d != 0 {
		buf = append(buf, 1<<3|0)
		buf = protowire.AppendVarint(buf, protowire.EncodeZigZag(d))
	}
	if e.n != 0 {
		buf = append(buf, 2<<3|0)
		buf = protowire.AppendVarint(buf, protowire.EncodeZigZag(int64(e.n)))
	}
	if len(key) > 0 {
		buf = append(buf, 3<<3|2)
		buf = protowire.AppendBytes(buf, key)
	}
	if len(value) > 0 {
		buf = append(buf, 4<<3|2)
		buf = protowire.AppendBytes(buf, value)
	}
	for _, h := range headers {
		buf = append(buf, 5<<3|2)
		buf = protowire.AppendVarint(buf, uint64(headerEntrySize(h)))
		if len(h.Key) > 0 {
			buf = append(buf, 1<<3|2)
			buf = protowire.AppendString(buf, h.Key)
		}
		if len(h.Value) > 0 {
			buf = append(buf, 2<<3|2)
			buf = protowire.AppendBytes(buf, h.Value)
		}
	}
	e.buf = buf
	e.n++
	if ts > e.maxTS {
		e.maxTS = ts
	}
}

// finish writes the header and CRC and hands the batch out. The producer
// identity is the seam for idempotence: a sequenced producer passes its
// id, epoch and base sequence here.
func (e *batchEncoder) finish(p batch.Producer, attributes uint32) []byte {
	if e.n == 0 {
		return nil
	}
	h := batch.Header{
		Attributes:      attributes,
		LastOffsetDelta: e.n - 1,
		BaseTimestamp:   e.baseTS,
		MaxTimestamp:    e.maxTS,
		ProducerID:      p.ID,
		ProducerEpoch:   p.Epoch,
		BaseSequence:    p.BaseSequence,
		RecordCount:     e.n,
	}
	out := e.buf
	batch.PutHeader(out, h)
	h.CRC = batch.ComputeCRC(out)
	batch.PutHeader(out, h)
	e.buf = nil
	return out
}
