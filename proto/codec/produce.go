package codec

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Field numbers of sluice.internal.v1.ProduceRequestView,
// TopicProduceDataView and PartitionProduceDataView (view.proto).
const (
	prTransactionalID = 1
	prAcks            = 2
	prTimeoutMs       = 3
	prTopics          = 4

	tpName       = 1
	tpPartitions = 2

	ppPartition = 1
	ppBatch     = 2
)

// ProduceRequest is a sluice.internal.v1.ProduceRequestView that Codec
// decodes in place: each partition's Batch is a slice of the received
// buffer, which the broker may patch in place (base offset, leader epoch)
// while appending. Call Release once the batches are no longer used (the
// log's appends copy them); a request never released is left to the
// garbage collector.
type ProduceRequest struct {
	internalv1.ProduceRequestView
	buf mem.Buffer
}

// UnmarshalAliased implements AliasUnmarshaler.
func (r *ProduceRequest) UnmarshalAliased(buf mem.Buffer) error {
	r.Release()
	r.buf = buf
	r.TransactionalId, r.Acks, r.TimeoutMs, r.Topics = "", 0, 0, nil
	if err := decodeProduceRequest(buf.ReadOnlyData(), &r.ProduceRequestView); err != nil {
		r.Release()
		return err
	}
	return nil
}

// Release gives the received buffer back; the batches must not be used
// afterwards. Safe to call more than once.
func (r *ProduceRequest) Release() {
	if r.buf != nil {
		r.buf.Free()
		r.buf = nil
	}
}

func decodeProduceRequest(b []byte, m *internalv1.ProduceRequestView) error {
	return walk(b, "ProduceRequest", func(f field) (err error) {
		switch {
		case f.is(prTransactionalID, protowire.BytesType):
			m.TransactionalId, err = f.utf8("ProduceRequest.transactional_id")
		case f.is(prTopics, protowire.BytesType):
			t := &internalv1.TopicProduceDataView{}
			err = decodeTopicProduceData(f.bytes, t)
			m.Topics = append(m.Topics, t)
		case f.is(prAcks, protowire.VarintType):
			m.Acks = sluicev1.Acks(int32(f.varint))
		case f.is(prTimeoutMs, protowire.VarintType):
			m.TimeoutMs = int32(f.varint)
		}
		return err
	})
}

func decodeTopicProduceData(b []byte, t *internalv1.TopicProduceDataView) error {
	return walk(b, "TopicProduceData", func(f field) (err error) {
		switch {
		case f.is(tpName, protowire.BytesType):
			t.Name, err = f.utf8("TopicProduceData.name")
		case f.is(tpPartitions, protowire.BytesType):
			p := &internalv1.PartitionProduceDataView{}
			err = decodePartitionProduceData(f.bytes, p)
			t.Partitions = append(t.Partitions, p)
		}
		return err
	})
}

func decodePartitionProduceData(b []byte, p *internalv1.PartitionProduceDataView) error {
	return walk(b, "PartitionProduceData", func(f field) error {
		switch {
		case f.is(ppPartition, protowire.VarintType):
			p.Partition = int32(f.varint)
		case f.is(ppBatch, protowire.BytesType):
			p.Batch = f.bytes
		}
		return nil
	})
}

// Field numbers of sluice.v1.ProduceStreamRequest (sluice.proto).
const (
	psCorrelationID = 1
	psRequest       = 2
)

// ProduceStreamRequest is a sluice.v1.ProduceStreamRequest that Codec
// decodes in place, as ProduceRequest: Request's batches are slices of the
// received buffer. Call Release once they are no longer used.
type ProduceStreamRequest struct {
	CorrelationID int64
	Request       internalv1.ProduceRequestView
	buf           mem.Buffer
}

// UnmarshalAliased implements AliasUnmarshaler.
func (r *ProduceStreamRequest) UnmarshalAliased(buf mem.Buffer) error {
	r.Release()
	r.buf = buf
	r.CorrelationID = 0
	r.Request.TransactionalId, r.Request.Acks, r.Request.TimeoutMs, r.Request.Topics = "", 0, 0, nil
	err := walk(buf.ReadOnlyData(), "ProduceStreamRequest", func(f field) error {
		switch {
		case f.is(psCorrelationID, protowire.VarintType):
			r.CorrelationID = int64(f.varint)
		case f.is(psRequest, protowire.BytesType):
			// A repeated message field merges: later occurrences add topics.
			return decodeProduceRequest(f.bytes, &r.Request)
		}
		return nil
	})
	if err != nil {
		r.Release()
	}
	return err
}

// Release gives the received buffer back; the batches must not be used
// afterwards. Safe to call more than once.
func (r *ProduceStreamRequest) Release() {
	if r.buf != nil {
		r.buf.Free()
		r.buf = nil
	}
}

// marshalProduceStreamRequest encodes m exactly as deterministic
// proto.Marshal would, but without copying the batches: the result
// alternates pieces of one small buffer holding everything else with the
// batches (references to bufs' buffers where they lie in one, see
// BatchBuffers). The batches must not change until gRPC has written the
// message.
func marshalProduceStreamRequest(m *internalv1.ProduceStreamRequestView, bufs *BatchBuffers) mem.BufferSlice {
	meta := 32
	if r := m.Request; r != nil {
		meta += 32 + len(r.TransactionalId)
		for _, t := range r.Topics {
			meta += 16 + len(t.Name) + 32*len(t.Partitions)
		}
	}
	w := newPieces(meta, bufs)
	w.varint(psCorrelationID, uint64(m.CorrelationId))
	r := m.Request
	if r == nil {
		return w.finish()
	}
	w.message(psRequest, produceRequestSize(r))
	w.str(prTransactionalID, r.TransactionalId)
	w.varint(prAcks, uint64(int64(r.Acks)))
	w.varint(prTimeoutMs, uint64(int64(r.TimeoutMs)))
	for _, t := range r.Topics {
		w.message(prTopics, topicProduceDataSize(t))
		w.str(tpName, t.Name)
		for _, p := range t.Partitions {
			w.message(tpPartitions, partitionProduceDataSize(p))
			w.varint(ppPartition, uint64(int64(p.Partition)))
			if len(p.Batch) > 0 { // a singular bytes field: proto3 leaves it out when empty
				w.batch(ppBatch, p.Batch)
			}
		}
	}
	return w.finish()
}

func produceRequestSize(r *internalv1.ProduceRequestView) int {
	n := stringFieldSize(r.TransactionalId) + varintFieldSize(uint64(int64(r.Acks))) + varintFieldSize(uint64(int64(r.TimeoutMs)))
	for _, t := range r.Topics {
		n += 1 + protowire.SizeBytes(topicProduceDataSize(t))
	}
	return n
}

func topicProduceDataSize(t *internalv1.TopicProduceDataView) int {
	n := stringFieldSize(t.Name)
	for _, p := range t.Partitions {
		n += 1 + protowire.SizeBytes(partitionProduceDataSize(p))
	}
	return n
}

func partitionProduceDataSize(p *internalv1.PartitionProduceDataView) int {
	n := varintFieldSize(uint64(int64(p.Partition)))
	if len(p.Batch) > 0 {
		n += 1 + protowire.SizeBytes(len(p.Batch))
	}
	return n
}
