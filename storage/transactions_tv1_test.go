package storage

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// TV1 markers (docs/design.md decision 69; Kafka ProducerAppendInfo.
// checkProducerEpoch without epoch bump): a TV1 marker carries the epoch
// of the data it ends, so only an epoch below the producer's is stale.
func TestProducerCheckMarkerTV1(t *testing.T) {
	tests := []struct {
		name  string
		setup []step
		epoch int16
		want  string
	}{
		{"unknown producer", nil, 0, "NONE"},
		{"epoch equal to an open transaction's", []step{txnData(1, 0, 0, 1)}, 0, "NONE"},
		{"epoch above (a fence or timeout abort)", []step{txnData(1, 0, 0, 1)}, 1, "NONE"},
		{"retry of a marker, nothing open", []step{txnData(1, 0, 0, 1), marker(1, 1)}, 1, "NONE"},
		{"epoch below (stale: the producer was fenced)", []step{txnData(1, 0, 0, 1), marker(1, 1)}, 0, "INVALID_PRODUCER_EPOCH"},
		{"epoch below a plain batch's", []step{data(1, 4, 0, 1)}, 3, "INVALID_PRODUCER_EPOCH"},
		{"negative epoch", nil, -1, "INVALID_RECORD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newProducerLog(0)
			l.apply(t, tc.setup)
			if err := l.s.CheckMarker(1, tc.epoch, MarkerTV1); code(err) != tc.want {
				t.Fatalf("CheckMarker(1, %d, TV1) = %v, want %s", tc.epoch, err, tc.want)
			}
		})
	}
}

// tv1Log appends, as a leader, a TV1 producer's commit, abort and commit
// at epoch 0 with its sequences continuing across the transactions (0-1,
// 2-3, 4-5; TV1 never resets them), each closed by a TV1 marker at the
// same epoch, and returns the markers' offsets.
func tv1Log(t *testing.T, l *Log, pid int64) []int64 {
	t.Helper()
	var markers []int64
	for i, ct := range []batch.ControlType{batch.ControlCommit, batch.ControlAbort, batch.ControlCommit} {
		seq := int32(2 * i)
		v := fmt.Sprintf("v%d", i)
		if _, err := l.Append(txnBatch(pid, 0, seq, t0.UnixMilli(), v+"a", v+"b"), fillEpoch, t0); err != nil {
			t.Fatalf("transaction %d: data at sequence %d: %v", i, seq, err)
		}
		wantCode(t, func() error {
			_, err := l.AppendMarker(markerBatch(pid, 0, ct, t0.UnixMilli()), fillEpoch, MarkerTV2, t0)
			return err
		}(), sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH)
		m, err := l.AppendMarker(markerBatch(pid, 0, ct, t0.UnixMilli()), fillEpoch, MarkerTV1, t0)
		if err != nil {
			t.Fatalf("transaction %d: TV1 marker at the data's epoch: %v", i, err)
		}
		markers = append(markers, m.BaseOffset)
	}
	return markers
}

// A TV1 producer's transactions at one epoch: TV1 markers at the data's
// epoch are accepted (a TV2 check of the same marker is refused), the
// next transaction's data continues the sequence (a reset to 0 is
// OUT_OF_ORDER_SEQUENCE_NUMBER), the aborted one is indexed, reads
// filter it; a follower copying the log verbatim and a restart (clean:
// snapshot; crash: rebuild from the log) reach the same producer state
// without knowing the markers' version, and accept the producer's next
// batch at the next sequence. A stale TV1 marker (an epoch below, after a
// fence) is INVALID_PRODUCER_EPOCH and writes nothing.
func TestTV1TransactionsAtOneEpoch(t *testing.T) {
	for _, clean := range []bool{true, false} {
		t.Run(fmt.Sprintf("clean=%v", clean), func(t *testing.T) {
			const pid = 42
			dir := t.TempDir()
			l := openLog(t, dir, testConfig())
			markers := tv1Log(t, l, pid)
			_, err := l.Append(txnBatch(pid, 0, 0, t0.UnixMilli(), "reset"), fillEpoch, t0)
			wantCode(t, err, sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER)
			l.SetHighWatermark(l.EndOffset())
			checkLSO(t, l, "after three TV1 transactions", l.EndOffset(), l.EndOffset())
			wantAborted := []AbortedTxn{{ProducerID: pid, FirstOffset: markers[0] + 1, LastOffset: markers[1], LastStableOffset: markers[1] + 1}}
			if got := l.AbortedTransactions(0, l.EndOffset()); !reflect.DeepEqual(got, wantAborted) {
				t.Fatalf("aborted %+v, want %+v", got, wantAborted)
			}
			if got, _ := consumed(t, l, ReadCommitted, 1<<20); len(got) != 4 {
				t.Fatalf("read_committed got %v, want the two committed transactions' 4 records", got)
			}
			want, ok := l.Producer(pid)
			if !ok || want.Epoch != 0 || len(want.Batches) != 3 || want.Batches[2].LastSeq != 5 {
				t.Fatalf("leader's producer state %+v", want)
			}

			follower := openLog(t, t.TempDir(), testConfig())
			defer follower.Close()
			res, err := l.Read(0, 1<<20, 1<<62)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range res.Batches {
				if _, err := follower.AppendVerbatim(b, t0); err != nil {
					t.Fatalf("AppendVerbatim: %v", err)
				}
			}
			if got, _ := follower.Producer(pid); !reflect.DeepEqual(got, want) {
				t.Fatalf("follower's producer state %+v, want %+v", got, want)
			}

			if clean {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				crash(t, l)
			}
			r := openLog(t, dir, testConfig())
			defer r.Close()
			if got, _ := r.Producer(pid); !reflect.DeepEqual(got, want) {
				t.Fatalf("producer state after restart %+v, want %+v", got, want)
			}
			for _, lg := range []*Log{r, follower} {
				if _, err := lg.Append(txnBatch(pid, 0, 6, t0.UnixMilli(), "next"), fillEpoch, t0); err != nil {
					t.Fatalf("the next TV1 transaction at sequence 6: %v", err)
				}
			}
			// A coordinator fences the producer: its abort marker at epoch
			// 1; the old epoch's marker is stale, and nothing is written.
			if _, err := r.AppendMarker(markerBatch(pid, 1, batch.ControlAbort, t0.UnixMilli()), fillEpoch, MarkerTV1, t0); err != nil {
				t.Fatalf("fence abort at epoch 1: %v", err)
			}
			end := r.EndOffset()
			_, err = r.AppendMarker(markerBatch(pid, 0, batch.ControlCommit, t0.UnixMilli()), fillEpoch, MarkerTV1, t0)
			wantCode(t, err, sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH)
			_, err = r.Append(txnBatch(pid, 0, 7, t0.UnixMilli(), "zombie"), fillEpoch, t0)
			wantCode(t, err, sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH)
			if r.EndOffset() != end {
				t.Fatalf("the stale marker or batch was written: end %d, want %d", r.EndOffset(), end)
			}
		})
	}
}

// Decision 69's caveat, closed: a TV1 producer whose state this log no
// longer holds (expired while it lived) goes on at its next sequence —
// Kafka's rule that an unknown producer's first transactional batch
// start at sequence 0 is TV2's. Its verified batch (guard ForTV1) at
// sequence 7 is appended and opens the transaction — but not a pipelined
// batch at 9 before it; a TV2 producer's is refused
// OUT_OF_ORDER_SEQUENCE_NUMBER, nothing written.
func TestAppendTxnTV1UnknownProducerAnySequence(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	g, err := l.StartTxnVerification(21, 0, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.AppendTxn(txnBatch(21, 0, 7, t0.UnixMilli(), "tv2"), fillEpoch, g, t0)
	wantCode(t, err, sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER)
	if l.EndOffset() != 0 {
		t.Fatalf("refused batch changed the log: end %d", l.EndOffset())
	}
	// Two pipelined first batches share a guard; the later one may not
	// overtake the earlier (Kafka's lowestSequence).
	g, err = l.StartTxnVerification(22, 0, 7, t0)
	if err != nil {
		t.Fatal(err)
	}
	g9, err := l.StartTxnVerification(22, 0, 9, t0)
	if err != nil || g9 != g {
		t.Fatalf("second first batch: %+v %v, want the same guard", g9, err)
	}
	_, err = l.AppendTxn(txnBatch(22, 0, 9, t0.UnixMilli(), "tv1c"), fillEpoch, g9.ForTV1(), t0)
	wantCode(t, err, sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER)
	if _, err := l.AppendTxn(txnBatch(22, 0, 7, t0.UnixMilli(), "tv1a", "tv1b"), fillEpoch, g.ForTV1(), t0); err != nil {
		t.Fatalf("TV1 batch at sequence 7 of an unknown producer: %v", err)
	}
	if l.OpenTransactions() != 1 {
		t.Fatalf("%d open transactions, want 1", l.OpenTransactions())
	}
	// Its next batch continues the sequence; a gap is still refused.
	if _, err := l.AppendTxn(txnBatch(22, 0, 9, t0.UnixMilli(), "tv1c"), fillEpoch, g9.ForTV1(), t0); err != nil {
		t.Fatalf("next TV1 batch: %v", err)
	}
	_, err = l.AppendTxn(txnBatch(22, 0, 12, t0.UnixMilli(), "gap"), fillEpoch, VerificationGuard{}.ForTV1(), t0)
	wantCode(t, err, sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER)
}
