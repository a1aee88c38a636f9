package codec

import (
	"fmt"
	"unicode/utf8"

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
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed("ProduceRequest tag", n)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == prTransactionalID || num == prTopics):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return malformed("ProduceRequest bytes field", n)
			}
			b = b[n:]
			if num == prTransactionalID {
				if !utf8.Valid(v) {
					return fmt.Errorf("%w: ProduceRequest.transactional_id is not valid UTF-8", errMalformed)
				}
				m.TransactionalId = string(v)
				continue
			}
			t := &internalv1.TopicProduceDataView{}
			if err := decodeTopicProduceData(v, t); err != nil {
				return err
			}
			m.Topics = append(m.Topics, t)
		case typ == protowire.VarintType && (num == prAcks || num == prTimeoutMs):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return malformed("ProduceRequest varint field", n)
			}
			b = b[n:]
			if num == prAcks {
				m.Acks = sluicev1.Acks(int32(v))
			} else {
				m.TimeoutMs = int32(v)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return malformed("ProduceRequest unknown field", n)
			}
			b = b[n:]
		}
	}
	return nil
}

func decodeTopicProduceData(b []byte, t *internalv1.TopicProduceDataView) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed("TopicProduceData tag", n)
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == tpName || num == tpPartitions) {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return malformed("TopicProduceData bytes field", n)
			}
			b = b[n:]
			if num == tpName {
				if !utf8.Valid(v) {
					return fmt.Errorf("%w: TopicProduceData.name is not valid UTF-8", errMalformed)
				}
				t.Name = string(v)
				continue
			}
			p := &internalv1.PartitionProduceDataView{}
			if err := decodePartitionProduceData(v, p); err != nil {
				return err
			}
			t.Partitions = append(t.Partitions, p)
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return malformed("TopicProduceData unknown field", n)
		}
		b = b[n:]
	}
	return nil
}

func decodePartitionProduceData(b []byte, p *internalv1.PartitionProduceDataView) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed("PartitionProduceData tag", n)
		}
		b = b[n:]
		switch {
		case num == ppPartition && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return malformed("PartitionProduceData.partition", n)
			}
			p.Partition = int32(v)
			b = b[n:]
		case num == ppBatch && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return malformed("PartitionProduceData.batch", n)
			}
			p.Batch = v[:len(v):len(v)]
			b = b[n:]
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return malformed("PartitionProduceData unknown field", n)
			}
			b = b[n:]
		}
	}
	return nil
}
