package codec

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// pieces builds a message's encoding as a mem.BufferSlice without copying
// its batches: everything else goes into one small buffer, each batch is a
// piece of its own (a reference to bufs' buffer holding it, or the batch
// itself). Fields are appended in field-number order, as deterministic
// proto.Marshal writes them; every tag used here is one byte (numbers < 16).
type pieces struct {
	buf   []byte
	out   mem.BufferSlice
	start int // of the bytes of buf not yet in out
	bufs  *BatchBuffers
}

func newPieces(meta int, bufs *BatchBuffers) pieces {
	return pieces{buf: make([]byte, 0, meta), bufs: bufs}
}

// message starts an embedded message field of the given encoded size.
func (p *pieces) message(num protowire.Number, size int) {
	p.buf = protowire.AppendTag(p.buf, num, protowire.BytesType)
	p.buf = protowire.AppendVarint(p.buf, uint64(size))
}

// str appends a string field; proto3 leaves an empty one out.
func (p *pieces) str(num protowire.Number, s string) {
	if s != "" {
		p.buf = protowire.AppendTag(p.buf, num, protowire.BytesType)
		p.buf = protowire.AppendString(p.buf, s)
	}
}

// varint appends a varint field; proto3 leaves a zero one out.
func (p *pieces) varint(num protowire.Number, v uint64) { p.buf = appendVarintField(p.buf, num, v) }

// proto appends m, deterministically encoded, as an embedded message.
func (p *pieces) proto(num protowire.Number, m proto.Message) error {
	p.message(num, proto.Size(m))
	var err error
	p.buf, err = proto.MarshalOptions{Deterministic: true}.MarshalAppend(p.buf, m)
	return err
}

// batch appends b as a bytes field (an element of a repeated one: empty
// is still written), b itself as a piece of its own.
func (p *pieces) batch(num protowire.Number, b []byte) {
	p.buf = protowire.AppendTag(p.buf, num, protowire.BytesType)
	p.buf = protowire.AppendVarint(p.buf, uint64(len(b)))
	if len(b) == 0 {
		return
	}
	p.out = append(p.out, mem.SliceBuffer(p.buf[p.start:len(p.buf):len(p.buf)]), p.bufs.piece(b))
	p.start = len(p.buf)
}

// finish returns the encoding.
func (p *pieces) finish() mem.BufferSlice {
	if p.start < len(p.buf) {
		p.out = append(p.out, mem.SliceBuffer(p.buf[p.start:]))
	}
	return p.out
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func varintFieldSize(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func stringFieldSize(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

func messageFieldSize(m proto.Message) int {
	return 1 + protowire.SizeBytes(proto.Size(m))
}
