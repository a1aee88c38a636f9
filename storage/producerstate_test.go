package storage

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
)

// Tests of the producer-state rules (producerstate.go). Test names say the
// rule; the Kafka examples come from testdata/producerstate-kafka-examples.json,
// copied from the shared vectors. Kafka's producer ids there start at 0;
// Sluice never allocates 0 (it means a plain producer), so id 0 becomes 1:
// "a system whose first id differs shifts ids, not offsets or epochs".

// producerLog plays the leader's append path against a ProducerState: Check,
// then (unless refused or a duplicate) "append" at the log end and Update.
// It keeps the stored headers for Replay.
type producerLog struct {
	s       *ProducerState
	next    int64 // log end offset
	ts      int64 // timestamp of the next batch; each batch adds 1
	headers []batch.Header
}

func newProducerLog(maxProducers int) *producerLog {
	return &producerLog{s: NewProducerState(maxProducers), ts: 1000}
}

func dataHeader(pid int64, epoch int16, seq, records int32, txn bool) batch.Header {
	h := batch.Header{ProducerID: pid, ProducerEpoch: int32(epoch), BaseSequence: seq, LastOffsetDelta: records - 1, RecordCount: records}
	if pid <= 0 {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = batch.NoProducerID, -1, -1
	}
	if txn {
		h.Attributes |= batch.AttrTransactional
	}
	return h
}

func markerHeader(pid int64, epoch int16) batch.Header {
	return batch.Header{ProducerID: pid, ProducerEpoch: int32(epoch), BaseSequence: -1, RecordCount: 1,
		Attributes: batch.AttrTransactional | batch.AttrControl}
}

// info is BatchInfoFromHeader that must succeed.
func info(t *testing.T, h batch.Header) BatchInfo {
	t.Helper()
	b, err := BatchInfoFromHeader(h)
	if err != nil {
		t.Fatalf("BatchInfoFromHeader(%+v): %v", h, err)
	}
	return b
}

// send checks and, if accepted and new, appends a data batch. base is the
// offset the producer is told: the new one, or the original for a duplicate.
func (l *producerLog) send(t *testing.T, h batch.Header) (base int64, dup bool, err error) {
	t.Helper()
	b := info(t, h)
	d, err := l.s.Check(b)
	if err != nil {
		return -1, false, err
	}
	if d.Duplicate {
		return d.FirstOffset, true, nil
	}
	l.appendHeader(&h, b)
	return h.BaseOffset, false, nil
}

// marker checks and appends a TV2 transaction marker.
func (l *producerLog) marker(t *testing.T, pid int64, epoch int16) (int64, error) {
	t.Helper()
	return l.markerFrom(t, pid, epoch, NoCoordinatorEpoch)
}

// markerFrom is marker written by a coordinator at coordinatorEpoch
// (NoCoordinatorEpoch: as if read from its header only), checked by both
// marker rules.
func (l *producerLog) markerFrom(t *testing.T, pid int64, epoch int16, coordinatorEpoch int32) (int64, error) {
	t.Helper()
	if err := l.s.CheckMarker(pid, epoch, MarkerTV2); err != nil {
		return -1, err
	}
	if coordinatorEpoch != NoCoordinatorEpoch {
		if err := l.s.CheckCoordinatorEpoch(pid, coordinatorEpoch); err != nil {
			return -1, err
		}
	}
	h := markerHeader(pid, epoch)
	b := info(t, h)
	b.CoordinatorEpoch = coordinatorEpoch
	l.appendHeader(&h, b)
	return h.BaseOffset, nil
}

// appendHeader stores h at the log end and applies it, as a leader does
// after its local append.
func (l *producerLog) appendHeader(h *batch.Header, b BatchInfo) {
	h.BaseOffset, h.MaxTimestamp = l.next, l.ts
	l.s.Update(b, h.BaseOffset, h.LastOffset(), h.MaxTimestamp)
	l.headers = append(l.headers, *h)
	l.next = h.NextOffset()
	l.ts++
}

func code(err error) string { return errs.Code(err).String() }

func mustLoadKafkaExamples(t *testing.T) kafkaExamples {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "producerstate-kafka-examples.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ex kafkaExamples
	if err := json.Unmarshal(data, &ex); err != nil {
		t.Fatal(err)
	}
	return ex
}

type kafkaExamples struct {
	IdempotenceWindow struct {
		Steps []struct {
			BaseSequence int32  `json:"base_sequence"`
			Records      int32  `json:"records"`
			Label        string `json:"label"`
			Error        string `json:"error"`
			BaseOffset   int64  `json:"base_offset"`
		} `json:"steps"`
		LogBatches [][2]int64 `json:"log_batches"`
	} `json:"idempotence_window"`
	CommitAbortCommit struct {
		InitProducerID struct {
			Epoch int16 `json:"epoch"`
		} `json:"init_producer_id"`
		WhileBOpen struct {
			HighWatermark    int64 `json:"high_watermark"`
			LastStableOffset int64 `json:"last_stable_offset"`
		} `json:"while_B_open"`
		Log []struct {
			Offsets       [2]int64 `json:"offsets"`
			Kind          string   `json:"kind"`
			Marker        string   `json:"marker"`
			ProducerEpoch int16    `json:"producer_epoch"`
		} `json:"log"`
	} `json:"commit_abort_commit"`
}

// ref Example 2: "seq 0..2 -> baseOffset=0; the same batch again -> NONE
// baseOffset=0; seq 5 -> OUT_OF_ORDER_SEQUENCE_NUMBER; seq 3..5 -> 3; ... ;
// seq 0..2 (oldest of the 6 batches, again) -> OUT_OF_ORDER_SEQUENCE_NUMBER",
// and the log holds exactly 6 batches.
func TestProducerIdempotenceWindowKafkaExample(t *testing.T) {
	ex := mustLoadKafkaExamples(t).IdempotenceWindow
	if len(ex.Steps) != 9 {
		t.Fatalf("vector has %d steps, want 9", len(ex.Steps))
	}
	l := newProducerLog(0)
	for i, st := range ex.Steps {
		base, _, err := l.send(t, dataHeader(1, 0, st.BaseSequence, st.Records, false))
		if code(err) != st.Error || base != st.BaseOffset {
			t.Errorf("step %d (%s, seq %d): got %s base %d, want %s base %d", i, st.Label, st.BaseSequence, code(err), base, st.Error, st.BaseOffset)
		}
	}
	var got [][2]int64
	for _, h := range l.headers {
		got = append(got, [2]int64{h.BaseOffset, h.LastOffset()})
	}
	if !reflect.DeepEqual(got, ex.LogBatches) {
		t.Errorf("log batches %v, want %v", got, ex.LogBatches)
	}
}

// step is one batch fed to a producerLog before the batch under test.
type step struct {
	h      batch.Header
	marker bool
	ce     int32 // a marker's coordinator epoch
}

func data(pid int64, epoch int16, seq, records int32) step {
	return step{h: dataHeader(pid, epoch, seq, records, false)}
}

func txnData(pid int64, epoch int16, seq, records int32) step {
	return step{h: dataHeader(pid, epoch, seq, records, true)}
}

func marker(pid int64, epoch int16) step {
	return step{h: markerHeader(pid, epoch), marker: true, ce: NoCoordinatorEpoch}
}

// markerFrom is a marker step written by a coordinator at
// coordinatorEpoch.
func markerFrom(pid int64, epoch int16, coordinatorEpoch int32) step {
	return step{h: markerHeader(pid, epoch), marker: true, ce: coordinatorEpoch}
}

func (l *producerLog) apply(t *testing.T, steps []step) {
	t.Helper()
	for i, st := range steps {
		var err error
		if st.marker {
			_, err = l.markerFrom(t, st.h.ProducerID, int16(st.h.ProducerEpoch), st.ce)
		} else {
			_, _, err = l.send(t, st.h)
		}
		if err != nil {
			t.Fatalf("setup step %d: %v", i, err)
		}
	}
}

// TestProducerCheckRules covers Check's rules one by one (see its doc
// comment for the citations).
func TestProducerCheckRules(t *testing.T) {
	const max = math.MaxInt32
	tests := []struct {
		name  string
		setup []step
		batch BatchInfo
		want  string // error code name, NONE for accepted
		dup   bool
		first int64 // original first offset of a duplicate
	}{
		// Plain producers skip every check.
		{"plain producer id 0 is not checked", []step{data(0, 0, 0, 1)}, BatchInfo{ProducerID: 0, Epoch: -1, FirstSeq: -1, LastSeq: -1}, "NONE", false, 0},
		{"plain producer id -1 is not checked", nil, BatchInfo{ProducerID: -1, Epoch: 7, FirstSeq: 99, LastSeq: 3}, "NONE", false, 0},

		// Rule 6 (unknown producer) and rule 3 (TV2 transactional).
		{"unknown producer accepts any sequence", nil, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 42, LastSeq: 44}, "NONE", false, 0},
		{"unknown producer accepts any epoch", nil, BatchInfo{ProducerID: 1, Epoch: 9, FirstSeq: 0, LastSeq: 0}, "NONE", false, 0},
		{"unknown transactional producer must start at 0", nil, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 5, LastSeq: 5, IsTransactional: true}, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, 0},
		{"unknown transactional producer at 0", nil, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 0, LastSeq: 2, IsTransactional: true}, "NONE", false, 0},
		{"unknown TV1 transactional producer at any sequence (Kafka: rule 3 is TV2's)", nil, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 5, LastSeq: 5, IsTransactional: true, TV1: true}, "NONE", false, 0},
		{"a known TV1 producer still continues its sequence", []step{txnData(1, 0, 0, 2)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 5, LastSeq: 5, IsTransactional: true, TV1: true}, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, 0},

		// Rule 1: duplicates.
		{"duplicate of the last batch", []step{data(1, 0, 0, 3), data(1, 0, 3, 2)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 3, LastSeq: 4}, "NONE", true, 3},
		{"duplicate of the oldest of 5 remembered", []step{data(1, 0, 0, 1), data(1, 0, 1, 1), data(1, 0, 2, 1), data(1, 0, 3, 1), data(1, 0, 4, 1)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 0, LastSeq: 0}, "NONE", true, 0},
		{"sixth-newest batch is no longer a duplicate", []step{data(1, 0, 0, 1), data(1, 0, 1, 1), data(1, 0, 2, 1), data(1, 0, 3, 1), data(1, 0, 4, 1), data(1, 0, 5, 1)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 0, LastSeq: 0}, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, 0},
		{"a duplicate needs the exact range", []step{data(1, 0, 0, 3)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 0, LastSeq: 1}, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, 0},
		{"a duplicate needs the same epoch", []step{data(1, 0, 0, 3), data(1, 1, 0, 1)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 0, LastSeq: 2}, "INVALID_PRODUCER_EPOCH", false, 0},
		{"duplicate of a transactional batch", []step{txnData(1, 0, 0, 2)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 0, LastSeq: 1, IsTransactional: true}, "NONE", true, 0},

		// Rule 2: lower epoch.
		{"lower epoch is fenced", []step{data(1, 3, 0, 1)}, BatchInfo{ProducerID: 1, Epoch: 2, FirstSeq: 1, LastSeq: 1}, "INVALID_PRODUCER_EPOCH", false, 0},
		{"lower epoch after a marker is fenced", []step{txnData(1, 0, 0, 1), marker(1, 1)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 1, LastSeq: 1, IsTransactional: true}, "INVALID_PRODUCER_EPOCH", false, 0},

		// Rule 4: epoch bump.
		{"new epoch at sequence 0", []step{data(1, 0, 0, 3)}, BatchInfo{ProducerID: 1, Epoch: 1, FirstSeq: 0, LastSeq: 0}, "NONE", false, 0},
		{"new epoch not at 0", []step{data(1, 0, 0, 3)}, BatchInfo{ProducerID: 1, Epoch: 1, FirstSeq: 3, LastSeq: 3}, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, 0},
		{"new epoch of a transactional producer not at 0", []step{txnData(1, 0, 0, 3), marker(1, 1)}, BatchInfo{ProducerID: 1, Epoch: 2, FirstSeq: 3, LastSeq: 3, IsTransactional: true}, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, 0},

		// Rule 5: same epoch.
		{"next sequence", []step{data(1, 0, 0, 3)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 3, LastSeq: 5}, "NONE", false, 0},
		{"gap in sequence", []step{data(1, 0, 0, 3)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 5, LastSeq: 5}, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, 0},
		{"overlapping sequence", []step{data(1, 0, 0, 3)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 2, LastSeq: 4}, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, 0},
		{"0 follows MaxInt32", []step{data(1, 0, max-2, 3)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 0, LastSeq: 2}, "NONE", false, 0},
		{"1 does not follow MaxInt32", []step{data(1, 0, max-2, 3)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 1, LastSeq: 1}, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, 0},
		{"MaxInt32 does not repeat after a wrap", []step{data(1, 0, max-2, 3), data(1, 0, 0, 1)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: max, LastSeq: max}, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, 0},
		{"batch wrapping past MaxInt32 is followed by its last+1", []step{data(1, 0, max-1, 4)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 2, LastSeq: 2}, "NONE", false, 0},
		{"batch wrapping past MaxInt32 is found a duplicate", []step{data(1, 0, max-1, 4)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: max - 1, LastSeq: 1}, "NONE", true, 0},
		{"after a marker the epoch restarts at 0", []step{txnData(1, 0, 0, 3), marker(1, 1)}, BatchInfo{ProducerID: 1, Epoch: 1, FirstSeq: 0, LastSeq: 0, IsTransactional: true}, "NONE", false, 0},
		{"after a marker the same epoch cannot continue", []step{txnData(1, 0, 0, 3), marker(1, 1)}, BatchInfo{ProducerID: 1, Epoch: 1, FirstSeq: 3, LastSeq: 3, IsTransactional: true}, "OUT_OF_ORDER_SEQUENCE_NUMBER", false, 0},
		{"idempotent after a marker restarts at 0", []step{txnData(1, 0, 0, 3), marker(1, 1)}, BatchInfo{ProducerID: 1, Epoch: 1, FirstSeq: 0, LastSeq: 0}, "NONE", false, 0},

		// Rule 7 and malformed input.
		{"plain write inside an open transaction", []step{txnData(1, 0, 0, 1)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 1, LastSeq: 1}, "INVALID_TXN_STATE", false, 0},
		{"negative epoch", nil, BatchInfo{ProducerID: 1, Epoch: -1, FirstSeq: 0, LastSeq: 0}, "INVALID_RECORD", false, 0},
		{"negative sequence", nil, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: -1, LastSeq: 0}, "INVALID_RECORD", false, 0},
		{"control batch from a client", nil, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: -1, LastSeq: -1, IsControl: true}, "INVALID_RECORD", false, 0},
		{"other producers do not interfere", []step{data(2, 5, 0, 9)}, BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 7, LastSeq: 7}, "NONE", false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newProducerLog(0)
			l.apply(t, tc.setup)
			before := l.s.Snapshot()
			d, err := l.s.Check(tc.batch)
			if code(err) != tc.want || d.Duplicate != tc.dup {
				t.Fatalf("Check = %+v, %v; want %s, duplicate %v", d, err, tc.want, tc.dup)
			}
			if tc.dup && d.FirstOffset != tc.first {
				t.Errorf("duplicate's first offset %d, want %d", d.FirstOffset, tc.first)
			}
			if string(l.s.Snapshot()) != string(before) {
				t.Error("Check changed the state")
			}
		})
	}
}

func TestProducerDuplicateReturnsOriginalOffsets(t *testing.T) {
	l := newProducerLog(0)
	l.apply(t, []step{data(1, 0, 0, 3), data(1, 0, 3, 4)})
	d, err := l.s.Check(BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 3, LastSeq: 6})
	want := Decision{Duplicate: true, FirstOffset: 3, LastOffset: 6, MaxTimestamp: 1001}
	if err != nil || d != want {
		t.Fatalf("Check = %+v, %v; want %+v", d, err, want)
	}
}

func TestProducerPlainProducerHasNoState(t *testing.T) {
	s := NewProducerState(0)
	for _, pid := range []int64{0, -1} {
		s.Update(BatchInfo{ProducerID: pid, Epoch: -1, FirstSeq: -1, LastSeq: -1}, 0, 5, 1)
		s.Update(BatchInfo{ProducerID: pid, IsControl: true}, 6, 6, 1)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after plain batches, want 0", s.Len())
	}
}

func TestProducerUpdateRemembersFiveBatches(t *testing.T) {
	l := newProducerLog(0)
	for i := int32(0); i < 7; i++ {
		l.apply(t, []step{data(1, 0, 2*i, 2)})
	}
	e, ok := l.s.Producer(1)
	if !ok || len(e.Batches) != ProducerBatchesRetained {
		t.Fatalf("Producer(1) = %+v, %v; want %d batches", e, ok, ProducerBatchesRetained)
	}
	// The oldest two (seq 0..1, 2..3) are gone; the rest are oldest first.
	for i, m := range e.Batches {
		seq := int32(2 * (i + 2))
		want := BatchMetadata{FirstSeq: seq, LastSeq: seq + 1, FirstOffset: int64(seq), LastOffset: int64(seq + 1), MaxTimestamp: 1000 + int64(i+2)}
		if m != want {
			t.Errorf("batch %d = %+v, want %+v", i, m, want)
		}
	}
	if e.LastTimestamp != 1006 || e.Epoch != 0 || e.TxnFirstOffset != -1 {
		t.Errorf("entry %+v: want last timestamp 1006, epoch 0, no transaction", e)
	}
}

func TestProducerUpdateNewEpochForgetsBatches(t *testing.T) {
	l := newProducerLog(0)
	l.apply(t, []step{data(1, 0, 0, 3), data(1, 0, 3, 3), data(1, 1, 0, 2)})
	e, _ := l.s.Producer(1)
	if e.Epoch != 1 || len(e.Batches) != 1 || e.Batches[0].FirstSeq != 0 || e.Batches[0].FirstOffset != 6 {
		t.Fatalf("after the bump: %+v; want epoch 1 with only the batch at offset 6", e)
	}
}

// TestProducerCheckMarkerTV2: ref §4 "TV2 markers are 'reject if equal or
// lower'", except a retry (same epoch, transaction already ended,
// KAFKA-19999).
func TestProducerCheckMarkerTV2(t *testing.T) {
	tests := []struct {
		name  string
		setup []step
		epoch int16
		want  string
	}{
		{"unknown producer", nil, 0, "NONE"},
		{"epoch above the data's", []step{txnData(1, 0, 0, 1)}, 1, "NONE"},
		{"epoch equal to an open transaction's", []step{txnData(1, 0, 0, 1)}, 0, "INVALID_PRODUCER_EPOCH"},
		{"retry of the marker that ended the transaction", []step{txnData(1, 0, 0, 1), marker(1, 1)}, 1, "NONE"},
		{"late marker after the next transaction began", []step{txnData(1, 0, 0, 1), marker(1, 1), txnData(1, 1, 0, 1)}, 1, "INVALID_PRODUCER_EPOCH"},
		{"epoch below", []step{data(1, 4, 0, 1)}, 3, "INVALID_PRODUCER_EPOCH"},
		{"negative epoch", nil, -1, "INVALID_RECORD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newProducerLog(0)
			l.apply(t, tc.setup)
			if err := l.s.CheckMarker(1, tc.epoch, MarkerTV2); code(err) != tc.want {
				t.Fatalf("CheckMarker(1, %d) = %v, want %s", tc.epoch, err, tc.want)
			}
		})
	}
	if err := NewProducerState(0).CheckMarker(0, 1, MarkerTV2); code(err) != "INVALID_RECORD" {
		t.Errorf("CheckMarker of a plain producer = %v, want INVALID_RECORD", err)
	}
}

// TestProducerCommitAbortCommitKafkaExample replays ref Example 1 (commit,
// abort, commit under TV2): every data batch and marker is accepted at the
// offsets Kafka wrote them, the epoch follows the markers, and while B is
// open its first offset (4) is the open transaction that holds the LSO.
func TestProducerCommitAbortCommitKafkaExample(t *testing.T) {
	ex := mustLoadKafkaExamples(t).CommitAbortCommit
	l := newProducerLog(0)
	seq := map[int16]int32{} // next sequence per epoch: the client restarts at 0 after each bump
	for i, entry := range ex.Log {
		var off int64
		var err error
		if entry.Kind == "control" {
			off, err = l.marker(t, 1, entry.ProducerEpoch)
		} else {
			n := int32(entry.Offsets[1] - entry.Offsets[0] + 1)
			off, _, err = l.send(t, dataHeader(1, entry.ProducerEpoch, seq[entry.ProducerEpoch], n, true))
			seq[entry.ProducerEpoch] += n
		}
		if err != nil || off != entry.Offsets[0] || l.next != entry.Offsets[1]+1 {
			t.Fatalf("log entry %d (%s %s): offset %d, end %d, %v; want %v", i, entry.Kind, entry.Marker, off, l.next, err, entry.Offsets)
		}
		e, _ := l.s.Producer(1)
		if e.Epoch != entry.ProducerEpoch {
			t.Errorf("after entry %d: epoch %d, want %d", i, e.Epoch, entry.ProducerEpoch)
		}
		if l.next == ex.WhileBOpen.HighWatermark { // B sent, not yet aborted
			lso := min(e.TxnFirstOffset, ex.WhileBOpen.HighWatermark)
			if e.TxnFirstOffset < 0 || lso != ex.WhileBOpen.LastStableOffset {
				t.Errorf("while B is open: transaction first offset %d, LSO %d; want LSO %d", e.TxnFirstOffset, lso, ex.WhileBOpen.LastStableOffset)
			}
			// marker_epoch_rule: a late COMMIT of A (epoch 1) now is refused.
			if err := l.s.CheckMarker(1, 1, MarkerTV2); code(err) != "INVALID_PRODUCER_EPOCH" {
				t.Errorf("late marker with epoch 1 while B is open: %v, want INVALID_PRODUCER_EPOCH", err)
			}
		}
	}
	e, _ := l.s.Producer(1)
	if e.TxnFirstOffset != -1 || e.Epoch != 3 {
		t.Errorf("at the end: %+v; want epoch 3 and no open transaction", e)
	}
	// marker_epoch_rule: "A retried marker with the same epoch for an already
	// ended transaction is accepted."
	if err := l.s.CheckMarker(1, 3, MarkerTV2); err != nil {
		t.Errorf("retried final COMMIT: %v", err)
	}
}

// TestProducerFencingKafkaExample replays ref Example 3 (vector "fencing"):
// p1 writes z1 (epoch 0), the coordinator's ABORT marker has epoch 1, so p1's
// z2 with epoch 0 is INVALID_PRODUCER_EPOCH and not written; p2 (epoch 2)
// writes y1 at offset 2 and its COMMIT marker (epoch 3) lands at 3.
func TestProducerFencingKafkaExample(t *testing.T) {
	l := newProducerLog(0)
	if off, _, err := l.send(t, dataHeader(1, 0, 0, 1, true)); err != nil || off != 0 {
		t.Fatalf("z1: %d, %v; want offset 0", off, err)
	}
	if off, err := l.marker(t, 1, 1); err != nil || off != 1 {
		t.Fatalf("ABORT marker: %d, %v; want offset 1", off, err)
	}
	if _, _, err := l.send(t, dataHeader(1, 0, 1, 1, true)); code(err) != "INVALID_PRODUCER_EPOCH" {
		t.Fatalf("z2 from the fenced p1: %v, want INVALID_PRODUCER_EPOCH", err)
	}
	if off, _, err := l.send(t, dataHeader(1, 2, 0, 1, true)); err != nil || off != 2 {
		t.Fatalf("y1: %d, %v; want offset 2", off, err)
	}
	if off, err := l.marker(t, 1, 3); err != nil || off != 3 {
		t.Fatalf("COMMIT marker: %d, %v; want offset 3", off, err)
	}
	if e, _ := l.s.Producer(1); e.Epoch != 3 || l.next != 4 {
		t.Errorf("p2 ends at epoch %d, log end %d; want (0, 3) and 4 offsets", e.Epoch, l.next)
	}
}

// TestProducerExpireBefore: Kafka's isProducerExpired, "currentTimeMs -
// lastTimestamp >= producerIdExpirationMs", never with an open transaction.
func TestProducerExpireBefore(t *testing.T) {
	base := time.UnixMilli(1_000_000)
	exp := DefaultProducerIDExpiration
	tests := []struct {
		name    string
		now     time.Time
		want    int
		remains []int64
	}{
		{"nothing idle long enough", base.Add(exp - 2*time.Millisecond), 0, []int64{1, 2, 3, 4}},
		{"exactly the expiration", base.Add(exp), 1, []int64{2, 3, 4}},
		{"both idle ones", base.Add(exp + 5*time.Millisecond), 2, []int64{3, 4}},
		{"all but the open transaction", base.Add(100 * exp), 3, []int64{4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewProducerState(0)
			s.Update(BatchInfo{ProducerID: 1, FirstSeq: 0, LastSeq: 0}, 0, 0, base.UnixMilli())
			s.Update(BatchInfo{ProducerID: 2, FirstSeq: 0, LastSeq: 0}, 1, 1, base.UnixMilli()+5)
			s.Update(BatchInfo{ProducerID: 3, FirstSeq: 0, LastSeq: 0}, 2, 2, base.UnixMilli()+exp.Milliseconds())
			s.Update(BatchInfo{ProducerID: 4, FirstSeq: 0, LastSeq: 0, IsTransactional: true}, 3, 3, base.UnixMilli()-1) // oldest, but open
			if n := s.ExpireBefore(tc.now, exp); n != tc.want {
				t.Errorf("ExpireBefore = %d, want %d", n, tc.want)
			}
			if got := producerIDs(s); !reflect.DeepEqual(got, tc.remains) {
				t.Errorf("left %v, want %v", got, tc.remains)
			}
			if s.Len() != len(tc.remains) {
				t.Errorf("Len = %d, want %d", s.Len(), len(tc.remains))
			}
		})
	}
}

func TestProducerExpiredProducerIsUnknown(t *testing.T) {
	s := NewProducerState(0)
	s.Update(BatchInfo{ProducerID: 1, Epoch: 3, FirstSeq: 0, LastSeq: 9}, 0, 9, 0)
	s.ExpireBefore(time.UnixMilli(0).Add(DefaultProducerIDExpiration), DefaultProducerIDExpiration)
	// Forgotten: any epoch and sequence is accepted again (Check rule 6).
	if _, err := s.Check(BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 77, LastSeq: 77}); err != nil || s.Len() != 0 {
		t.Fatalf("after expiration: Len %d, Check %v; want 0 and accepted", s.Len(), err)
	}
}

func producerIDs(s *ProducerState) []int64 {
	var ids []int64
	for _, e := range s.Producers() {
		ids = append(ids, e.ProducerID)
	}
	return ids
}

// TestProducerMaxProducersEvictsOldest: beyond the bound, the producer with
// the oldest last timestamp is forgotten (ties: lowest id); open
// transactions are kept even beyond it.
func TestProducerMaxProducersEvictsOldest(t *testing.T) {
	tests := []struct {
		name    string
		max     int
		updates []BatchInfo // producer i+1... at timestamp ts[i]
		ts      []int64
		remains []int64
	}{
		{"under the bound", 3, []BatchInfo{{ProducerID: 1}, {ProducerID: 2}, {ProducerID: 3}}, []int64{10, 20, 30}, []int64{1, 2, 3}},
		{"oldest by timestamp, not by arrival", 3, []BatchInfo{{ProducerID: 1}, {ProducerID: 2}, {ProducerID: 3}, {ProducerID: 4}}, []int64{30, 10, 20, 40}, []int64{1, 3, 4}},
		{"an update refreshes a producer", 2, []BatchInfo{{ProducerID: 1}, {ProducerID: 2}, {ProducerID: 1, FirstSeq: 1, LastSeq: 1}, {ProducerID: 3}}, []int64{10, 20, 30, 40}, []int64{1, 3}},
		{"ties go to the lowest id", 2, []BatchInfo{{ProducerID: 5}, {ProducerID: 2}, {ProducerID: 9}}, []int64{10, 10, 10}, []int64{5, 9}},
		{"the newcomer itself when it is oldest", 2, []BatchInfo{{ProducerID: 1}, {ProducerID: 2}, {ProducerID: 3}}, []int64{20, 30, 10}, []int64{1, 2}},
		{"open transactions are not evicted", 2, []BatchInfo{{ProducerID: 1, IsTransactional: true}, {ProducerID: 2}, {ProducerID: 3}}, []int64{10, 20, 30}, []int64{1, 3}},
		{"only open transactions: above the bound", 1, []BatchInfo{{ProducerID: 1, IsTransactional: true}, {ProducerID: 2, IsTransactional: true}}, []int64{10, 20}, []int64{1, 2}},
		{"no bound", 0, []BatchInfo{{ProducerID: 1}, {ProducerID: 2}, {ProducerID: 3}}, []int64{10, 20, 30}, []int64{1, 2, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewProducerState(tc.max)
			for i, b := range tc.updates {
				s.Update(b, int64(i), int64(i), tc.ts[i])
			}
			if got := producerIDs(s); !reflect.DeepEqual(got, tc.remains) || s.Len() != len(tc.remains) {
				t.Errorf("left %v (Len %d), want %v", got, s.Len(), tc.remains)
			}
		})
	}

	s := NewProducerState(0)
	for i := int64(1); i <= 5; i++ {
		s.Update(BatchInfo{ProducerID: i}, i, i, 100-i) // producer 5 is the oldest
	}
	s.SetMaxProducers(2)
	if got := producerIDs(s); !reflect.DeepEqual(got, []int64{1, 2}) {
		t.Errorf("after SetMaxProducers(2): %v, want [1 2]", got)
	}
}

// TestProducerTruncateTo: batches at or after the offset are taken back; a
// producer left with none is forgotten; exact says whether that equals a
// rebuild (checked against Replay of the kept prefix).
func TestProducerTruncateTo(t *testing.T) {
	tests := []struct {
		name      string
		setup     []step
		offset    int64
		wantExact bool
		remains   []int64
	}{
		{"nothing at or after the offset", []step{data(1, 0, 0, 3)}, 3, true, []int64{1}},
		{"last batch taken back", []step{data(1, 0, 0, 3), data(1, 0, 3, 3)}, 3, true, []int64{1}},
		{"producer with no batch left is forgotten", []step{data(1, 0, 0, 3), data(2, 0, 0, 3)}, 3, true, []int64{1}},
		{"open transaction started after the offset is closed", []step{data(1, 0, 0, 2), data(2, 0, 0, 1), txnData(3, 0, 0, 1), txnData(3, 0, 1, 1)}, 3, true, []int64{1, 2}},
		{"open transaction started at the offset is closed, earlier batches kept", []step{data(1, 0, 0, 2), txnData(1, 0, 2, 1), txnData(1, 0, 3, 1)}, 2, true, []int64{1}},
		{"open transaction started before the offset stays open", []step{txnData(1, 0, 0, 2), txnData(1, 0, 2, 2)}, 2, true, []int64{1}},
		{"untouched producers stay exact whatever their history", []step{data(1, 0, 0, 1), data(1, 0, 1, 1), data(1, 0, 2, 1), data(1, 0, 3, 1), data(1, 0, 4, 1), data(1, 0, 5, 1), data(2, 0, 0, 1)}, 6, true, []int64{1}},
		{"window already lost a batch: inexact", []step{data(1, 0, 0, 1), data(1, 0, 1, 1), data(1, 0, 2, 1), data(1, 0, 3, 1), data(1, 0, 4, 1), data(1, 0, 5, 1)}, 5, false, []int64{1}},
		{"epoch bump after the offset: inexact", []step{data(1, 0, 0, 3), data(1, 1, 0, 1)}, 3, false, nil},
		{"marker after the offset: inexact", []step{txnData(1, 0, 0, 3), marker(1, 1)}, 3, false, nil},
		{"truncate everything", []step{data(1, 0, 0, 3), data(2, 0, 0, 3)}, 0, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newProducerLog(0)
			l.apply(t, tc.setup)
			exact := l.s.TruncateTo(tc.offset)
			if exact != tc.wantExact {
				t.Errorf("TruncateTo(%d) exact = %v, want %v", tc.offset, exact, tc.wantExact)
			}
			if got := producerIDs(l.s); !reflect.DeepEqual(got, tc.remains) || l.s.Len() != len(tc.remains) {
				t.Errorf("left %v, want %v", got, tc.remains)
			}
			for _, e := range l.s.Producers() {
				for _, m := range e.Batches {
					if m.LastOffset >= tc.offset {
						t.Errorf("producer %d keeps batch %+v at or after %d", e.ProducerID, m, tc.offset)
					}
				}
				if e.TxnFirstOffset >= tc.offset {
					t.Errorf("producer %d keeps a transaction opened at %d", e.ProducerID, e.TxnFirstOffset)
				}
			}
			if exact {
				rebuilt := NewProducerState(0)
				if err := Replay(rebuilt, headersBefore(l.headers, tc.offset)); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(rebuilt.Snapshot(), l.s.Snapshot()) {
					t.Errorf("exact truncation differs from a rebuild:\n got %+v\nwant %+v", l.s.Producers(), rebuilt.Producers())
				}
			}
		})
	}
}

func TestProducerTruncatedBatchCanBeWrittenAgain(t *testing.T) {
	l := newProducerLog(0)
	l.apply(t, []step{data(1, 0, 0, 3), data(1, 0, 3, 3)})
	l.s.TruncateTo(3)
	// The retry of the batch the new leader does not have is new again.
	d, err := l.s.Check(BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: 3, LastSeq: 5})
	if err != nil || d.Duplicate {
		t.Fatalf("retry after truncation: %+v, %v; want accepted as new", d, err)
	}
	if e, _ := l.s.Producer(1); e.LastTimestamp != 1000 {
		t.Errorf("last timestamp %d, want the kept batch's 1000", e.LastTimestamp)
	}
}
