package api_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Produce with transactional_id (DESIGN §10, decision 33): each
// partition's first batch of a transaction is verified with the node's
// TxnVerifier (here a fake coordinator), the partitions of one request
// concurrently; the markers then decide what read_committed sees.

// txnBatchOf is a transactional batch of producer id/epoch from sequence
// seq, one record per value.
func txnBatchOf(id int64, epoch, seq int32, values ...string) []byte {
	var b batch.Builder
	b.Reset(1000)
	for _, v := range values {
		b.Add(1000, nil, []byte(v), nil)
	}
	return b.Finish(batch.Producer{ID: id, Epoch: epoch, BaseSequence: seq}, batch.AttrTransactional)
}

// barrierVerifier is a fake coordinator that adds a partition only once
// `want` AddPartition calls are in progress together (or ctx ends:
// REQUEST_TIMED_OUT), so a request whose partitions were verified one
// after another would time out.
type barrierVerifier struct {
	want int
	mu   sync.Mutex
	n    int
	all  chan struct{}
	seen []cluster.TopicPartition
}

func newBarrierVerifier(want int) *barrierVerifier {
	return &barrierVerifier{want: want, all: make(chan struct{})}
}

func (v *barrierVerifier) AddPartition(ctx context.Context, transactionalID string, producerID int64, producerEpoch int16, tp cluster.TopicPartition, verifyOnly bool) error {
	v.mu.Lock()
	v.seen = append(v.seen, tp)
	v.n++
	if v.n == v.want {
		close(v.all)
	}
	v.mu.Unlock()
	select {
	case <-v.all:
		return nil
	case <-ctx.Done():
		return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "partitions were not verified together")
	}
}

func (v *barrierVerifier) calls() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.seen)
}

// produceTxn sends one batch per partition of topic with transactionalID
// through the server view, as a client's raw request.
func (tn *testNode) produceTxn(transactionalID, topic string, batches map[int32][]byte) map[int32]*sluicev1.PartitionProduceResponse {
	tn.t.Helper()
	td := &internalv1.TopicProduceDataView{Name: topic}
	for p, b := range batches {
		td.Partitions = append(td.Partitions, &internalv1.PartitionProduceDataView{Partition: p, Batch: b})
	}
	req := &internalv1.ProduceRequestView{Acks: sluicev1.Acks_ACKS_ALL, TimeoutMs: 10_000, TransactionalId: transactionalID, Topics: []*internalv1.TopicProduceDataView{td}}
	resp := &sluicev1.ProduceResponse{}
	if err := tn.conn.Invoke(ctx(tn.t), "/sluice.v1.Log/Produce", req, resp); err != nil {
		tn.t.Fatal(err)
	}
	out := map[int32]*sluicev1.PartitionProduceResponse{}
	for _, p := range resp.Topics[0].Partitions {
		out[p.Partition] = p
	}
	return out
}

func (tn *testNode) writeMarker(topic string, partition int32, mk cluster.TxnMarker) {
	tn.t.Helper()
	if err := tn.node.Replicas().WriteTxnMarker(ctx(tn.t), cluster.TopicPartition{Topic: topic, Partition: partition}, mk); err != nil {
		tn.t.Fatal(err)
	}
}

// A transactional request over two partitions: both are verified at the
// same time (the barrier needs both calls in flight), both batches are
// stored, hidden from read_committed until the COMMIT markers; the next
// transaction's batches, once aborted, stay hidden; the batches of the
// open transaction need no second verification.
func TestProduceWithTransactionalID(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("tx", 2, nil)
	v := newBarrierVerifier(2)
	tn.node.Replicas().SetTxnVerifier(v)
	id, _ := initProducerID(t, tn)

	got := tn.produceTxn("orders", "tx", map[int32][]byte{0: txnBatchOf(id, 0, 0, "a0"), 1: txnBatchOf(id, 0, 0, "b0")})
	for p, r := range got {
		if r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 0 {
			t.Fatalf("partition %d: %v", p, r)
		}
	}
	// Later batches of the open transaction go straight in.
	got = tn.produceTxn("orders", "tx", map[int32][]byte{0: txnBatchOf(id, 0, 1, "a1"), 1: txnBatchOf(id, 0, 1, "b1")})
	for p, r := range got {
		if r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 1 {
			t.Fatalf("second batch, partition %d: %v", p, r)
		}
	}
	if n := v.calls(); n != 2 {
		t.Fatalf("%d verifications, want 2 (one per partition)", n)
	}
	if vals := values(tn.fetch("tx", 0, 0, 0), 0); len(vals) != 0 {
		t.Fatalf("read_committed sees %v of an open transaction", vals)
	}
	for p := int32(0); p < 2; p++ {
		tn.writeMarker("tx", p, cluster.TxnMarker{ProducerID: id, ProducerEpoch: 1, Commit: true})
	}
	if vals := values(tn.fetch("tx", 0, 0, 0), 0); fmt.Sprint(vals) != "[a0 a1]" {
		t.Fatalf("read_committed after the commit: %v", vals)
	}

	// The next transaction (epoch 1) on partition 1 alone, aborted.
	v2 := newBarrierVerifier(1)
	tn.node.Replicas().SetTxnVerifier(v2)
	if r := tn.produceTxn("orders", "tx", map[int32][]byte{1: txnBatchOf(id, 1, 0, "x")})[1]; r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 3 {
		t.Fatalf("next transaction: %v", r)
	}
	tn.writeMarker("tx", 1, cluster.TxnMarker{ProducerID: id, ProducerEpoch: 2})
	if vals := values(tn.fetch("tx", 1, 0, 0), 0); fmt.Sprint(vals) != "[b0 b1]" {
		t.Fatalf("read_committed after the abort: %v, want the committed b0 b1 only", vals)
	}
	if v2.calls() != 1 {
		t.Fatalf("%d verifications of the next transaction, want 1", v2.calls())
	}
}

// Mixed-up inputs are refused per partition with nothing stored: a
// non-transactional batch in a transactional request (INVALID_RECORD), a
// transactional batch without transactional_id (INVALID_TXN_STATE). A
// coordinator that fences the producer answers INVALID_PRODUCER_EPOCH.
func TestProduceTransactionalInputRefused(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("tx", 1, nil)
	tn.node.Replicas().SetTxnVerifier(fencingVerifier{})
	id, epoch := initProducerID(t, tn)
	if r := tn.produceTxn("orders", "tx", map[int32][]byte{0: idemBatch(id, epoch, 0, 1)})[0]; r.ErrorCode != sluicev1.ErrorCode_INVALID_RECORD {
		t.Errorf("idempotent batch with transactional_id: %v", r)
	}
	if r := tn.produceRaw("tx", 0, txnBatchOf(id, epoch, 0, "x")); r.ErrorCode != sluicev1.ErrorCode_INVALID_TXN_STATE {
		t.Errorf("transactional batch without transactional_id: %v", r)
	}
	if r := tn.produceTxn("orders", "tx", map[int32][]byte{0: txnBatchOf(id, epoch, 0, "x")})[0]; r.ErrorCode != sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH {
		t.Errorf("fenced producer: %v", r)
	}
	part, err := tn.node.Replicas().Replica("tx", 0)
	if err != nil {
		t.Fatal(err)
	}
	if end := part.LogEndOffset(); end != 0 {
		t.Fatalf("refused batches stored: log end %d", end)
	}
}

type fencingVerifier struct{}

func (fencingVerifier) AddPartition(context.Context, string, int64, int16, cluster.TopicPartition, bool) error {
	return errs.New(sluicev1.ErrorCode_PRODUCER_FENCED, "a newer producer has this transactional id")
}

// ProduceStream takes transactional requests too, each verified before
// the next request is read.
func TestProduceStreamWithTransactionalID(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("tx", 1, nil)
	v := newBarrierVerifier(1)
	tn.node.Replicas().SetTxnVerifier(v)
	id, epoch := initProducerID(t, tn)
	st, err := tn.log.ProduceStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for seq := int32(0); seq < 2; seq++ {
		var rb sluicev1.RecordBatch
		if err := proto.Unmarshal(txnBatchOf(id, epoch, seq, fmt.Sprint("s", seq)), &rb); err != nil {
			t.Fatal(err)
		}
		req := &sluicev1.ProduceRequest{Acks: sluicev1.Acks_ACKS_ALL, TimeoutMs: 10_000, TransactionalId: "streamed",
			Topics: []*sluicev1.TopicProduceData{{Name: "tx", Partitions: []*sluicev1.PartitionProduceData{{Partition: 0, Batch: &rb}}}}}
		if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: int64(seq), Request: req}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		p := r.GetResponse().GetTopics()[0].GetPartitions()[0]
		if p.ErrorCode != sluicev1.ErrorCode_NONE || p.BaseOffset != r.CorrelationId {
			t.Fatalf("request %d: %v", r.CorrelationId, r)
		}
	}
	if n := v.calls(); n != 1 {
		t.Fatalf("%d verifications, want 1", n)
	}
	tn.writeMarker("tx", 0, cluster.TxnMarker{ProducerID: id, ProducerEpoch: int16(epoch) + 1, Commit: true})
	if vals := values(tn.fetch("tx", 0, 0, 0), 0); fmt.Sprint(vals) != "[s0 s1]" {
		t.Fatalf("read_committed after the commit: %v", vals)
	}
}
