package codec

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
)

// Field numbers of sluice.internal.v1.FetchResponseView,
// FetchableTopicResponseView and PartitionDataView (view.proto).
const (
	frTopics = 1

	ftName       = 1
	ftPartitions = 2

	pdPartition           = 1
	pdErrorCode           = 2
	pdErrorMessage        = 3
	pdHighWatermark       = 4
	pdLastStableOffset    = 5
	pdLogStartOffset      = 6
	pdAbortedTransactions = 7
	pdNextFetchOffset     = 8
	pdCurrentLeader       = 9
	pdBatches             = 15
)

// OutgoingFetchResponse is a consumer's fetch answer whose batches may be
// slices of Buffers' buffers (nil: none are): Marshal references those
// instead of copying them, then drops Buffers' own references — a unary
// answer is encoded once, after the handler has returned, so the encoding
// is the last use (an answer never encoded leaves its buffers to the
// garbage collector).
type OutgoingFetchResponse struct {
	*internalv1.FetchResponseView
	Buffers *BatchBuffers
}

// marshalFetchResponse encodes m exactly as deterministic proto.Marshal
// would, with the batches as pieces of their own (see
// marshalReplicaFetchResponse).
func marshalFetchResponse(m *internalv1.FetchResponseView, bufs *BatchBuffers) (mem.BufferSlice, error) {
	meta := 0
	for _, t := range m.Topics {
		meta += 16 + len(t.Name)
		for _, p := range t.Partitions {
			meta += 96 + len(p.ErrorMessage) + 40*len(p.AbortedTransactions) + 11*len(p.Batches)
			if p.CurrentLeader != nil {
				meta += 16 + len(p.CurrentLeader.Address)
			}
		}
	}
	buf := make([]byte, 0, meta)
	var out mem.BufferSlice
	start := 0 // of the bytes of buf not yet in out
	var err error
	for _, t := range m.Topics {
		buf = protowire.AppendTag(buf, frTopics, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(fetchTopicSize(t)))
		if t.Name != "" {
			buf = protowire.AppendTag(buf, ftName, protowire.BytesType)
			buf = protowire.AppendString(buf, t.Name)
		}
		for _, p := range t.Partitions {
			buf = protowire.AppendTag(buf, ftPartitions, protowire.BytesType)
			buf = protowire.AppendVarint(buf, uint64(partitionDataViewSize(p)))
			buf = appendVarintField(buf, pdPartition, uint64(int64(p.Partition)))
			buf = appendVarintField(buf, pdErrorCode, uint64(int64(p.ErrorCode)))
			if p.ErrorMessage != "" {
				buf = protowire.AppendTag(buf, pdErrorMessage, protowire.BytesType)
				buf = protowire.AppendString(buf, p.ErrorMessage)
			}
			buf = appendVarintField(buf, pdHighWatermark, uint64(p.HighWatermark))
			buf = appendVarintField(buf, pdLastStableOffset, uint64(p.LastStableOffset))
			buf = appendVarintField(buf, pdLogStartOffset, uint64(p.LogStartOffset))
			for _, a := range p.AbortedTransactions {
				if buf, err = appendMessageField(buf, pdAbortedTransactions, a); err != nil {
					return nil, err
				}
			}
			buf = appendVarintField(buf, pdNextFetchOffset, uint64(p.NextFetchOffset))
			if p.CurrentLeader != nil {
				if buf, err = appendMessageField(buf, pdCurrentLeader, p.CurrentLeader); err != nil {
					return nil, err
				}
			}
			for _, b := range p.Batches {
				buf = protowire.AppendTag(buf, pdBatches, protowire.BytesType)
				buf = protowire.AppendVarint(buf, uint64(len(b)))
				if len(b) == 0 {
					continue
				}
				out = append(out, mem.SliceBuffer(buf[start:len(buf):len(buf)]), bufs.piece(b))
				start = len(buf)
			}
		}
	}
	if start < len(buf) || len(out) == 0 {
		out = append(out, mem.SliceBuffer(buf[start:]))
	}
	return out, nil
}

// appendMessageField appends m as field num, deterministically encoded.
func appendMessageField(b []byte, num protowire.Number, m proto.Message) ([]byte, error) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(proto.Size(m)))
	return proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, m)
}

func messageFieldSize(m proto.Message) int {
	return 1 + protowire.SizeBytes(proto.Size(m))
}

func fetchTopicSize(t *internalv1.FetchableTopicResponseView) int {
	n := stringFieldSize(t.Name)
	for _, p := range t.Partitions {
		n += 1 + protowire.SizeBytes(partitionDataViewSize(p))
	}
	return n
}

// partitionDataViewSize is the encoded size of p (all field numbers < 16,
// so every tag is one byte).
func partitionDataViewSize(p *internalv1.PartitionDataView) int {
	n := varintFieldSize(uint64(int64(p.Partition))) + varintFieldSize(uint64(int64(p.ErrorCode))) + stringFieldSize(p.ErrorMessage) +
		varintFieldSize(uint64(p.HighWatermark)) + varintFieldSize(uint64(p.LastStableOffset)) + varintFieldSize(uint64(p.LogStartOffset)) +
		varintFieldSize(uint64(p.NextFetchOffset))
	for _, a := range p.AbortedTransactions {
		n += messageFieldSize(a)
	}
	if p.CurrentLeader != nil {
		n += messageFieldSize(p.CurrentLeader)
	}
	for _, b := range p.Batches {
		n += 1 + protowire.SizeBytes(len(b))
	}
	return n
}
