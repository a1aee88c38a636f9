package codec

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Field numbers of sluice.internal.v1.ReplicaFetchResponse and
// ReplicaFetchPartitionData (replica.proto).
const (
	rfrPartitions = 1

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
// message (Log.Read's batches never do).
func marshalReplicaFetchResponse(m *internalv1.ReplicaFetchResponse) mem.BufferSlice {
	// The non-batch bytes: at most 64 bytes of tags, lengths and scalars
	// per partition besides its strings, and 11 bytes of tag and length
	// per batch.
	meta := 0
	for _, p := range m.Partitions {
		meta += 64 + len(p.Topic) + len(p.ErrorMessage) + 11*len(p.Batches)
	}
	buf := make([]byte, 0, meta)
	var out mem.BufferSlice
	start := 0 // of the bytes of buf not yet in out
	for _, p := range m.Partitions {
		buf = protowire.AppendTag(buf, rfrPartitions, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(partitionDataSize(p)))
		if p.Topic != "" {
			buf = protowire.AppendTag(buf, rfpTopic, protowire.BytesType)
			buf = protowire.AppendString(buf, p.Topic)
		}
		buf = appendVarintField(buf, rfpPartition, uint64(int64(p.Partition)))
		buf = appendVarintField(buf, rfpErrorCode, uint64(int64(p.ErrorCode)))
		if p.ErrorMessage != "" {
			buf = protowire.AppendTag(buf, rfpErrorMessage, protowire.BytesType)
			buf = protowire.AppendString(buf, p.ErrorMessage)
		}
		buf = appendVarintField(buf, rfpHighWatermark, uint64(p.HighWatermark))
		buf = appendVarintField(buf, rfpLogStartOffset, uint64(p.LogStartOffset))
		buf = appendVarintField(buf, rfpLogEndOffset, uint64(p.LogEndOffset))
		for _, b := range p.Batches {
			buf = protowire.AppendTag(buf, rfpBatches, protowire.BytesType)
			buf = protowire.AppendVarint(buf, uint64(len(b)))
			if len(b) == 0 {
				continue
			}
			out = append(out, mem.SliceBuffer(buf[start:len(buf):len(buf)]), mem.SliceBuffer(b))
			start = len(buf)
		}
	}
	if start < len(buf) {
		out = append(out, mem.SliceBuffer(buf[start:]))
	}
	return out
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
	r.Partitions = nil
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

var errMalformed = errors.New("codec: malformed message")

func malformed(what string, n int) error {
	return fmt.Errorf("%w: %s: %v", errMalformed, what, protowire.ParseError(n))
}

func decodeReplicaFetchResponse(b []byte, m *internalv1.ReplicaFetchResponse) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed("ReplicaFetchResponse tag", n)
		}
		b = b[n:]
		if num == rfrPartitions && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return malformed("ReplicaFetchResponse.partitions", n)
			}
			p := &internalv1.ReplicaFetchPartitionData{}
			if err := decodeReplicaFetchPartitionData(v, p); err != nil {
				return err
			}
			m.Partitions = append(m.Partitions, p)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return malformed("ReplicaFetchResponse unknown field", n)
		}
		b = b[n:]
	}
	return nil
}

func decodeReplicaFetchPartitionData(b []byte, p *internalv1.ReplicaFetchPartitionData) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed("ReplicaFetchPartitionData tag", n)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == rfpTopic || num == rfpErrorMessage || num == rfpBatches):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return malformed("ReplicaFetchPartitionData bytes field", n)
			}
			b = b[n:]
			switch num {
			case rfpTopic:
				if !utf8.Valid(v) {
					return fmt.Errorf("%w: ReplicaFetchPartitionData.topic is not valid UTF-8", errMalformed)
				}
				p.Topic = string(v)
			case rfpErrorMessage:
				if !utf8.Valid(v) {
					return fmt.Errorf("%w: ReplicaFetchPartitionData.error_message is not valid UTF-8", errMalformed)
				}
				p.ErrorMessage = string(v)
			default:
				p.Batches = append(p.Batches, v[:len(v):len(v)])
			}
		case typ == protowire.VarintType && num >= rfpPartition && num <= rfpLogEndOffset && num != rfpErrorMessage:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return malformed("ReplicaFetchPartitionData varint field", n)
			}
			b = b[n:]
			switch num {
			case rfpPartition:
				p.Partition = int32(v)
			case rfpErrorCode:
				p.ErrorCode = sluicev1.ErrorCode(int32(v))
			case rfpHighWatermark:
				p.HighWatermark = int64(v)
			case rfpLogStartOffset:
				p.LogStartOffset = int64(v)
			case rfpLogEndOffset:
				p.LogEndOffset = int64(v)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return malformed("ReplicaFetchPartitionData unknown field", n)
			}
			b = b[n:]
		}
	}
	return nil
}
