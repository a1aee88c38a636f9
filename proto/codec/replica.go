package codec

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Field numbers of sluice.internal.v1.ReplicaFetchResponse and
// ReplicaFetchPartitionData (replica.proto).
const (
	rfrPartitions   = 1
	rfrErrorCode    = 2
	rfrErrorMessage = 3
	rfrSessionID    = 4

	rfpTopic          = 1
	rfpPartition      = 2
	rfpErrorCode      = 3
	rfpErrorMessage   = 4
	rfpHighWatermark  = 5
	rfpLogStartOffset = 6
	rfpLogEndOffset   = 7
	rfpBatches        = 8
)

// marshalReplicaFetchResponse encodes m exactly as deterministic
// proto.Marshal would (fields in number order, proto3 zero values left
// out), but without copying the batches: the result alternates pieces of
// one small buffer holding everything else with the batch slices
// themselves. The batches must not change until gRPC has written the
// message (Log.Read's batches never do). A batch inside one of bufs'
// buffers is a reference to it (freed by gRPC once written) rather than a
// plain slice; bufs may be nil.
func marshalReplicaFetchResponse(m *internalv1.ReplicaFetchResponse, bufs *BatchBuffers) mem.BufferSlice {
	// The non-batch bytes: at most 64 bytes of tags, lengths and scalars
	// per partition besides its strings, and 11 bytes of tag and length
	// per batch.
	meta := 32 + len(m.ErrorMessage)
	for _, p := range m.Partitions {
		meta += 64 + len(p.Topic) + len(p.ErrorMessage) + 11*len(p.Batches)
	}
	w := newPieces(meta, bufs)
	for _, p := range m.Partitions {
		w.message(rfrPartitions, partitionDataSize(p))
		w.str(rfpTopic, p.Topic)
		w.varint(rfpPartition, uint64(int64(p.Partition)))
		w.varint(rfpErrorCode, uint64(int64(p.ErrorCode)))
		w.str(rfpErrorMessage, p.ErrorMessage)
		w.varint(rfpHighWatermark, uint64(p.HighWatermark))
		w.varint(rfpLogStartOffset, uint64(p.LogStartOffset))
		w.varint(rfpLogEndOffset, uint64(p.LogEndOffset))
		for _, b := range p.Batches {
			w.batch(rfpBatches, b)
		}
	}
	w.varint(rfrErrorCode, uint64(int64(m.ErrorCode)))
	w.str(rfrErrorMessage, m.ErrorMessage)
	w.varint(rfrSessionID, uint64(int64(m.SessionId)))
	return w.finish()
}

// partitionDataSize is the encoded size of p (all field numbers < 16, so
// every tag is one byte).
func partitionDataSize(p *internalv1.ReplicaFetchPartitionData) int {
	n := stringFieldSize(p.Topic) + varintFieldSize(uint64(int64(p.Partition))) + varintFieldSize(uint64(int64(p.ErrorCode))) +
		stringFieldSize(p.ErrorMessage) + varintFieldSize(uint64(p.HighWatermark)) + varintFieldSize(uint64(p.LogStartOffset)) +
		varintFieldSize(uint64(p.LogEndOffset))
	for _, b := range p.Batches {
		n += 1 + protowire.SizeBytes(len(b))
	}
	return n
}

// ReplicaFetchResponse is a sluice.internal.v1.ReplicaFetchResponse that
// Codec decodes in place: each partition's Batches are slices of the
// received buffer. Call Release once the batches are no longer used (a
// follower's appends copy them); a response never released is left to the
// garbage collector.
type ReplicaFetchResponse struct {
	internalv1.ReplicaFetchResponse
	buf mem.Buffer
}

// UnmarshalAliased implements AliasUnmarshaler.
func (r *ReplicaFetchResponse) UnmarshalAliased(buf mem.Buffer) error {
	r.Release()
	r.buf = buf
	r.Partitions, r.ErrorCode, r.ErrorMessage, r.SessionId = nil, 0, "", 0
	if err := decodeReplicaFetchResponse(buf.ReadOnlyData(), &r.ReplicaFetchResponse); err != nil {
		r.Release()
		return err
	}
	return nil
}

// Release gives the received buffer back; the batches must not be used
// afterwards. Safe to call more than once.
func (r *ReplicaFetchResponse) Release() {
	if r.buf != nil {
		r.buf.Free()
		r.buf = nil
	}
}

func decodeReplicaFetchResponse(b []byte, m *internalv1.ReplicaFetchResponse) error {
	return walk(b, "ReplicaFetchResponse", func(f field) (err error) {
		switch {
		case f.is(rfrPartitions, protowire.BytesType):
			p := &internalv1.ReplicaFetchPartitionData{}
			m.Partitions = append(m.Partitions, p)
			return decodeReplicaFetchPartitionData(f.bytes, p)
		case f.is(rfrErrorCode, protowire.VarintType):
			m.ErrorCode = sluicev1.ErrorCode(int32(f.varint))
		case f.is(rfrErrorMessage, protowire.BytesType):
			m.ErrorMessage, err = f.utf8("ReplicaFetchResponse.error_message")
		case f.is(rfrSessionID, protowire.VarintType):
			m.SessionId = int32(f.varint)
		}
		return err
	})
}

func decodeReplicaFetchPartitionData(b []byte, p *internalv1.ReplicaFetchPartitionData) error {
	return walk(b, "ReplicaFetchPartitionData", func(f field) (err error) {
		switch {
		case f.is(rfpTopic, protowire.BytesType):
			p.Topic, err = f.utf8("ReplicaFetchPartitionData.topic")
		case f.is(rfpErrorMessage, protowire.BytesType):
			p.ErrorMessage, err = f.utf8("ReplicaFetchPartitionData.error_message")
		case f.is(rfpBatches, protowire.BytesType):
			p.Batches = append(p.Batches, f.bytes)
		case f.is(rfpPartition, protowire.VarintType):
			p.Partition = int32(f.varint)
		case f.is(rfpErrorCode, protowire.VarintType):
			p.ErrorCode = sluicev1.ErrorCode(int32(f.varint))
		case f.is(rfpHighWatermark, protowire.VarintType):
			p.HighWatermark = int64(f.varint)
		case f.is(rfpLogStartOffset, protowire.VarintType):
			p.LogStartOffset = int64(f.varint)
		case f.is(rfpLogEndOffset, protowire.VarintType):
			p.LogEndOffset = int64(f.varint)
		}
		return err
	})
}
