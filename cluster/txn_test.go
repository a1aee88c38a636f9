package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Tests of the partition side of transactions (txn.go) on a real
// in-process ReplicaManager, with a fake TxnVerifier standing in for the
// coordinator: the first batch of a transaction on a partition is
// verified, later ones are not; coordinator refusals store nothing;
// retriable answers are retried; a marker crossing the verification
// refuses the batch; markers are fenced by coordinator epoch; and the
// committed or aborted data is then seen or hidden by read_committed.

// verifyCall is one AddPartition call the fake saw.
type verifyCall struct {
	transactionalID string
	producerID      int64
	epoch           int16
	tp              TopicPartition
	verifyOnly      bool
}

// fakeVerifier answers AddPartition from a script: the i-th call gets
// answers[i] (nil beyond the script), after running during(i) if set.
type fakeVerifier struct {
	mu      sync.Mutex
	calls   []verifyCall
	answers []error
	during  func(call int)
	// always, if set, answers every call beyond the script.
	always error
}

func (f *fakeVerifier) AddPartition(ctx context.Context, transactionalID string, producerID int64, producerEpoch int16, tp TopicPartition, verifyOnly bool) error {
	f.mu.Lock()
	i := len(f.calls)
	f.calls = append(f.calls, verifyCall{transactionalID, producerID, producerEpoch, tp, verifyOnly})
	var answer error
	if i < len(f.answers) {
		answer = f.answers[i]
	} else {
		answer = f.always
	}
	during := f.during
	f.mu.Unlock()
	if during != nil {
		during(i)
	}
	return answer
}

func (f *fakeVerifier) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeVerifier) callList() []verifyCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// txnRig is a read rig (node 2 alone leads s-0) with a fake verifier.
func txnRig(t *testing.T, f *fakeVerifier) (*readRig, *Replica) {
	r := newReadRig(t)
	if f != nil {
		r.m.SetTxnVerifier(f)
	}
	p, err := r.m.Replica("s", 0)
	if err != nil {
		t.Fatal(err)
	}
	return r, p
}

func (r *readRig) appendTxn(t *testing.T, p *Replica, tid string, pid int64, epoch, seq int32, value string) (AppendResult, error) {
	t.Helper()
	return r.m.AppendTxnTo(testCtx(t), p, tid, txnDataBatch(pid, epoch, seq, value), r.now, true)
}

func (r *readRig) committedOffsets(t *testing.T) []int64 {
	t.Helper()
	got := r.fetch(consumerFetch(FetchTxnCommitted, part("s", 0))).Partitions[0]
	if got.Err != nil {
		t.Fatal(got.Err)
	}
	return batchOffsets(t, got.Batches, true)
}

// Rule (DESIGN §10, TV2): the leader adds the partition to the
// transaction (AddPartitionsToTxn) before the first batch of the
// transaction, once; later batches of the open transaction go straight
// in. After the COMMIT marker read_committed sees the data; the next
// transaction (epoch + 1) is verified again, and after its ABORT marker
// read_committed hides its data.
func TestAppendTxnToVerifiesFirstBatchOnce(t *testing.T) {
	f := &fakeVerifier{}
	r, p := txnRig(t, f)
	const pid, tid = 40, "orders"
	for seq := int32(0); seq < 3; seq++ {
		res, err := r.appendTxn(t, p, tid, pid, 0, seq, fmt.Sprint("c", seq))
		if err != nil || res.BaseOffset != int64(seq) {
			t.Fatalf("batch %d: %+v %v", seq, res, err)
		}
	}
	want := []verifyCall{{tid, pid, 0, TopicPartition{Topic: "s", Partition: 0}, false}}
	if got := f.callList(); !slices.Equal(got, want) {
		t.Fatalf("verifications %+v, want %+v", got, want)
	}
	if start, ok := p.OldestOpenTransactionStart(); !ok || !start.Equal(r.now) {
		t.Fatalf("oldest open transaction start %v %v, want %v", start, ok, r.now)
	}
	if got := r.committedOffsets(t); len(got) != 0 {
		t.Fatalf("read_committed sees %v of an open transaction", got)
	}
	if err := r.m.WriteTxnMarker(testCtx(t), TopicPartition{Topic: "s", Partition: 0}, TxnMarker{ProducerID: pid, ProducerEpoch: 1, Commit: true}); err != nil {
		t.Fatal(err)
	}
	if got := r.committedOffsets(t); !equalOffsets(got, []int64{0, 1, 2}) {
		t.Fatalf("read_committed after the commit: %v, want 0 1 2", got)
	}
	if _, ok := p.OldestOpenTransactionStart(); ok {
		t.Fatal("a transaction is still open after the commit")
	}

	// The next transaction: epoch 1, verified again, then aborted.
	if _, err := r.appendTxn(t, p, tid, pid, 1, 0, "a0"); err != nil {
		t.Fatal(err)
	}
	if n := f.callCount(); n != 2 {
		t.Fatalf("%d verifications after the second transaction's first batch, want 2", n)
	}
	if err := r.m.WriteTxnMarker(testCtx(t), TopicPartition{Topic: "s", Partition: 0}, TxnMarker{ProducerID: pid, ProducerEpoch: 2}); err != nil {
		t.Fatal(err)
	}
	if got := r.committedOffsets(t); !equalOffsets(got, []int64{0, 1, 2}) {
		t.Fatalf("read_committed after the abort: %v, want 0 1 2 (the aborted batch at 4 hidden)", got)
	}
	all := r.fetch(consumerFetch(FetchHighWatermark, part("s", 4))).Partitions[0]
	if !equalOffsets(batchOffsets(t, all.Batches, true), []int64{4}) {
		t.Fatalf("read_uncommitted of the aborted transaction: %v", batchOffsets(t, all.Batches, true))
	}
	// A retry of the aborted batch is refused: its epoch is over.
	_, err := r.appendTxn(t, p, tid, pid, 1, 0, "a0")
	wantCode(t, "batch of an aborted transaction's epoch", err, sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH)
}

// Rule (Kafka AddPartitionsToTxnManager): a fenced producer's first batch
// is refused with INVALID_PRODUCER_EPOCH (PRODUCER_FENCED is mapped for
// produce); other coordinator refusals come back as they are; nothing is
// stored.
func TestAppendTxnToRefusedByCoordinatorStoresNothing(t *testing.T) {
	f := &fakeVerifier{answers: []error{
		errs.New(sluicev1.ErrorCode_PRODUCER_FENCED, "epoch 0 is old"),
		errs.New(sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING, "wrong producer id"),
	}}
	r, p := txnRig(t, f)
	_, err := r.appendTxn(t, p, "t", 50, 0, 0, "x")
	wantCode(t, "fenced", err, sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH)
	_, err = r.appendTxn(t, p, "t", 50, 0, 0, "x")
	wantCode(t, "wrong producer id", err, sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING)
	if p.LogEndOffset() != 0 || p.OpenTransactions() != 0 {
		t.Fatalf("refused batches stored: end %d, %d open transactions", p.LogEndOffset(), p.OpenTransactions())
	}
}

// Rule: retriable coordinator answers (CONCURRENT_TRANSACTIONS right
// after a commit, while its markers are written; a coordinator loading
// or moving) are retried inside AppendTxnTo until a definite answer; when
// the request's time runs out the last retriable answer is returned and
// nothing is stored.
func TestAppendTxnToRetriesRetriableAnswers(t *testing.T) {
	f := &fakeVerifier{answers: []error{
		errs.New(sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS, "markers in flight"),
		errs.New(sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS, "loading"),
		errs.New(sluicev1.ErrorCode_NOT_COORDINATOR, "moved"),
		errs.New(sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS, "markers in flight"),
	}}
	r, p := txnRig(t, f)
	res, err := r.appendTxn(t, p, "t", 60, 0, 0, "x")
	if err != nil || res.BaseOffset != 0 {
		t.Fatalf("after retries: %+v %v", res, err)
	}
	if n := f.callCount(); n != 5 {
		t.Fatalf("%d AddPartition calls, want 5 (4 retriable answers, then success)", n)
	}

	f2 := &fakeVerifier{always: errs.New(sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS, "stuck")}
	r.m.SetTxnVerifier(f2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = r.m.AppendTxnTo(ctx, p, "u", txnDataBatch(61, 0, 0, "y"), r.now, true)
	wantCode(t, "coordinator busy past the timeout", err, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	if n := f2.callCount(); n < 2 {
		t.Fatalf("%d AddPartition calls before the timeout, want retries", n)
	}
	if p.LogEndOffset() != 1 {
		t.Fatalf("log end %d, want 1 (the timed-out batch not stored)", p.LogEndOffset())
	}
}

// Rule (DESIGN §10, Kafka's VerificationGuard): when the coordinator
// ends the transaction (its marker is written) while the partition is
// being added, the verified batch is refused with INVALID_TXN_STATE and
// nothing of it is stored: no transaction is left open that no marker
// would close.
func TestAppendTxnToRefusedWhenMarkerCrossesVerification(t *testing.T) {
	f := &fakeVerifier{}
	r, p := txnRig(t, f)
	const pid = 70
	f.during = func(int) {
		// The coordinator aborts (a timeout) and writes its marker
		// before the AddPartition answer arrives.
		if err := r.m.WriteTxnMarker(context.Background(), TopicPartition{Topic: "s", Partition: 0}, TxnMarker{ProducerID: pid, ProducerEpoch: 1}); err != nil {
			t.Error(err)
		}
	}
	_, err := r.appendTxn(t, p, "t", pid, 0, 0, "late")
	wantCode(t, "marker crossed the verification", err, sluicev1.ErrorCode_INVALID_TXN_STATE)
	if n := f.callCount(); n != 1 {
		t.Fatalf("%d verifications, want 1", n)
	}
	if p.LogEndOffset() != 1 || p.OpenTransactions() != 0 || p.LastStableOffset() != 1 {
		t.Fatalf("log end %d (want 1: the marker only), %d open transactions, LSO %d", p.LogEndOffset(), p.OpenTransactions(), p.LastStableOffset())
	}
}

// Rule (TV2: a marker carries the closed data's epoch + 1): the marker
// closing the producer's previous transaction, landing while the first
// batch of its next transaction (same epoch as the marker) is verified,
// does not end the new transaction: the batch is verified again and
// stored.
func TestAppendTxnToReverifiesAfterPreviousTransactionsMarker(t *testing.T) {
	f := &fakeVerifier{}
	r, p := txnRig(t, f)
	const pid = 80
	if _, err := r.appendTxn(t, p, "t", pid, 0, 0, "old"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.during = func(call int) {
		if call == 1 {
			if err := r.m.WriteTxnMarker(context.Background(), TopicPartition{Topic: "s", Partition: 0}, TxnMarker{ProducerID: pid, ProducerEpoch: 1, Commit: true}); err != nil {
				t.Error(err)
			}
		}
	}
	f.mu.Unlock()
	res, err := r.appendTxn(t, p, "t", pid, 1, 0, "new")
	if err != nil || res.BaseOffset != 2 {
		t.Fatalf("first batch of the next transaction: %+v %v; want offset 2", res, err)
	}
	if n := f.callCount(); n != 3 {
		t.Fatalf("%d verifications, want 3 (first transaction, then the next one twice)", n)
	}
	if off, ok := p.log.Producer(pid); !ok || off.TxnFirstOffset != 2 {
		t.Fatalf("producer state %+v; want a transaction open at 2", off)
	}
}

// The inputs AppendTxnTo and AppendTo refuse, each with nothing stored.
func TestAppendTxnToRefusesBadInput(t *testing.T) {
	f := &fakeVerifier{}
	r, p := txnRig(t, f)
	ctx := testCtx(t)
	control := batch.MarkerBatch(batch.Producer{ID: 5, Epoch: 1}, batch.ControlCommit, 0, 1000)
	var idem batch.Builder
	idem.Reset(1000)
	idem.Add(1000, nil, []byte("v"), nil)
	idempotent := idem.Finish(batch.Producer{ID: 5, Epoch: 0, BaseSequence: 0}, 0)
	noProducer := txnDataBatch(-1, -1, -1, "v")
	for _, tc := range []struct {
		name string
		tid  string
		raw  []byte
		want sluicev1.ErrorCode
	}{
		{"no transactional id", "", txnDataBatch(5, 0, 0, "v"), sluicev1.ErrorCode_INVALID_REQUEST},
		{"control batch", "t", control, sluicev1.ErrorCode_INVALID_RECORD},
		{"idempotent batch", "t", idempotent, sluicev1.ErrorCode_INVALID_RECORD},
		{"plain batch", "t", plainBatch(1), sluicev1.ErrorCode_INVALID_RECORD},
		{"transactional without producer id", "t", noProducer, sluicev1.ErrorCode_INVALID_RECORD},
	} {
		_, err := r.m.AppendTxnTo(ctx, p, tc.tid, tc.raw, r.now, true)
		wantCode(t, tc.name, err, tc.want)
	}
	_, err := r.m.AppendTo(p, txnDataBatch(5, 0, 0, "v"), r.now, true)
	wantCode(t, "transactional batch without transactional id", err, sluicev1.ErrorCode_INVALID_TXN_STATE)
	r.m.SetTxnVerifier(nil)
	_, err = r.m.AppendTxnTo(ctx, p, "t", txnDataBatch(5, 0, 0, "v"), r.now, true)
	wantCode(t, "no verifier", err, sluicev1.ErrorCode_INVALID_TXN_STATE)
	if n := f.callCount(); n != 0 || p.LogEndOffset() != 0 {
		t.Fatalf("%d verifications, log end %d; want none and 0", n, p.LogEndOffset())
	}
}

// Rule (DESIGN §10): a marker from a coordinator epoch below the
// producer's last marker's is TRANSACTION_COORDINATOR_FENCED, nothing
// written; a partition not hosted or not led here is
// NOT_LEADER_OR_FOLLOWER.
func TestWriteTxnMarkerFencesOldCoordinator(t *testing.T) {
	r, p := txnRig(t, &fakeVerifier{})
	tp := TopicPartition{Topic: "s", Partition: 0}
	const pid = 90
	if _, err := r.appendTxn(t, p, "t", pid, 0, 0, "x"); err != nil {
		t.Fatal(err)
	}
	if err := r.m.WriteTxnMarker(testCtx(t), tp, TxnMarker{ProducerID: pid, ProducerEpoch: 1, CoordinatorEpoch: 5, Commit: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.appendTxn(t, p, "t", pid, 1, 0, "y"); err != nil {
		t.Fatal(err)
	}
	end := p.LogEndOffset()
	err := r.m.WriteTxnMarker(testCtx(t), tp, TxnMarker{ProducerID: pid, ProducerEpoch: 2, CoordinatorEpoch: 4})
	wantCode(t, "old coordinator", err, sluicev1.ErrorCode_TRANSACTION_COORDINATOR_FENCED)
	if p.LogEndOffset() != end || p.OpenTransactions() != 1 {
		t.Fatalf("fenced marker changed the log: end %d (want %d), %d open", p.LogEndOffset(), end, p.OpenTransactions())
	}
	if err := r.m.WriteTxnMarker(testCtx(t), tp, TxnMarker{ProducerID: pid, ProducerEpoch: 2, CoordinatorEpoch: 6}); err != nil {
		t.Fatal(err)
	}
	// A retry of the same marker (its answer was lost) is accepted.
	if err := r.m.WriteTxnMarker(testCtx(t), tp, TxnMarker{ProducerID: pid, ProducerEpoch: 2, CoordinatorEpoch: 6}); err != nil {
		t.Fatalf("retried marker: %v", err)
	}
	if n := len(p.log.AbortedTransactions(0, p.LogEndOffset())); n != 1 {
		t.Fatalf("%d aborted entries after the retried marker, want 1", n)
	}
	err = r.m.WriteTxnMarker(testCtx(t), TopicPartition{Topic: "nope", Partition: 0}, TxnMarker{ProducerID: pid, ProducerEpoch: 3})
	wantCode(t, "not hosted", err, sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER)

	m := newManager(t, t.TempDir(), 2)
	applyImage(t, m, newImage(t, "c1").apply(createTopic("f", "id-f", []int32{3, 2})).snapshot(), r.now)
	err = m.WriteTxnMarker(testCtx(t), TopicPartition{Topic: "f", Partition: 0}, TxnMarker{ProducerID: pid, ProducerEpoch: 3})
	wantCode(t, "follower", err, sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER)
	m.SetTxnVerifier(&fakeVerifier{})
	fp, _ := m.Replica("f", 0)
	_, err = m.AppendTxnTo(testCtx(t), fp, "t", txnDataBatch(pid, 0, 0, "z"), r.now, true)
	wantCode(t, "transactional produce to a follower", err, sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER)
}
