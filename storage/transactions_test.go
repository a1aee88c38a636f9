package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
)

// Tests of the log's side of transactions: the last stable offset, the
// aborted-transaction index and the consumer reads (transactions.go,
// txnindex.go). The Kafka example is commit_abort_commit of
// testdata/producerstate-kafka-examples.json (ref §4, §5).

// txnExample is the storage part of commit_abort_commit.
type txnExample struct {
	WhileBOpen struct {
		HighWatermark    int64 `json:"high_watermark"`
		LastStableOffset int64 `json:"last_stable_offset"`
	} `json:"while_B_open"`
	AfterAll struct {
		HighWatermark    int64 `json:"high_watermark"`
		LastStableOffset int64 `json:"last_stable_offset"`
	} `json:"after_all"`
	Log []struct {
		Offsets          [2]int64 `json:"offsets"`
		Kind             string   `json:"kind"`
		Values           []string `json:"values"`
		Marker           string   `json:"marker"`
		ProducerEpoch    int32    `json:"producer_epoch"`
		CoordinatorEpoch int32    `json:"coordinator_epoch"`
	} `json:"log"`
	AbortedTxnIndex []struct {
		ProducerID       int64 `json:"producer_id"`
		FirstOffset      int64 `json:"first_offset"`
		LastOffset       int64 `json:"last_offset"`
		LastStableOffset int64 `json:"last_stable_offset"`
	} `json:"aborted_txn_index"`
	ReadUncommitted txnExampleRead `json:"read_uncommitted"`
	ReadCommitted   txnExampleRead `json:"read_committed"`
}

type txnExampleRead struct {
	Records      []string `json:"records"`
	NextPosition int64    `json:"next_position"`
}

// exampleProducerShift maps the example's producer ids to Sluice's: Kafka's
// first id is 0, which Sluice never allocates (docs/record-format.md: an
// absent producer id, 0 on the wire, is a plain producer). The vector's
// "about" allows it: "a system whose first id differs shifts ids, not
// offsets or epochs".
const exampleProducerShift = 1

func loadTxnExample(t *testing.T) txnExample {
	t.Helper()
	var all struct {
		CommitAbortCommit txnExample `json:"commit_abort_commit"`
	}
	data, err := os.ReadFile(filepath.Join("testdata", "producerstate-kafka-examples.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &all); err != nil {
		t.Fatal(err)
	}
	if len(all.CommitAbortCommit.Log) != 6 || len(all.CommitAbortCommit.ReadCommitted.Records) == 0 {
		t.Fatalf("commit_abort_commit vector incomplete: %+v", all.CommitAbortCommit)
	}
	return all.CommitAbortCommit
}

// txnBatch is a transactional data batch of producer pid at epoch with
// sequences from seq, one record per value.
func txnBatch(pid int64, epoch, seq int32, ts int64, values ...string) []byte {
	var bl batch.Builder
	bl.Reset(ts)
	for _, v := range values {
		bl.Add(ts, nil, []byte(v), nil)
	}
	return bl.Finish(batch.Producer{ID: pid, Epoch: epoch, BaseSequence: seq}, batch.AttrTransactional)
}

func markerBatch(pid int64, epoch int32, t batch.ControlType, ts int64) []byte {
	return batch.MarkerBatch(batch.Producer{ID: pid, Epoch: epoch}, t, 0, ts)
}

// consumed reads l from its start as a consumer of isolation iso until
// NextOffset stops moving, and returns "value@offset" per record and the
// final NextOffset. It checks that no control batch is served.
func consumed(t *testing.T, l *Log, iso Isolation, maxBytes int) ([]string, int64) {
	t.Helper()
	var out []string
	off := l.StartOffset()
	for {
		res, err := l.ReadConsumer(off, maxBytes, iso)
		if err != nil {
			t.Fatalf("ReadConsumer(%d, %v): %v", off, iso, err)
		}
		for _, b := range res.Batches {
			h, err := batch.Verify(b)
			if err != nil || h.IsControl() {
				t.Fatalf("served batch at %d: control %v, %v", h.BaseOffset, h.IsControl(), err)
			}
			_ = batch.ForEachRecord(b, func(r batch.Record) error {
				if r.Offset >= off {
					out = append(out, fmt.Sprintf("%s@%d", r.Value, r.Offset))
				}
				return nil
			})
		}
		if res.NextOffset == off {
			return out, off
		}
		if res.NextOffset < off {
			t.Fatalf("NextOffset went back from %d to %d", off, res.NextOffset)
		}
		off = res.NextOffset
	}
}

// appendExample appends the example's log to l (as its leader), calling
// at(i) after entry i. It returns the batches as stored.
func appendExample(t *testing.T, l *Log, ex txnExample, at func(i int)) [][]byte {
	t.Helper()
	var stored [][]byte
	seq := map[int32]int32{} // per epoch: a new epoch starts at sequence 0
	for i, e := range ex.Log {
		pid := int64(exampleProducerShift)
		ts := t0.UnixMilli() + int64(i)
		var res AppendResult
		var err error
		var b []byte
		switch e.Kind {
		case "data":
			b = txnBatch(pid, e.ProducerEpoch, seq[e.ProducerEpoch], ts, e.Values...)
			seq[e.ProducerEpoch] += int32(len(e.Values))
			res, err = l.Append(b, fillEpoch, t0)
		case "control":
			typ := batch.ControlCommit
			if e.Marker == "ABORT" {
				typ = batch.ControlAbort
			}
			b = batch.MarkerBatch(batch.Producer{ID: pid, Epoch: e.ProducerEpoch}, typ, e.CoordinatorEpoch, ts)
			res, err = l.AppendControl(b, fillEpoch, t0)
		default:
			t.Fatalf("entry %d: kind %q", i, e.Kind)
		}
		if err != nil {
			t.Fatalf("entry %d (%s %s): %v", i, e.Kind, e.Marker, err)
		}
		if res.BaseOffset != e.Offsets[0] || res.LastOffset != e.Offsets[1] {
			t.Fatalf("entry %d at [%d, %d], want %v", i, res.BaseOffset, res.LastOffset, e.Offsets)
		}
		stored = append(stored, append([]byte(nil), b...))
		if at != nil {
			at(i)
		}
	}
	return stored
}

func (ex txnExample) wantAborted() []AbortedTxn {
	var out []AbortedTxn
	for _, a := range ex.AbortedTxnIndex {
		out = append(out, AbortedTxn{ProducerID: a.ProducerID + exampleProducerShift, FirstOffset: a.FirstOffset, LastOffset: a.LastOffset, LastStableOffset: a.LastStableOffset})
	}
	return out
}

func checkLSO(t *testing.T, l *Log, what string, hw, lso int64) {
	t.Helper()
	if got, gotLSO := l.HighWatermark(), l.LastStableOffset(); got != hw || gotLSO != lso {
		t.Fatalf("%s: HW %d LSO %d, want %d %d", what, got, gotLSO, hw, lso)
	}
}

// ref Example 1 (§4, §5): "while B is open: latest offset
// read_uncommitted=7 (high watermark), read_committed=4 (LSO)"; after all
// three, 11 and 11; the .txnindex holds "producerId: 0 firstOffset: 4
// lastOffset: 7 lastStableOffset: 8"; read_uncommitted gets c1..c3 a1..a3
// c4 c5 and read_committed c1..c3 c4 c5, both at position 11, neither the
// markers.
func TestCommitAbortCommitKafkaExample(t *testing.T) {
	ex := loadTxnExample(t)
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	appendExample(t, l, ex, func(i int) {
		switch i {
		case 2: // B's data appended and flushed, B still open
			l.SetHighWatermark(ex.WhileBOpen.HighWatermark)
			checkLSO(t, l, "while B is open", ex.WhileBOpen.HighWatermark, ex.WhileBOpen.LastStableOffset)
			got, next := consumed(t, l, ReadCommitted, 1<<20)
			if want := ex.ReadCommitted.Records[:3]; !reflect.DeepEqual(got, want) || next != ex.WhileBOpen.LastStableOffset {
				t.Fatalf("read_committed while B is open: %v next %d, want %v next %d", got, next, want, ex.WhileBOpen.LastStableOffset)
			}
		case 3: // ABORT marker appended, not yet below the high watermark
			checkLSO(t, l, "abort marker not committed", ex.WhileBOpen.HighWatermark, ex.WhileBOpen.LastStableOffset)
			l.SetHighWatermark(ex.Log[3].Offsets[1] + 1)
			checkLSO(t, l, "abort marker committed", 8, 8)
		}
	})
	l.SetHighWatermark(ex.AfterAll.HighWatermark)
	checkLSO(t, l, "after all", ex.AfterAll.HighWatermark, ex.AfterAll.LastStableOffset)
	if got := l.AbortedTransactions(0, l.EndOffset()); !reflect.DeepEqual(got, ex.wantAborted()) {
		t.Fatalf("aborted index %+v, want %+v", got, ex.wantAborted())
	}
	checkExampleReads(t, l, ex)
}

func checkExampleReads(t *testing.T, l *Log, ex txnExample) {
	t.Helper()
	for _, c := range []struct {
		iso  Isolation
		want []string
		next int64
	}{
		{ReadUncommitted, ex.ReadUncommitted.Records, ex.ReadUncommitted.NextPosition},
		{ReadCommitted, ex.ReadCommitted.Records, ex.ReadCommitted.NextPosition},
	} {
		for _, maxBytes := range []int{1, 1 << 20} {
			got, next := consumed(t, l, c.iso, maxBytes)
			if !reflect.DeepEqual(got, c.want) || next != c.next {
				t.Errorf("isolation %v, max bytes %d: %v next %d, want %v next %d", c.iso, maxBytes, got, next, c.want, c.next)
			}
		}
	}
}

// Rule (DESIGN §8): followers rebuild producer state and the transaction
// index from the batches they append, so a new leader has them: a
// follower appending the leader's bytes verbatim has the same aborted
// index and, given the same high watermark, the same last stable offset.
func TestFollowerTransactionStateFromVerbatimAppends(t *testing.T) {
	ex := loadTxnExample(t)
	leader := openLog(t, t.TempDir(), testConfig())
	defer leader.Close()
	follower := openLog(t, t.TempDir(), testConfig())
	defer follower.Close()
	copied := int64(0)
	appendExample(t, leader, ex, func(i int) {
		for copied < leader.EndOffset() {
			res, err := leader.Read(copied, 1<<20, 1<<62)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range res.Batches {
				if _, err := follower.AppendVerbatim(b, t0); err != nil {
					t.Fatalf("AppendVerbatim: %v", err)
				}
			}
			copied = res.NextOffset
		}
		if i == 2 {
			follower.SetHighWatermark(ex.WhileBOpen.HighWatermark)
			checkLSO(t, follower, "follower while B is open", ex.WhileBOpen.HighWatermark, ex.WhileBOpen.LastStableOffset)
		}
	})
	follower.SetHighWatermark(ex.AfterAll.HighWatermark)
	checkLSO(t, follower, "follower after all", ex.AfterAll.HighWatermark, ex.AfterAll.LastStableOffset)
	if got := follower.AbortedTransactions(0, follower.EndOffset()); !reflect.DeepEqual(got, ex.wantAborted()) {
		t.Fatalf("follower's aborted index %+v, want %+v", got, ex.wantAborted())
	}
	checkExampleReads(t, follower, ex)
}

// Rule (DESIGN §5): after a crash (no clean-shutdown marker, no recovery
// point) with a torn tail in the .log and in the .txnindex, recovery
// rebuilds the aborted index and the producer state from the log, so the
// last stable offset and the reads are as before; an open transaction
// survives the crash and a later ABORT indexes it.
func TestCrashRebuildsTxnIndexAndLSO(t *testing.T) {
	ex := loadTxnExample(t)
	dir := t.TempDir()
	cfg := testConfig()
	l := openLog(t, dir, cfg)
	appendExample(t, l, ex, nil)
	l.SetHighWatermark(ex.AfterAll.HighWatermark)
	if err := l.CheckpointHighWatermark(); err != nil {
		t.Fatal(err)
	}
	// Abandon l (a crash): tear both tails.
	seg := l.Segments()[len(l.Segments())-1]
	tornLog, err := os.OpenFile(seg.Path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tornLog.Write([]byte{batch.FrameTag, 0x7f, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	tornLog.Close()
	txnPath := segmentName(dir, seg.BaseOffset, ".txnindex")
	idx, err := os.ReadFile(txnPath)
	if err != nil || len(idx) != TxnIndexEntrySize {
		t.Fatalf(".txnindex holds %d bytes (%v), want one entry", len(idx), err)
	}
	if err := os.WriteFile(txnPath, idx[:TxnIndexEntrySize/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{cleanShutdownFile, recoveryPointFile} {
		_ = os.Remove(filepath.Join(dir, f))
	}

	r := openLog(t, dir, cfg)
	defer r.Close()
	if r.EndOffset() != ex.AfterAll.HighWatermark {
		t.Fatalf("end offset %d after recovery", r.EndOffset())
	}
	checkLSO(t, r, "after the crash", ex.AfterAll.HighWatermark, ex.AfterAll.LastStableOffset)
	if got := r.AbortedTransactions(0, r.EndOffset()); !reflect.DeepEqual(got, ex.wantAborted()) {
		t.Fatalf("rebuilt aborted index %+v, want %+v", got, ex.wantAborted())
	}
	if data, _ := os.ReadFile(txnPath); !reflect.DeepEqual(data, idx) {
		t.Fatalf("rebuilt .txnindex %x, want %x", data, idx)
	}
	checkExampleReads(t, r, ex)
}

// Rule: an open transaction survives a crash and a clean restart (the
// producer state is rebuilt or loaded from its snapshot), still holds the
// last stable offset, and its ABORT after the restart is indexed.
func TestOpenTransactionSurvivesRestart(t *testing.T) {
	for _, clean := range []bool{true, false} {
		t.Run(fmt.Sprintf("clean=%v", clean), func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, testConfig())
			fill(t, l, 3, 2, t0.UnixMilli()) // offsets 0..3, plain
			const pid = 42
			res, err := l.Append(txnBatch(pid, 0, 0, t0.UnixMilli(), "x", "y"), fillEpoch, t0)
			if err != nil {
				t.Fatal(err)
			}
			first := res.BaseOffset
			fill(t, l, 2, 1, t0.UnixMilli())
			l.SetHighWatermark(l.EndOffset())
			checkLSO(t, l, "before restart", l.EndOffset(), first)
			if clean {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				crash(t, l)
			}
			r := openLog(t, dir, testConfig())
			defer r.Close()
			checkLSO(t, r, "after restart", r.EndOffset(), first)
			m, err := r.AppendControl(markerBatch(pid, 1, batch.ControlAbort, t0.UnixMilli()), fillEpoch, t0)
			if err != nil {
				t.Fatal(err)
			}
			r.SetHighWatermark(r.EndOffset())
			checkLSO(t, r, "after the abort", r.EndOffset(), r.EndOffset())
			want := []AbortedTxn{{ProducerID: pid, FirstOffset: first, LastOffset: m.BaseOffset, LastStableOffset: m.BaseOffset + 1}}
			if got := r.AbortedTransactions(0, r.EndOffset()); !reflect.DeepEqual(got, want) {
				t.Fatalf("aborted %+v, want %+v", got, want)
			}
		})
	}
}

// Rule (Kafka ProducerStateManager.isProducerExpired): producer expiration
// never forgets a producer with an open transaction, so the last stable
// offset is not released silently.
func TestExpirationKeepsOpenTransaction(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	if _, err := l.Append(txnBatch(5, 0, 0, t0.UnixMilli(), "x"), fillEpoch, t0); err != nil {
		t.Fatal(err)
	}
	fill(t, l, 2, 1, t0.UnixMilli())
	l.SetHighWatermark(l.EndOffset())
	if n := l.ExpireProducers(t0.Add(365*24*time.Hour), time.Millisecond); n != 0 {
		t.Fatalf("expired %d producers, one with an open transaction", n)
	}
	checkLSO(t, l, "after expiration", l.EndOffset(), 0)
}

// Rule: truncation takes back the ABORT marker's index entry with the
// marker, reopening the transaction (the LSO falls back to its first
// offset); truncating its data too releases the LSO.
func TestTruncationCutsTxnIndex(t *testing.T) {
	ex := loadTxnExample(t)
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	appendExample(t, l, ex, nil)
	l.SetHighWatermark(l.EndOffset())
	abortAt := ex.Log[3].Offsets[0]
	if err := l.TruncateTo(abortAt); err != nil {
		t.Fatal(err)
	}
	if got := l.AbortedTransactions(0, 1<<62); len(got) != 0 {
		t.Fatalf("aborted index after cutting the marker: %+v", got)
	}
	checkLSO(t, l, "marker truncated", abortAt, ex.WhileBOpen.LastStableOffset)
	if _, err := l.AppendControl(markerBatch(exampleProducerShift, 2, batch.ControlAbort, t0.UnixMilli()), fillEpoch, t0); err != nil {
		t.Fatal(err)
	}
	if got := l.AbortedTransactions(0, 1<<62); !reflect.DeepEqual(got, ex.wantAborted()) {
		t.Fatalf("aborted index after the abort again: %+v", got)
	}
	if err := l.TruncateTo(ex.Log[2].Offsets[0]); err != nil {
		t.Fatal(err)
	}
	checkLSO(t, l, "data truncated", 4, 4)
	if got := l.AbortedTransactions(0, 1<<62); len(got) != 0 {
		t.Fatalf("aborted index after cutting the transaction: %+v", got)
	}
}

// Rule: the .txnindex entry lives in the segment of its ABORT marker
// (kept through rolls, found from a fetch starting in an earlier segment)
// and is deleted with that segment by retention.
func TestTxnIndexAcrossRollAndRetention(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	cfg.RetentionBytes = 0
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	defer l.Close()
	const pid = 9
	res, err := l.Append(txnBatch(pid, 0, 0, t0.UnixMilli(), "aborted"), fillEpoch, t0)
	if err != nil {
		t.Fatal(err)
	}
	first := res.BaseOffset
	fill(t, l, 20, 3, t0.UnixMilli()) // several segments
	m, err := l.AppendControl(markerBatch(pid, 1, batch.ControlAbort, t0.UnixMilli()), fillEpoch, t0)
	if err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if len(segs) < 3 || segs[0].NextOffset > m.BaseOffset {
		t.Fatalf("want the marker several segments after the data: %+v", segs)
	}
	want := []AbortedTxn{{ProducerID: pid, FirstOffset: first, LastOffset: m.BaseOffset, LastStableOffset: m.BaseOffset + 1}}
	if got := l.AbortedTransactions(first, first+1); !reflect.DeepEqual(got, want) {
		t.Fatalf("aborted overlapping the data: %+v, want %+v", got, want)
	}
	if got := l.AbortedTransactions(m.BaseOffset+1, m.BaseOffset+2); len(got) != 0 {
		t.Fatalf("aborted after the marker: %+v", got)
	}
	fill(t, l, 10, 3, t0.UnixMilli())
	l.SetHighWatermark(l.EndOffset())
	got, _ := consumed(t, l, ReadCommitted, 100)
	for _, r := range got {
		if r[:len("aborted")] == "aborted" {
			t.Fatalf("read_committed served %s", r)
		}
	}
	markerSeg := int64(-1)
	for _, s := range l.Segments() {
		if s.BaseOffset <= m.BaseOffset && m.BaseOffset < s.NextOffset {
			markerSeg = s.BaseOffset
		}
	}
	if _, err := l.EnforceRetention(t0); err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() <= m.BaseOffset {
		t.Fatalf("retention kept the marker's segment (start %d)", l.StartOffset())
	}
	if _, err := os.Stat(segmentName(dir, markerSeg, ".txnindex")); !os.IsNotExist(err) {
		t.Fatalf("the marker segment's .txnindex outlived it: %v", err)
	}
	if got := l.AbortedTransactions(0, 1<<62); len(got) != 0 {
		t.Fatalf("aborted after retention: %+v", got)
	}
}

// Rule: a consumer cannot get stuck: a range holding only batches left
// out (aborted data and markers) still moves NextOffset past them, under
// both isolations and any byte budget.
func TestConsumerReadAdvancesOverFilteredBatches(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	const pid = 3
	for i := int32(0); i < 20; i++ {
		if _, err := l.Append(txnBatch(pid, 2*i, 0, t0.UnixMilli(), "gone"), fillEpoch, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := l.AppendControl(markerBatch(pid, 2*i+1, batch.ControlAbort, t0.UnixMilli()), fillEpoch, t0); err != nil {
			t.Fatal(err)
		}
	}
	l.SetHighWatermark(l.EndOffset())
	for _, maxBytes := range []int{1, 1 << 20} {
		res, err := l.ReadConsumer(0, maxBytes, ReadCommitted)
		if err != nil || len(res.Batches) != 0 || res.NextOffset != l.EndOffset() {
			t.Fatalf("read_committed over aborted only (max %d): %d batches next %d, %v; want none, next %d", maxBytes, len(res.Batches), res.NextOffset, err, l.EndOffset())
		}
	}
	// read_uncommitted serves the aborted data but never a marker.
	got, next := consumed(t, l, ReadUncommitted, 1)
	if len(got) != 20 || next != l.EndOffset() {
		t.Fatalf("read_uncommitted: %d records next %d", len(got), next)
	}
	// Only markers at the end: the consumer still reaches the end.
	res, err := l.ReadConsumer(l.EndOffset()-1, 1, ReadUncommitted)
	if err != nil || len(res.Batches) != 0 || res.NextOffset != l.EndOffset() {
		t.Fatalf("read_uncommitted of a marker: %+v %v", res, err)
	}
}

// Rule (Kafka TransactionIndex search): AbortedTransactions returns the
// entries overlapping [from, to) and no others, also when transactions
// interleave (the LSO at abort is the other open transaction's start).
func TestAbortedTransactionsOverlap(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	ts := t0.UnixMilli()
	app := func(b []byte, control bool) int64 {
		t.Helper()
		var res AppendResult
		var err error
		if control {
			res, err = l.AppendControl(b, fillEpoch, t0)
		} else {
			res, err = l.Append(b, fillEpoch, t0)
		}
		if err != nil {
			t.Fatal(err)
		}
		return res.BaseOffset
	}
	a0 := app(txnBatch(1, 0, 0, ts, "a"), false)               // 0
	b0 := app(txnBatch(2, 0, 0, ts, "b"), false)               // 1
	bm := app(markerBatch(2, 1, batch.ControlAbort, ts), true) // 2: B aborted while A open
	app(txnBatch(1, 0, 1, ts, "a"), false)                     // 3
	am := app(markerBatch(1, 1, batch.ControlAbort, ts), true) // 4
	entB := AbortedTxn{ProducerID: 2, FirstOffset: b0, LastOffset: bm, LastStableOffset: a0}
	entA := AbortedTxn{ProducerID: 1, FirstOffset: a0, LastOffset: am, LastStableOffset: am + 1}
	for _, c := range []struct {
		from, to int64
		want     []AbortedTxn
	}{
		{0, 1, []AbortedTxn{entA}},       // B starts at 1
		{1, 2, []AbortedTxn{entB, entA}}, // both
		{3, 4, []AbortedTxn{entA}},       // B ended at 2
		{0, 5, []AbortedTxn{entB, entA}},
		{5, 6, nil},
	} {
		if got := l.AbortedTransactions(c.from, c.to); !reflect.DeepEqual(got, c.want) {
			t.Errorf("[%d, %d): %+v, want %+v", c.from, c.to, got, c.want)
		}
	}
	l.SetHighWatermark(l.EndOffset())
	got, _ := consumed(t, l, ReadCommitted, 1<<20)
	if len(got) != 0 {
		t.Fatalf("read_committed served aborted records %v", got)
	}
}

// Rule: after a clean shutdown the .txnindex files are trusted only if
// they verify; one damaged on disk (implausible entries, or a torn tail)
// is rebuilt from the log.
func TestCleanRestartRebuildsDamagedTxnIndex(t *testing.T) {
	ex := loadTxnExample(t)
	for _, damage := range []string{"garbage entry", "torn tail", "deleted"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, testConfig())
			appendExample(t, l, ex, nil)
			l.SetHighWatermark(l.EndOffset())
			path := segmentName(dir, l.Segments()[0].BaseOffset, ".txnindex")
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			switch damage {
			case "garbage entry":
				bad := append([]byte(nil), good...)
				for i := range bad[8:16] {
					bad[8+i] = 0xff // first offset far past the marker
				}
				err = os.WriteFile(path, bad, 0o644)
			case "torn tail":
				err = os.WriteFile(path, append(append([]byte(nil), good...), 1, 2, 3), 0o644)
			case "deleted":
				err = os.Remove(path)
			}
			if err != nil {
				t.Fatal(err)
			}
			r := openLog(t, dir, testConfig())
			defer r.Close()
			if got := r.AbortedTransactions(0, r.EndOffset()); !reflect.DeepEqual(got, ex.wantAborted()) {
				t.Fatalf("aborted index %+v, want %+v", got, ex.wantAborted())
			}
			if data, _ := os.ReadFile(path); !reflect.DeepEqual(data, good) {
				t.Fatalf(".txnindex %x, want %x", data, good)
			}
			checkExampleReads(t, r, ex)
		})
	}
}

// OpenTransactions counts the producers whose transaction has data and no
// marker yet; DecodeTxnIndex reads the index an ABORT wrote, and names the
// byte position of a torn or implausible entry, keeping the entries before
// it.
func TestOpenTransactionsAndDecodeTxnIndex(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, testConfig())
	defer l.Close()
	for _, b := range [][]byte{txnBatch(1, 0, 0, 1, "a"), txnBatch(2, 0, 0, 2, "b")} {
		if _, err := l.Append(b, 0, t0); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.OpenTransactions(); n != 2 {
		t.Errorf("OpenTransactions = %d, want 2", n)
	}
	if _, err := l.AppendControl(markerBatch(1, 1, batch.ControlAbort, 3), 0, t0); err != nil {
		t.Fatal(err)
	}
	if n := l.OpenTransactions(); n != 1 {
		t.Errorf("OpenTransactions after an ABORT = %d, want 1", n)
	}
	data, err := os.ReadFile(filepath.Join(dir, "00000000000000000000.txnindex"))
	if err != nil {
		t.Fatal(err)
	}
	want := AbortedTxn{ProducerID: 1, FirstOffset: 0, LastOffset: 2, LastStableOffset: 1}
	got, err := DecodeTxnIndex(data, 0)
	if err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("DecodeTxnIndex = %+v, %v; want [%+v]", got, err, want)
	}
	torn := append(append([]byte{}, data...), 1, 2, 3)
	got, err = DecodeTxnIndex(torn, 0)
	var te *TxnIndexError
	if !errors.As(err, &te) || te.Position != 32 || len(got) != 1 {
		t.Errorf("torn: %+v, %v; want one entry and an error at position 32", got, err)
	}
	bad := append(append([]byte{}, data...), data...) // the same marker twice
	if got, err = DecodeTxnIndex(bad, 0); !errors.As(err, &te) || te.Position != 32 || len(got) != 1 {
		t.Errorf("repeated entry: %+v, %v; want one entry and an error at position 32", got, err)
	}
}
