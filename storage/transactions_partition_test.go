package storage

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Tests of the partition side of transactions on a real log: the
// verification guard around the append of a transaction's first batch, the
// coordinator-epoch fence on markers (leader, follower, recovery,
// snapshot), retried markers, and the start time of open transactions.

func markerFromCoordinator(pid int64, epoch int32, t batch.ControlType, coordinatorEpoch int32) []byte {
	return batch.MarkerBatch(batch.Producer{ID: pid, Epoch: epoch}, t, coordinatorEpoch, t0.UnixMilli())
}

// removeSnapshots deletes the producer-state snapshots in dir, so the next
// Open rebuilds the state from the log alone.
func removeSnapshots(t *testing.T, dir string) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+producerSnapshotSuffix))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.Remove(n); err != nil {
			t.Fatal(err)
		}
	}
}

// Rule (DESIGN §10, Kafka's VerificationGuard): a marker of the producer
// written between the start of the verification and the append ends the
// guard, and the batch is refused with INVALID_TXN_STATE, nothing stored.
func TestAppendTxnRefusedWhenMarkerCrossesVerification(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	const pid = 7
	g, err := l.StartTxnVerification(pid, 0, 0, t0)
	if err != nil || !g.Needed() {
		t.Fatalf("StartTxnVerification: %+v %v", g, err)
	}
	// The coordinator ends the transaction (a timeout abort) meanwhile.
	if _, err := l.AppendControl(markerFromCoordinator(pid, 1, batch.ControlAbort, 0), fillEpoch, t0); err != nil {
		t.Fatal(err)
	}
	end := l.EndOffset()
	_, err = l.AppendTxn(txnBatch(pid, 0, 0, t0.UnixMilli(), "late"), fillEpoch, g, t0)
	wantCode(t, err, sluicev1.ErrorCode_INVALID_TXN_STATE)
	if !errors.Is(err, ErrVerificationEnded) {
		t.Fatalf("refusal %v does not say the verification ended", err)
	}
	if l.EndOffset() != end || l.OpenTransactions() != 0 {
		t.Fatalf("refused batch changed the log: end %d (want %d), %d open transactions", l.EndOffset(), end, l.OpenTransactions())
	}
}

// Rule: a batch of a higher epoch from the same producer id ends an older
// epoch's guard; the verified batch of the newer epoch is appended and
// opens the transaction; an unverified batch is refused.
func TestAppendTxnGuardEndedByHigherEpoch(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	const pid = 9
	old, _ := l.StartTxnVerification(pid, 0, 0, t0)
	newer, _ := l.StartTxnVerification(pid, 1, 0, t0)
	if _, err := l.AppendTxn(txnBatch(pid, 1, 0, t0.UnixMilli(), "new"), fillEpoch, newer, t0); err != nil {
		t.Fatal(err)
	}
	_, err := l.AppendTxn(txnBatch(pid, 0, 0, t0.UnixMilli(), "old"), fillEpoch, old, t0)
	wantCode(t, err, sluicev1.ErrorCode_INVALID_TXN_STATE)
	_, err = l.AppendTxn(txnBatch(11, 0, 0, t0.UnixMilli(), "never verified"), fillEpoch, VerificationGuard{}, t0)
	wantCode(t, err, sluicev1.ErrorCode_INVALID_TXN_STATE)
	if l.EndOffset() != 1 || l.OpenTransactions() != 1 {
		t.Fatalf("end %d, %d open transactions; want 1 and 1", l.EndOffset(), l.OpenTransactions())
	}
	// The transaction is open: later batches need no verification, and a
	// retry of the first is a duplicate.
	if g, err := l.StartTxnVerification(pid, 1, 0, t0); err != nil || g.Needed() {
		t.Fatalf("open transaction: %+v %v", g, err)
	}
	res, err := l.AppendTxn(txnBatch(pid, 1, 0, t0.UnixMilli(), "new"), fillEpoch, VerificationGuard{}, t0)
	if err != nil || !res.Duplicate || res.BaseOffset != 0 {
		t.Fatalf("retry of the first batch: %+v %v; want a duplicate at 0", res, err)
	}
	// AppendTxn takes transactional data batches only.
	_, err = l.AppendTxn(makeBatch(1, t0.UnixMilli(), "plain"), fillEpoch, VerificationGuard{}, t0)
	wantCode(t, err, sluicev1.ErrorCode_INVALID_RECORD)
}

// Rule (DESIGN §10; Kafka checkCoordinatorEpoch): a marker from a
// coordinator epoch below the producer's last marker's is
// TRANSACTION_COORDINATOR_FENCED and nothing is written; the transaction
// stays open and the last stable offset where it was.
func TestMarkerCoordinatorEpochFence(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	const pid = 3
	if _, err := l.Append(txnBatch(pid, 0, 0, t0.UnixMilli(), "a"), fillEpoch, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendControl(markerFromCoordinator(pid, 1, batch.ControlCommit, 5), fillEpoch, t0); err != nil {
		t.Fatal(err)
	}
	res, err := l.Append(txnBatch(pid, 1, 0, t0.UnixMilli(), "b"), fillEpoch, t0)
	if err != nil {
		t.Fatal(err)
	}
	l.SetHighWatermark(l.EndOffset())
	end := l.EndOffset()
	_, err = l.AppendControl(markerFromCoordinator(pid, 2, batch.ControlAbort, 4), fillEpoch, t0)
	wantCode(t, err, sluicev1.ErrorCode_TRANSACTION_COORDINATOR_FENCED)
	if l.EndOffset() != end || l.OpenTransactions() != 1 {
		t.Fatalf("fenced marker changed the log: end %d (want %d), %d open", l.EndOffset(), end, l.OpenTransactions())
	}
	checkLSO(t, l, "after the fenced marker", end, res.BaseOffset)
	// The current coordinator (same or newer epoch) ends it.
	if _, err := l.AppendControl(markerFromCoordinator(pid, 2, batch.ControlAbort, 6), fillEpoch, t0); err != nil {
		t.Fatal(err)
	}
	if p, _ := l.Producer(pid); p.CoordinatorEpoch != 6 {
		t.Fatalf("coordinator epoch %d, want 6", p.CoordinatorEpoch)
	}
	// A control batch of a producer must hold a marker.
	var bl batch.Builder
	bl.Reset(t0.UnixMilli())
	bl.Add(t0.UnixMilli(), []byte("k"), []byte("v"), nil)
	_, err = l.AppendControl(bl.Finish(batch.Producer{ID: pid, Epoch: 3, BaseSequence: -1}, batch.AttrTransactional|batch.AttrControl), fillEpoch, t0)
	wantCode(t, err, sluicev1.ErrorCode_INVALID_RECORD)
}

// Rule (KAFKA-19999): a retried marker of a transaction that already
// ended (same epoch) is accepted, but ends nothing: no second .txnindex
// entry, and the last stable offset is not held back by it.
func TestRetriedMarkerAddsNoAbortedEntry(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	const pid = 4
	if _, err := l.Append(txnBatch(pid, 0, 0, t0.UnixMilli(), "x", "y"), fillEpoch, t0); err != nil {
		t.Fatal(err)
	}
	m, err := l.AppendControl(markerFromCoordinator(pid, 1, batch.ControlAbort, 2), fillEpoch, t0)
	if err != nil {
		t.Fatal(err)
	}
	l.SetHighWatermark(l.EndOffset())
	want := []AbortedTxn{{ProducerID: pid, FirstOffset: 0, LastOffset: m.BaseOffset, LastStableOffset: m.BaseOffset + 1}}
	retry, err := l.AppendControl(markerFromCoordinator(pid, 1, batch.ControlAbort, 2), fillEpoch, t0)
	if err != nil {
		t.Fatalf("retried marker: %v", err)
	}
	// Before the HW covers the retry, the LSO is already past it: it ends
	// no transaction, so it is not an unreplicated one.
	checkLSO(t, l, "retried marker above the HW", retry.BaseOffset, retry.BaseOffset)
	l.SetHighWatermark(l.EndOffset())
	checkLSO(t, l, "retried marker committed", l.EndOffset(), l.EndOffset())
	if got := l.AbortedTransactions(0, l.EndOffset()); !reflect.DeepEqual(got, want) {
		t.Fatalf("aborted %+v, want only %+v", got, want)
	}
	// A retry from an older coordinator is still fenced.
	_, err = l.AppendControl(markerFromCoordinator(pid, 1, batch.ControlAbort, 1), fillEpoch, t0)
	wantCode(t, err, sluicev1.ErrorCode_TRANSACTION_COORDINATOR_FENCED)
}

// Rule (DESIGN §5, §10): after a crash, the producer state rebuilt from
// the log (no snapshot) and the one loaded from a clean shutdown's
// snapshot both remember the markers' coordinator epochs, the aborted
// transactions and the last stable offset; an old coordinator stays
// fenced.
func TestRestartKeepsCoordinatorEpochs(t *testing.T) {
	for _, mode := range []string{"crash without snapshots", "crash", "clean"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, testConfig())
			const a, b = 21, 22
			if _, err := l.Append(txnBatch(a, 0, 0, t0.UnixMilli(), "a1"), fillEpoch, t0); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(txnBatch(b, 0, 0, t0.UnixMilli(), "b1"), fillEpoch, t0); err != nil {
				t.Fatal(err)
			}
			if _, err := l.AppendControl(markerFromCoordinator(a, 1, batch.ControlAbort, 7), fillEpoch, t0); err != nil {
				t.Fatal(err)
			}
			open, err := l.Append(txnBatch(a, 1, 0, t0.UnixMilli(), "a2"), fillEpoch, t0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.AppendControl(markerFromCoordinator(b, 1, batch.ControlCommit, 3), fillEpoch, t0); err != nil {
				t.Fatal(err)
			}
			l.SetHighWatermark(l.EndOffset())
			if err := l.CheckpointHighWatermark(); err != nil {
				t.Fatal(err)
			}
			aborted := l.AbortedTransactions(0, l.EndOffset())
			if len(aborted) != 1 {
				t.Fatalf("aborted %+v before the restart", aborted)
			}
			switch mode {
			case "clean":
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			case "crash":
				crash(t, l)
			default:
				crash(t, l)
				removeSnapshots(t, dir)
			}
			r := openLog(t, dir, testConfig())
			defer r.Close()
			checkLSO(t, r, "after the restart", r.EndOffset(), open.BaseOffset)
			if got := r.AbortedTransactions(0, r.EndOffset()); !reflect.DeepEqual(got, aborted) {
				t.Fatalf("aborted after the restart %+v, want %+v", got, aborted)
			}
			for pid, ce := range map[int64]int32{a: 7, b: 3} {
				if p, _ := r.Producer(pid); p.CoordinatorEpoch != ce {
					t.Fatalf("producer %d: coordinator epoch %d after the restart, want %d", pid, p.CoordinatorEpoch, ce)
				}
			}
			_, err = r.AppendControl(markerFromCoordinator(a, 2, batch.ControlCommit, 6), fillEpoch, t0)
			wantCode(t, err, sluicev1.ErrorCode_TRANSACTION_COORDINATOR_FENCED)
			if _, err := r.AppendControl(markerFromCoordinator(a, 2, batch.ControlCommit, 7), fillEpoch, t0); err != nil {
				t.Fatal(err)
			}
			r.SetHighWatermark(r.EndOffset())
			checkLSO(t, r, "after the commit", r.EndOffset(), r.EndOffset())
		})
	}
}

// Rule: a follower learns the coordinator epochs and the transactions'
// start times from the batches it copies, so as a new leader it fences
// the same coordinators.
func TestFollowerLearnsCoordinatorEpochAndTxnStart(t *testing.T) {
	leader := openLog(t, t.TempDir(), testConfig())
	defer leader.Close()
	follower := openLog(t, t.TempDir(), testConfig())
	defer follower.Close()
	const pid = 5
	if _, err := leader.Append(txnBatch(pid, 0, 0, t0.UnixMilli(), "x"), fillEpoch, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.AppendControl(markerFromCoordinator(pid, 1, batch.ControlCommit, 9), fillEpoch, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Append(txnBatch(pid, 1, 0, t0.UnixMilli(), "y"), fillEpoch, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	copiedAt := t0.Add(2 * time.Minute)
	res, err := leader.Read(0, 1<<20, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range res.Batches {
		if _, err := follower.AppendVerbatim(b, copiedAt); err != nil {
			t.Fatal(err)
		}
	}
	if p, _ := follower.Producer(pid); p.CoordinatorEpoch != 9 {
		t.Fatalf("follower's coordinator epoch %d, want 9", p.CoordinatorEpoch)
	}
	if got, ok := leader.OldestOpenTransactionStart(); !ok || !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("leader's oldest open transaction start %v %v, want %v", got, ok, t0.Add(time.Minute))
	}
	if got, ok := follower.OldestOpenTransactionStart(); !ok || !got.Equal(copiedAt) {
		t.Fatalf("follower's oldest open transaction start %v %v, want %v", got, ok, copiedAt)
	}
	_, err = follower.AppendControl(markerFromCoordinator(pid, 2, batch.ControlAbort, 8), fillEpoch, t0)
	wantCode(t, err, sluicev1.ErrorCode_TRANSACTION_COORDINATOR_FENCED)
	if _, err := follower.AppendControl(markerFromCoordinator(pid, 2, batch.ControlAbort, 9), fillEpoch, t0); err != nil {
		t.Fatal(err)
	}
	if _, ok := follower.OldestOpenTransactionStart(); ok {
		t.Fatal("a transaction is still open after its marker")
	}
}
