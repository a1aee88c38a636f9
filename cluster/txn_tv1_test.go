package cluster

import (
	"fmt"
	"slices"
	"testing"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// Rule (decision 69, KIP-890 part 1): a TV1 producer's transactional
// produce (TxnProduce.VerifyOnly) asks the coordinator only to verify,
// once per transaction; its markers carry the data's epoch (TV1 rule:
// accepted at the same epoch, where the TV2 rule refuses), the producer's
// next transaction continues at that epoch and sequence, and a TV1 marker
// at an epoch below the producer's is INVALID_PRODUCER_EPOCH.
func TestAppendTxnVerifyOnlyAndTV1Markers(t *testing.T) {
	f := &fakeVerifier{}
	r, p := txnRig(t, f)
	const pid, tid = 41, "tv1"
	tp := TopicPartition{Topic: "s", Partition: 0}
	seq := int32(0)
	produce := func(value string) {
		t.Helper()
		res, err := r.m.AppendTxn(testCtx(t), p, TxnProduce{TransactionalID: tid, Batch: txnDataBatch(pid, 0, seq, value), Now: r.now, AcksAll: true, VerifyOnly: true})
		if err != nil {
			t.Fatalf("produce %s at sequence %d: %+v %v", value, seq, res, err)
		}
		seq++
	}
	for i, commit := range []bool{true, false, true} {
		produce(fmt.Sprint("a", i))
		produce(fmt.Sprint("b", i))
		if n := f.callCount(); n != i+1 {
			t.Fatalf("transaction %d: %d verifications, want one per transaction", i, n)
		}
		wantCode(t, "a TV2 check of the TV1 marker", r.m.WriteTxnMarker(testCtx(t), tp, TxnMarker{ProducerID: pid, ProducerEpoch: 0, Commit: commit}),
			sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH)
		if err := r.m.WriteTxnMarker(testCtx(t), tp, TxnMarker{ProducerID: pid, ProducerEpoch: 0, Commit: commit, Version: storage.MarkerTV1}); err != nil {
			t.Fatalf("transaction %d: TV1 marker: %v", i, err)
		}
	}
	want := []verifyCall{}
	for range 3 {
		want = append(want, verifyCall{tid, pid, 0, tp, true})
	}
	if got := f.callList(); !slices.Equal(got, want) {
		t.Fatalf("verifications %+v, want %+v", got, want)
	}
	if got := r.committedOffsets(t); !equalOffsets(got, []int64{0, 1}) {
		t.Fatalf("read_committed %v, want the first transaction's 0 1", got)
	}
	last := r.fetch(consumerFetch(FetchTxnCommitted, part("s", 6))).Partitions[0]
	if got := batchOffsets(t, last.Batches, true); last.Err != nil || !equalOffsets(got, []int64{6, 7}) {
		t.Fatalf("read_committed from 6: %v %v, want the third transaction's 6 7", got, last.Err)
	}
	// A coordinator fence aborts at epoch 1; a late TV1 marker at epoch 0
	// is stale.
	if err := r.m.WriteTxnMarker(testCtx(t), tp, TxnMarker{ProducerID: pid, ProducerEpoch: 1, Version: storage.MarkerTV1}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "stale TV1 marker", r.m.WriteTxnMarker(testCtx(t), tp, TxnMarker{ProducerID: pid, ProducerEpoch: 0, Commit: true, Version: storage.MarkerTV1}),
		sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH)
}

// Rule (decision 69): a TV1 producer this partition knows nothing of
// (its state expired here while it lived) is appended at its next
// sequence, whatever it is, as in Kafka; a TV2 producer's first batch
// must start at sequence 0.
func TestAppendTxnTV1UnknownProducerContinuesItsSequence(t *testing.T) {
	f := &fakeVerifier{}
	r, p := txnRig(t, f)
	_, err := r.m.AppendTxn(testCtx(t), p, TxnProduce{TransactionalID: "tv2", Batch: txnDataBatch(51, 0, 4, "tv2"), Now: r.now, AcksAll: true})
	wantCode(t, "an unknown TV2 producer at sequence 4", err, sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER)
	res, err := r.m.AppendTxn(testCtx(t), p, TxnProduce{TransactionalID: "tv1", Batch: txnDataBatch(52, 0, 4, "tv1"), Now: r.now, AcksAll: true, VerifyOnly: true})
	if err != nil || res.BaseOffset != 0 {
		t.Fatalf("an unknown TV1 producer at sequence 4: %+v %v; want appended at 0", res, err)
	}
}
