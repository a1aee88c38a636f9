package codec

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The hand-written encoding of a consumer's fetch answer is byte for byte
// what deterministic proto.Marshal produces.
func TestFetchResponseEncodingMatchesProtoMarshal(t *testing.T) {
	big := bytes.Repeat([]byte{5}, 30_000)
	msgs := map[string]*internalv1.FetchResponseView{
		"empty":           {},
		"topic, no parts": {Topics: []*internalv1.FetchableTopicResponseView{{Name: "t"}}},
		"error with hint": {Topics: []*internalv1.FetchableTopicResponseView{{Name: "t", Partitions: []*internalv1.PartitionDataView{
			{Partition: 2, ErrorCode: sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, ErrorMessage: "moved", HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1,
				CurrentLeader: &sluicev1.LeaderHint{LeaderId: 3, LeaderEpoch: 9, Address: "10.0.0.3:9092"}},
			{Partition: 3, CurrentLeader: &sluicev1.LeaderHint{}},
		}}}},
		"batches": {Topics: []*internalv1.FetchableTopicResponseView{
			{Name: "a", Partitions: []*internalv1.PartitionDataView{{Partition: 0, HighWatermark: 1 << 40, LastStableOffset: 1<<40 - 3, LogStartOffset: 7,
				AbortedTransactions: []*sluicev1.AbortedTransaction{{ProducerId: 1000, FirstOffset: 12}, {ProducerId: 0, FirstOffset: 0}},
				NextFetchOffset:     1<<40 + 1, Batches: [][]byte{[]byte("one"), {}, big}}}},
			{Name: "", Partitions: []*internalv1.PartitionDataView{{Partition: -1, Batches: [][]byte{big[:10]}}}},
		}},
		"throttled": {ThrottleTimeMs: 1500, Topics: []*internalv1.FetchableTopicResponseView{{Name: "t", Partitions: []*internalv1.PartitionDataView{
			{Partition: 1, Batches: [][]byte{[]byte("x")}}}}}},
	}
	for name, m := range msgs {
		t.Run(name, func(t *testing.T) {
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Codec{}.Marshal(&OutgoingFetchResponse{FetchResponseView: m})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Materialize(), want) {
				t.Fatalf("encoding differs from proto.Marshal:\n got %x\nwant %x", got.Materialize(), want)
			}
			got.Free()
		})
	}
}

// A fetch answer's batches read into BatchBuffers are referenced, and the
// buffers go back to the pool once the encoding is freed: Marshal itself
// drops the handler's references (a unary answer is encoded once).
func TestFetchResponseEncodingKeepsReadBuffersUntilWritten(t *testing.T) {
	pool := &countingPool{}
	bufs := &BatchBuffers{Pool: pool}
	a := bufs.Alloc(12_000)
	for i := range a {
		a[i] = byte(i * 7)
	}
	_ = bufs.Alloc(5_000) // read into but left out of the answer
	m := &internalv1.FetchResponseView{Topics: []*internalv1.FetchableTopicResponseView{{Name: "t", Partitions: []*internalv1.PartitionDataView{
		{Partition: 1, HighWatermark: 9, Batches: [][]byte{a[:6_000], a[6_000:11_000]}}}}}}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Codec{}.Marshal(&OutgoingFetchResponse{FetchResponseView: m, Buffers: bufs})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Materialize(), want) {
		t.Fatal("encoding differs from proto.Marshal")
	}
	if n := pool.returned(); n != 1 {
		t.Fatalf("%d buffers back after Marshal, want 1 (the unused one)", n)
	}
	got.Free()
	if n := pool.returned(); n != 2 {
		t.Fatalf("%d buffers back once written, want 2", n)
	}
}
