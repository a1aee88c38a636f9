package codec

import (
	"bytes"
	"testing"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func replicaFetchResponses() map[string]*internalv1.ReplicaFetchResponse {
	big := bytes.Repeat([]byte{7}, 40_000)
	return map[string]*internalv1.ReplicaFetchResponse{
		"empty":                  {},
		"partition without data": {Partitions: []*internalv1.ReplicaFetchPartitionData{{Topic: "t", HighWatermark: -1, LogStartOffset: -1, LogEndOffset: -1}}},
		"error": {Partitions: []*internalv1.ReplicaFetchPartitionData{{Topic: "t", Partition: 3, ErrorCode: sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE,
			ErrorMessage: "offset 9 is outside the log [10, 20]", HighWatermark: -1, LogStartOffset: 10, LogEndOffset: 20}}},
		"batches": {Partitions: []*internalv1.ReplicaFetchPartitionData{
			{Topic: "topic-a", Partition: 0, HighWatermark: 1 << 40, LogStartOffset: 0, LogEndOffset: 1<<40 + 5, Batches: [][]byte{[]byte("one"), {}, big, []byte("three")}},
			{Topic: "topic-b", Partition: 1 << 30, HighWatermark: 5, Batches: [][]byte{big[:300]}},
			{Topic: "", Partition: -2, ErrorCode: sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER},
		}, SessionId: 1 << 30},
		"session error": {ErrorCode: sluicev1.ErrorCode_INVALID_FETCH_SESSION_EPOCH, ErrorMessage: "epoch 3, expected 4", SessionId: -7},
	}
}

func concat(s mem.BufferSlice) []byte { return s.Materialize() }

// The hand-written encoding of ReplicaFetchResponse is byte for byte what
// deterministic proto.Marshal produces.
func TestReplicaFetchResponseEncodingMatchesProtoMarshal(t *testing.T) {
	for name, m := range replicaFetchResponses() {
		t.Run(name, func(t *testing.T) {
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Codec{}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(concat(got), want) {
				t.Fatalf("encoding differs from proto.Marshal:\n got %x\nwant %x", concat(got), want)
			}
		})
	}
}

// The batches of an encoded ReplicaFetchResponse are not copied: the
// BufferSlice holds the batch slices themselves.
func TestReplicaFetchResponseEncodingDoesNotCopyBatches(t *testing.T) {
	b := bytes.Repeat([]byte{1}, 5000)
	m := &internalv1.ReplicaFetchResponse{Partitions: []*internalv1.ReplicaFetchPartitionData{{Topic: "t", Batches: [][]byte{b}}}}
	got, err := Codec{}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, piece := range got {
		if d := piece.ReadOnlyData(); len(d) == len(b) && unsafe.SliceData(d) == unsafe.SliceData(b) {
			return
		}
	}
	t.Fatal("no piece of the encoding is the batch itself")
}

// inside reports whether b lies inside buf (an empty b is anywhere).
func inside(b, buf []byte) bool {
	_, ok := within(buf, b)
	return ok || len(b) == 0
}

// Decoding a ReplicaFetchResponse in place gives what proto.Unmarshal
// gives, with the batches slices of the received buffer.
func TestReplicaFetchResponseDecodesInPlace(t *testing.T) {
	for name, m := range replicaFetchResponses() {
		t.Run(name, func(t *testing.T) {
			wire, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			// An unknown field (number 99) must be skipped, as proto does.
			wire = protowire.AppendTag(wire, 99, protowire.BytesType)
			wire = protowire.AppendString(wire, "future")
			buf := mem.Copy(wire, DefaultPool)
			got := &ReplicaFetchResponse{}
			if err := (Codec{}).Unmarshal(mem.BufferSlice{buf}, got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got.ReplicaFetchResponse, m) {
				t.Fatalf("decoded %v, want %v", &got.ReplicaFetchResponse, m)
			}
			for _, p := range got.Partitions {
				for _, b := range p.Batches {
					if !inside(b, buf.ReadOnlyData()) {
						t.Fatal("a batch was copied out of the received buffer")
					}
				}
			}
			got.Release()
			got.Release() // a second release is a no-op
		})
	}
}

func produceRequest() *internalv1.ProduceRequestView {
	return &internalv1.ProduceRequestView{TransactionalId: "tx", Acks: sluicev1.Acks_ACKS_LEADER, TimeoutMs: 1500, Topics: []*internalv1.TopicProduceDataView{
		{Name: "a", Partitions: []*internalv1.PartitionProduceDataView{{Partition: 0, Batch: []byte("batch-0")}, {Partition: 2, Batch: bytes.Repeat([]byte{9}, 20_000)}}},
		{Name: "b", Partitions: []*internalv1.PartitionProduceDataView{{Partition: -1}}},
	}}
}

// Decoding a produce request in place gives what proto.Unmarshal gives,
// from one received buffer or several (materialized into one).
func TestProduceRequestDecodesInPlace(t *testing.T) {
	m := produceRequest()
	wire, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	wire = protowire.AppendTag(wire, 77, protowire.VarintType)
	wire = protowire.AppendVarint(wire, 5)
	for _, pieces := range []int{1, 3} {
		var data mem.BufferSlice
		step := (len(wire) + pieces - 1) / pieces
		for i := 0; i < len(wire); i += step {
			data = append(data, mem.Copy(wire[i:min(i+step, len(wire))], DefaultPool))
		}
		got := &ProduceRequest{}
		if err := (Codec{}).Unmarshal(data, got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got.ProduceRequestView, m) {
			t.Fatalf("%d pieces: decoded %v, want %v", pieces, &got.ProduceRequestView, m)
		}
		if pieces == 1 && !inside(got.Topics[0].Partitions[1].Batch, data[0].ReadOnlyData()) {
			t.Fatal("the batch was copied out of the received buffer")
		}
		got.Release()
		data.Free()
	}
}

// A ProduceStreamRequest (the public message, as a client sends it)
// decodes in place to its correlation id and request view; a cut one is
// an error.
func TestProduceStreamRequestDecodesInPlace(t *testing.T) {
	m := &internalv1.ProduceStreamRequestView{CorrelationId: 1 << 40, Request: produceRequest()}
	wire, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	// (The test batches are not RecordBatch messages: compare the framing
	// on a request without them.)
	plain, _ := proto.Marshal(&internalv1.ProduceStreamRequestView{CorrelationId: 7, Request: &internalv1.ProduceRequestView{
		Acks: sluicev1.Acks_ACKS_LEADER, Topics: []*internalv1.TopicProduceDataView{{Name: "a"}}}})
	var pub sluicev1.ProduceStreamRequest
	if err := proto.Unmarshal(plain, &pub); err != nil || pub.CorrelationId != 7 || pub.Request.GetAcks() != sluicev1.Acks_ACKS_LEADER || pub.Request.GetTopics()[0].GetName() != "a" {
		t.Fatalf("not wire-compatible with sluice.v1.ProduceStreamRequest: %v %v", err, &pub)
	}
	data := mem.BufferSlice{mem.Copy(wire, DefaultPool)}
	got := &ProduceStreamRequest{}
	if err := (Codec{}).Unmarshal(data, got); err != nil {
		t.Fatal(err)
	}
	if got.CorrelationID != m.CorrelationId || !proto.Equal(&got.Request, m.Request) {
		t.Fatalf("decoded %d %v, want %d %v", got.CorrelationID, &got.Request, m.CorrelationId, m.Request)
	}
	if !inside(got.Request.Topics[0].Partitions[1].Batch, data[0].ReadOnlyData()) {
		t.Fatal("the batch was copied out of the received buffer")
	}
	got.Release()
	got.Release()
	data.Free()
	for _, cut := range []int{1, len(wire) / 2, len(wire) - 1} {
		if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire[:cut])}, &ProduceStreamRequest{}); err == nil {
			t.Errorf("cut at %d of %d bytes: no error", cut, len(wire))
		}
	}
}

// Truncated or malformed input is an error, never a partial message
// taken as whole.
func TestAliasedDecodingRejectsMalformedInput(t *testing.T) {
	wire, err := proto.Marshal(produceRequest())
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{1, 5, len(wire) / 2, len(wire) - 1} {
		if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire[:cut])}, &ProduceRequest{}); err == nil {
			t.Errorf("produce request cut at %d of %d bytes: no error", cut, len(wire))
		}
	}
	rw, err := proto.Marshal(replicaFetchResponses()["batches"])
	if err != nil {
		t.Fatal(err)
	}
	if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(rw[:len(rw)-3])}, &ReplicaFetchResponse{}); err == nil {
		t.Error("truncated replica fetch response: no error")
	}
	bad := protowire.AppendTag(nil, tpName, protowire.BytesType)
	bad = protowire.AppendBytes(bad, []byte{0xff, 0xfe})
	req := protowire.AppendTag(nil, prTopics, protowire.BytesType)
	req = protowire.AppendBytes(req, bad)
	if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(req)}, &ProduceRequest{}); err == nil {
		t.Error("topic name that is not UTF-8: no error")
	}
}

// Other messages round-trip through proto as with gRPC's own codec.
func TestOtherMessagesRoundTrip(t *testing.T) {
	m := &sluicev1.ProduceResponse{Topics: []*sluicev1.TopicProduceResponse{{Name: "x", Partitions: []*sluicev1.PartitionProduceResponse{{Partition: 1, BaseOffset: 42, ErrorMessage: string(bytes.Repeat([]byte("e"), 3000))}}}}}
	data, err := Codec{}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := &sluicev1.ProduceResponse{}
	if err := (Codec{}).Unmarshal(data, got); err != nil {
		t.Fatal(err)
	}
	data.Free()
	if !proto.Equal(got, m) {
		t.Fatalf("round trip gave %v, want %v", got, m)
	}
	if _, err := (Codec{}).Marshal(struct{}{}); err == nil {
		t.Error("marshaling a non-message: no error")
	}
}

func TestPoolSizes(t *testing.T) {
	p := &Pool{}
	for _, size := range []int{0, 1, 256, 257, 4096, 16 << 10, 1<<20 + 1, 16 << 20} {
		b := p.Get(size)
		if len(*b) != size {
			t.Errorf("Get(%d) has length %d", size, len(*b))
		}
		if c := cap(*b); c < size || c&(c-1) != 0 {
			t.Errorf("Get(%d) has capacity %d, want a power of two >= the size", size, c)
		}
		p.Put(b)
	}
	if b := p.Get(16<<20 + 1); len(*b) != 16<<20+1 {
		t.Errorf("Get above the largest tier has length %d", len(*b))
	}
	odd := make([]byte, 1000)
	p.Put(&odd) // not a pooled capacity: dropped, never handed out
	if b := p.Get(1000); cap(*b) != 1024 {
		t.Errorf("Get(1000) has capacity %d after a foreign Put, want 1024", cap(*b))
	}
}
