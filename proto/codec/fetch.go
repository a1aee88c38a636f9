package codec

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
)

// Field numbers of sluice.internal.v1.FetchResponseView,
// FetchableTopicResponseView and PartitionDataView (view.proto).
const (
	frTopics         = 1
	frThrottleTimeMs = 2

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
	w := newPieces(meta, bufs)
	for _, t := range m.Topics {
		w.message(frTopics, fetchTopicSize(t))
		w.str(ftName, t.Name)
		for _, p := range t.Partitions {
			w.message(ftPartitions, partitionDataViewSize(p))
			w.varint(pdPartition, uint64(int64(p.Partition)))
			w.varint(pdErrorCode, uint64(int64(p.ErrorCode)))
			w.str(pdErrorMessage, p.ErrorMessage)
			w.varint(pdHighWatermark, uint64(p.HighWatermark))
			w.varint(pdLastStableOffset, uint64(p.LastStableOffset))
			w.varint(pdLogStartOffset, uint64(p.LogStartOffset))
			for _, a := range p.AbortedTransactions {
				if err := w.proto(pdAbortedTransactions, a); err != nil {
					return nil, err
				}
			}
			w.varint(pdNextFetchOffset, uint64(p.NextFetchOffset))
			if p.CurrentLeader != nil {
				if err := w.proto(pdCurrentLeader, p.CurrentLeader); err != nil {
					return nil, err
				}
			}
			for _, b := range p.Batches {
				w.batch(pdBatches, b)
			}
		}
	}
	w.varint(frThrottleTimeMs, uint64(int64(m.ThrottleTimeMs)))
	return w.finish(), nil
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
