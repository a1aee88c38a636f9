package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
)

// compactConfig is a compacted config with segments large enough to merge
// the small ones the tests roll.
func compactConfig() Config {
	c := testConfig()
	c.CleanupPolicy = PolicyCompact
	c.SegmentBytes = 64 << 10
	return c
}

// kvBatch builds a batch of producer p with one record per "key=value"
// pair ("key=" is a tombstone: no value).
func kvBatch(p batch.Producer, attrs uint32, ts int64, kvs ...string) []byte {
	var bl batch.Builder
	bl.Reset(ts)
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		var val []byte
		if v != "" {
			val = []byte(v)
		}
		bl.Add(ts, []byte(k), val, nil)
	}
	return bl.Finish(p, attrs)
}

func plainKV(ts int64, kvs ...string) []byte {
	return kvBatch(batch.PlainProducer, 0, ts, kvs...)
}

// forceRoll seals the active segment.
func forceRoll(t testing.TB, l *Log) {
	t.Helper()
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if _, err := l.rollLocked(t0); err != nil {
		t.Fatal(err)
	}
}

func mustAppend(t *testing.T, l *Log, b []byte) AppendResult {
	t.Helper()
	var res AppendResult
	var err error
	if h, _ := batch.ParseHeader(b); h.IsControl() {
		res, err = l.AppendControl(b, fillEpoch, t0)
	} else {
		res, err = l.Append(b, fillEpoch, t0)
	}
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return res
}

// logView reads every batch of l (readAll: each passes Verify, offsets
// contiguous) and returns its data records as "key=value@offset" and its
// control batches as "MARKER(pid)@offset".
func logView(t *testing.T, l *Log) []string {
	t.Helper()
	var out []string
	for _, b := range readAll(t, l) {
		h, _ := batch.ParseHeader(b)
		if h.IsControl() {
			mk := readMarker(b)
			kind := "COMMIT"
			if mk.abort {
				kind = "ABORT"
			}
			out = append(out, fmt.Sprintf("%s(%d)@%d", kind, h.ProducerID, h.BaseOffset))
			continue
		}
		if err := batch.ForEachRecord(b, func(r batch.Record) error {
			out = append(out, fmt.Sprintf("%s=%s@%d", r.Key, r.Value, r.Offset))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func mustClean(t *testing.T, l *Log, now time.Time) CleanStats {
	t.Helper()
	st, err := l.Clean(context.Background(), now)
	if err != nil {
		t.Fatalf("Clean: %v", err)
	}
	return st
}

// fillKeyed appends segs sealed segments of n one-record batches cycling
// over keys k0..k(keys-1) with values "s<seg>-<i>", then one batch in the
// active segment. It returns the
// records as logView shows them before any cleaning.
func fillKeyed(t *testing.T, l *Log, segs, n, keys int) []string {
	t.Helper()
	var all []string
	for s := 0; s < segs; s++ {
		for i := 0; i < n; i++ {
			kv := fmt.Sprintf("k%d=s%d-%d", i%keys, s, i)
			res := mustAppend(t, l, plainKV(t0.UnixMilli(), kv))
			all = append(all, fmt.Sprintf("%s@%d", kv, res.BaseOffset))
		}
		forceRoll(t, l)
	}
	res := mustAppend(t, l, plainKV(t0.UnixMilli(), "k0=active"))
	all = append(all, fmt.Sprintf("k0=active@%d", res.BaseOffset))
	return all
}

// latestPerKey keeps the last "key=value@offset" of each key among
// records, in offset order, dropping tombstones when dropTombstones.
func latestPerKey(records []string) []string {
	last := map[string]int{}
	for i, r := range records {
		k, _, _ := strings.Cut(r, "=")
		last[k] = i
	}
	var out []string
	for i, r := range records {
		k, _, _ := strings.Cut(r, "=")
		if last[k] == i {
			out = append(out, r)
		}
	}
	return out
}

// Rule: a clean keeps the latest record of every key in the cleanable part
// (sealed segments below the high watermark), at its original offset;
// the active segment is untouched; small segments are merged; offsets stay
// contiguous from batch to batch (fillers), and a read at a removed offset
// returns the batch covering it, then the next. Recovery (clean restart
// and full rescan) keeps the result.
func TestCleanKeepsLatestPerKeyAtItsOffset(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, compactConfig())
	before := fillKeyed(t, l, 4, 10, 4)
	l.SetHighWatermark(l.EndOffset())
	if n := len(l.Segments()); n != 5 {
		t.Fatalf("%d segments, want 5", n)
	}
	st := mustClean(t, l, t0)
	if !st.Cleaned || st.SegmentsRead != 4 || st.SegmentsWritten != 1 || st.RecordsRead != 40 || st.RecordsRemoved != 36 || st.BytesWritten >= st.BytesRead {
		t.Fatalf("stats %+v", st)
	}
	if st.FirstDirtyOffset != 0 || st.FirstUncleanableOffset != 40 || st.DirtyRatio != 1 || st.Duration <= 0 || st.FillerBatches == 0 {
		t.Fatalf("stats %+v", st)
	}
	want := append(latestPerKey(before[:40]), before[40])
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("after clean\n got %v\nwant %v", got, want)
	}
	if n := len(l.Segments()); n != 2 {
		t.Fatalf("%d segments after the merge, want 2", n)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if n := e.Name(); strings.HasSuffix(n, cleanedSuffix) || strings.HasSuffix(n, swapSuffix) || strings.HasSuffix(n, swapEndExt) {
			t.Fatalf("%s left after a clean", n)
		}
	}
	// Offset 3 was k3=s0-3, removed: the read returns a batch covering it
	// (a filler without records), and reading on reaches the survivors.
	res, err := l.Read(3, 1, 1<<62)
	if err != nil || len(res.Batches) != 1 {
		t.Fatalf("Read(3) = %d batches, %v", len(res.Batches), err)
	}
	if h, _ := batch.ParseHeader(res.Batches[0]); h.BaseOffset > 3 || h.LastOffset() < 3 || h.RecordCount != 0 {
		t.Fatalf("Read(3) served %+v", h)
	}
	if got, _ := consumed(t, l, ReadCommitted, 1); len(got) != len(want) {
		t.Fatalf("consumer read %v, want %d records", got, len(want))
	}
	// A consumer fetching a removed offset gets the next records.
	cres, err := l.ReadConsumer(3, 1, ReadUncommitted)
	if err != nil || len(cres.Batches) == 0 {
		t.Fatalf("ReadConsumer(3) = %d batches, %v", len(cres.Batches), err)
	}
	if h, _ := batch.ParseHeader(cres.Batches[0]); h.BaseOffset <= 3 || h.RecordCount == 0 {
		t.Fatalf("ReadConsumer(3) served %+v", h)
	}
	// Nothing dirty any more.
	if st := mustClean(t, l, t0); st.Cleaned {
		t.Fatalf("second clean ran: %+v", st)
	}
	l.Close()
	l = openLog(t, dir, compactConfig())
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("after reopen %v", got)
	}
	crash(t, l)
	l = openLog(t, dir, compactConfig())
	defer l.Close()
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("after rescan %v", got)
	}
	// The log stays appendable after the cleaned part.
	mustAppend(t, l, plainKV(t0.UnixMilli(), "k1=later"))
}

// Rule: only what is below the high watermark (and the last stable
// offset), in sealed segments older than min.compaction.lag.ms, is
// cleaned; cleanup.policy=delete never cleans.
func TestCleanStopsAtFirstUncleanableOffset(t *testing.T) {
	l := openLog(t, t.TempDir(), compactConfig())
	defer l.Close()
	before := fillKeyed(t, l, 3, 8, 2)
	l.SetHighWatermark(12) // inside the second segment: only the first is cleanable
	st := mustClean(t, l, t0)
	if st.FirstUncleanableOffset != 8 || st.SegmentsRead != 1 {
		t.Fatalf("stats %+v", st)
	}
	want := append(latestPerKey(before[:8]), before[8:]...)
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}

	cfg := compactConfig()
	cfg.MinCompactionLagMs = 60_000
	l.SetConfig(cfg)
	l.SetHighWatermark(l.EndOffset())
	// Every segment's records are from t0: too young at t0 + 1s.
	if st := mustClean(t, l, t0.Add(time.Second)); st.Cleaned {
		t.Fatalf("cleaned records younger than the lag: %+v", st)
	}
	if st := mustClean(t, l, t0.Add(2*time.Minute)); !st.Cleaned || st.FirstUncleanableOffset != 24 {
		t.Fatalf("stats %+v", st)
	}

	del := openLog(t, t.TempDir(), testConfig())
	defer del.Close()
	fillKeyed(t, del, 2, 4, 1)
	del.SetHighWatermark(del.EndOffset())
	if st := mustClean(t, del, t0); st.Cleaned {
		t.Fatal("cleanup.policy=delete was cleaned")
	}
}

// Rule: cleanup.policy=compact alone disables time and size retention;
// compact,delete applies both.
func TestCompactPolicyTurnsOffRetention(t *testing.T) {
	for _, policy := range []string{PolicyCompact, PolicyCompactDelete} {
		cfg := compactConfig()
		cfg.CleanupPolicy, cfg.RetentionMs = policy, 1000
		l := openLog(t, t.TempDir(), cfg)
		fillKeyed(t, l, 3, 2, 2)
		l.SetHighWatermark(l.EndOffset())
		n, err := l.EnforceRetention(t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{PolicyCompact: 0, PolicyCompactDelete: 3}[policy]; n != want {
			t.Errorf("%s: retention deleted %d segments, want %d", policy, n, want)
		}
		l.Close()
	}
}

// Rule: a tombstone removes the key's earlier records at once and is
// itself removed only once its segment is older than delete.retention.ms
// (by its largest timestamp).
func TestCleanTombstonesOutliveDeleteRetention(t *testing.T) {
	cfg := compactConfig()
	cfg.DeleteRetentionMs = 60_000
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	ts := t0.UnixMilli()
	mustAppend(t, l, plainKV(ts, "a=1", "b=1"))
	mustAppend(t, l, plainKV(ts, "a="))
	forceRoll(t, l)
	mustAppend(t, l, plainKV(ts, "c=1"))
	forceRoll(t, l)
	l.SetHighWatermark(l.EndOffset())

	mustClean(t, l, t0.Add(time.Second))
	if got, want := logView(t, l), []string{"b=1@1", "a=@2", "c=1@3"}; !slices.Equal(got, want) {
		t.Fatalf("before the horizon: %v, want %v", got, want)
	}
	// New dirty data, and the tombstone's segment is past the horizon.
	mustAppend(t, l, plainKV(ts, "c=2"))
	forceRoll(t, l)
	l.SetHighWatermark(l.EndOffset())
	cfg.MinCleanableDirtyRatio = 0.01
	l.SetConfig(cfg)
	st := mustClean(t, l, t0.Add(2*time.Minute))
	if !st.Cleaned {
		t.Fatalf("stats %+v", st)
	}
	if got, want := logView(t, l), []string{"b=1@1", "c=2@4"}; !slices.Equal(got, want) {
		t.Fatalf("after the horizon: %v, want %v", got, want)
	}
}

// Rule (transactions): records of aborted transactions are removed and
// never shadow committed ones; committed records are compacted by key; a
// marker stays while data of its transaction is left before it, and goes
// only in a later pass past delete.retention.ms; the last batch of every
// producer id stays (possibly empty), so the producer state survives a
// rebuild from the log.
func TestCleanTransactions(t *testing.T) {
	cfg := compactConfig()
	cfg.DeleteRetentionMs = 60_000
	cfg.MinCleanableDirtyRatio = 0.01
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	ts := t0.UnixMilli()
	// Markers carry the epoch after their data's (TV2).
	mk := func(pid int64, epoch int32, typ batch.ControlType) []byte {
		return batch.MarkerBatch(batch.Producer{ID: pid, Epoch: epoch}, typ, 0, ts)
	}
	p7 := batch.Producer{ID: 7, Epoch: 3, BaseSequence: 0}
	txn := batch.AttrTransactional
	mustAppend(t, l, kvBatch(batch.Producer{ID: 5, Epoch: 1, BaseSequence: 0}, txn, ts, "a=1", "b=1")) // 0-1
	mustAppend(t, l, kvBatch(batch.Producer{ID: 6, Epoch: 1, BaseSequence: 0}, txn, ts, "a=X"))        // 2: aborted
	mustAppend(t, l, mk(5, 2, batch.ControlCommit))                                                    // 3
	mustAppend(t, l, mk(6, 2, batch.ControlAbort))                                                     // 4
	mustAppend(t, l, kvBatch(p7, 0, ts, "c=old"))                                                      // 5: p7's last batch
	forceRoll(t, l)
	mustAppend(t, l, kvBatch(batch.Producer{ID: 5, Epoch: 2, BaseSequence: 0}, txn, ts, "a=2")) // 6
	mustAppend(t, l, mk(5, 3, batch.ControlCommit))                                             // 7
	mustAppend(t, l, plainKV(ts, "c=new"))                                                      // 8
	forceRoll(t, l)
	l.SetHighWatermark(l.EndOffset())
	if got := l.AbortedTransactions(0, 9); len(got) != 1 {
		t.Fatalf("aborted %v", got)
	}

	mustClean(t, l, t0.Add(time.Second))
	want := []string{"b=1@1", "COMMIT(5)@3", "ABORT(6)@4", "a=2@6", "COMMIT(5)@7", "c=new@8"}
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("first pass\n got %v\nwant %v", got, want)
	}
	if got, _ := consumed(t, l, ReadCommitted, 1<<20); !slices.Equal(got, []string{"1@1", "2@6", "new@8"}) {
		t.Fatalf("read_committed %v", got)
	}
	// p7's batch at 5 lost its record but stays, empty, as p7's last.
	res, err := l.Read(5, 1, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := batch.ParseHeader(res.Batches[0]); h.BaseOffset != 5 || h.ProducerID != 7 || h.RecordCount != 0 || h.ProducerEpoch != 3 {
		t.Fatalf("p7's last batch: %+v", h)
	}

	// Past the horizon, with new dirty data: the first commit stays (b=1
	// is its data), the second is p5's last batch; the abort's data went
	// in the first pass, but the marker is p6's last batch: it stays (with
	// the coordinator epoch it carries) until p6's state expires.
	mustAppend(t, l, plainKV(ts, "d=1"))
	forceRoll(t, l)
	l.SetHighWatermark(l.EndOffset())
	mustClean(t, l, t0.Add(2*time.Minute))
	want = []string{"b=1@1", "COMMIT(5)@3", "ABORT(6)@4", "a=2@6", "COMMIT(5)@7", "c=new@8", "d=1@9"}
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("second pass\n got %v\nwant %v", got, want)
	}

	// The producer state rebuilt from the cleaned log (no snapshot) knows
	// p7 and nothing is open.
	crash(t, l)
	for _, name := range l.snapshotOffsets() {
		os.Remove(filepath.Join(dir, SnapshotFileName(name)))
	}
	l = openLog(t, dir, cfg)
	defer l.Close()
	e, ok := l.Producer(7)
	if !ok || e.Epoch != 3 || len(e.Batches) == 0 || e.Batches[len(e.Batches)-1].LastSeq != 0 {
		t.Fatalf("producer 7 after rebuild: %+v, %v", e, ok)
	}
	if n := l.OpenTransactions(); n != 0 {
		t.Fatalf("%d open transactions after rebuild", n)
	}
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("after rebuild %v", got)
	}

	// Once the producer ids expire, their last batches are ordinary: the
	// abort marker (no data left) and p7's empty batch go.
	if n := l.ExpireProducers(t0.Add(48*time.Hour), 24*time.Hour); n != 3 {
		t.Fatalf("expired %d producers", n)
	}
	mustAppend(t, l, plainKV(ts, "e=1"))
	forceRoll(t, l)
	l.SetHighWatermark(l.EndOffset())
	mustClean(t, l, t0.Add(2*time.Minute))
	want = []string{"b=1@1", "COMMIT(5)@3", "a=2@6", "COMMIT(5)@7", "c=new@8", "d=1@9", "e=1@10"}
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("after expiration\n got %v\nwant %v", got, want)
	}
	if got := l.AbortedTransactions(0, 11); len(got) != 0 {
		t.Fatalf("aborted entries of removed data kept: %v", got)
	}
}

// Rule: the cleaner never cleans past the first unstable offset: an open
// transaction's data stays as it is.
func TestCleanStopsAtOpenTransaction(t *testing.T) {
	l := openLog(t, t.TempDir(), compactConfig())
	defer l.Close()
	ts := t0.UnixMilli()
	mustAppend(t, l, plainKV(ts, "a=1"))
	mustAppend(t, l, plainKV(ts, "a=2"))
	forceRoll(t, l)
	mustAppend(t, l, kvBatch(batch.Producer{ID: 9, Epoch: 0, BaseSequence: 0}, batch.AttrTransactional, ts, "a=open"))
	mustAppend(t, l, plainKV(ts, "a=3"))
	forceRoll(t, l)
	mustAppend(t, l, plainKV(ts, "a=4"))
	l.SetHighWatermark(l.EndOffset())
	st := mustClean(t, l, t0)
	if st.FirstUncleanableOffset != 2 {
		t.Fatalf("stats %+v", st)
	}
	if got, want := logView(t, l), []string{"a=2@1", "a=open@2", "a=3@3", "a=4@4"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// Rule: a follower appends the leader's cleaned batches verbatim from
// offset 0 (fillers included) and ends with the same log.
func TestFollowerCopiesCleanedLog(t *testing.T) {
	leader := openLog(t, t.TempDir(), compactConfig())
	defer leader.Close()
	fillKeyed(t, leader, 3, 6, 2)
	leader.SetHighWatermark(leader.EndOffset())
	mustClean(t, leader, t0)
	follower := openLog(t, t.TempDir(), compactConfig())
	defer follower.Close()
	for _, b := range readAll(t, leader) {
		if _, err := follower.AppendVerbatim(append([]byte(nil), b...), t0); err != nil {
			t.Fatal(err)
		}
	}
	follower.SetHighWatermark(follower.EndOffset())
	if a, b := logView(t, leader), logView(t, follower); !slices.Equal(a, b) {
		t.Fatalf("leader %v\nfollower %v", a, b)
	}
}

// Rule: readers running during a clean see the log before or after it,
// never a partial state: every read succeeds, offsets never go back, and
// every record served is one the log held at its offset.
func TestCleanConcurrentReads(t *testing.T) {
	l := openLog(t, t.TempDir(), compactConfig())
	defer l.Close()
	before := fillKeyed(t, l, 6, 40, 5)
	l.SetHighWatermark(l.EndOffset())
	var validMu sync.RWMutex // guards valid
	valid := map[string]bool{}
	for _, r := range before {
		valid[r] = true
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				off := int64(0)
				for off < l.EndOffset() {
					res, err := l.Read(off, 512, 1<<62)
					if err == nil && (len(res.Batches) == 0 || res.NextOffset <= off) {
						err = fmt.Errorf("read at %d stalled", off)
					}
					if err != nil {
						errc <- err
						return
					}
					for _, b := range res.Batches {
						if _, err := batch.Verify(b); err != nil {
							errc <- err
							return
						}
						_ = batch.ForEachRecord(b, func(rec batch.Record) error {
							s := fmt.Sprintf("%s=%s@%d", rec.Key, rec.Value, rec.Offset)
							validMu.RLock()
							ok := valid[s]
							validMu.RUnlock()
							if !ok {
								select {
								case errc <- fmt.Errorf("served %s", s):
								default:
								}
							}
							return nil
						})
					}
					off = res.NextOffset
				}
			}
		}()
	}
	for i := 0; i < 3; i++ {
		mustClean(t, l, t0)
		// More dirty data for the next pass.
		for j := 0; j < 40; j++ {
			kv := fmt.Sprintf("k%d=x%d-%d", j%5, i, j)
			validMu.Lock()
			valid[fmt.Sprintf("%s@%d", kv, l.EndOffset())] = true
			validMu.Unlock()
			mustAppend(t, l, plainKV(t0.UnixMilli(), kv))
		}
		forceRoll(t, l)
		l.SetHighWatermark(l.EndOffset())
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// Rule (crash safety): a crash at any step of a clean — .cleaned files
// written, renamed to .swap one by one, old segments deleted, .swap
// files renamed back one by one — reopens to a log with every offset
// once (contiguous batches), nothing but records the log held at their
// offsets, at least every record the finished clean keeps, and no
// leftover .cleaned/.swap/.swapend file; a clean of the reopened log
// then gives exactly the finished clean's log. Both with the segments
// trusted (recovery point at the end) and rescanned (no recovery point).
func TestCleanCrashAtEveryStep(t *testing.T) {
	cfg := compactConfig()
	cfg.SegmentBytes = 1024 // one source segment per group: several swaps
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	before := fillKeyed(t, l, 4, 10, 3)
	l.SetHighWatermark(l.EndOffset())
	if err := l.CheckpointHighWatermark(); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	var snaps []crashSnapshot
	l.swapHook = func(step string) {
		d := t.TempDir()
		copyDir(t, l.dir, d)
		snaps = append(snaps, crashSnapshot{step, d})
	}
	st := mustClean(t, l, t0)
	if st.SegmentsWritten != 4 {
		t.Fatalf("stats %+v", st)
	}
	final := logView(t, l)
	l.Close()
	if len(snaps) != 4*10 {
		t.Fatalf("only %d crash points", len(snaps))
	}
	held := map[string]bool{}
	for _, r := range before {
		held[r] = true
	}
	for _, s := range snaps {
		for _, rescan := range []bool{false, true} {
			d := s.dir
			if rescan {
				d = t.TempDir()
				copyDir(t, s.dir, d)
				os.Remove(filepath.Join(d, recoveryPointFile))
			}
			r, err := Open(d, cfg, t0)
			if err != nil {
				t.Fatalf("crash after %q (rescan %v): Open: %v", s.step, rescan, err)
			}
			got := logView(t, r) // contiguous: no offset lost or twice
			for _, rec := range got {
				if !held[rec] {
					t.Fatalf("crash after %q (rescan %v): %s was never written", s.step, rescan, rec)
				}
			}
			for _, rec := range final {
				if !slices.Contains(got, rec) {
					t.Fatalf("crash after %q (rescan %v): %s lost; log %v", s.step, rescan, rec, got)
				}
			}
			ents, _ := os.ReadDir(d)
			for _, e := range ents {
				if n := e.Name(); strings.HasSuffix(n, cleanedSuffix) || strings.HasSuffix(n, swapSuffix) || strings.HasSuffix(n, swapEndExt) {
					t.Fatalf("crash after %q (rescan %v): %s left", s.step, rescan, n)
				}
			}
			r.SetHighWatermark(r.EndOffset())
			mustClean(t, r, t0)
			if got := logView(t, r); !slices.Equal(got, final) {
				t.Fatalf("crash after %q (rescan %v): cleaned again %v, want %v", s.step, rescan, got, final)
			}
			r.Close()
		}
	}
}

// Rule: fillers stop where the leader epoch changes, so every epoch still
// starts at a batch and the leader-epoch cache matches the cleaned log
// (reopened with the checkpoint, and rebuilt from the batches without it).
func TestCleanKeepsLeaderEpochStarts(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, compactConfig())
	ts := t0.UnixMilli()
	for epoch := int32(1); epoch <= 4; epoch++ {
		for i := 0; i < 3; i++ {
			// Every key but "last" is written again later: epochs 1-3
			// lose every record.
			kv := fmt.Sprintf("k%d=e%d", i, epoch)
			if epoch == 4 {
				kv = "last=" + kv
			}
			if _, err := l.Append(plainKV(ts, kv), epoch, t0); err != nil {
				t.Fatal(err)
			}
		}
		forceRoll(t, l)
	}
	for i := 0; i < 3; i++ {
		if _, err := l.Append(plainKV(ts, fmt.Sprintf("k%d=final", i)), 4, t0); err != nil {
			t.Fatal(err)
		}
	}
	forceRoll(t, l)
	l.SetHighWatermark(l.EndOffset())
	epochs := l.EpochEntries()
	st := mustClean(t, l, t0)
	if st.FillerBatches != 4 {
		t.Fatalf("stats %+v, want a filler per epoch", st)
	}
	for _, e := range epochs {
		res, err := l.Read(e.StartOffset, 1, 1<<62)
		if err != nil || len(res.Batches) == 0 {
			t.Fatalf("read epoch %d start %d: %v", e.Epoch, e.StartOffset, err)
		}
		if h, _ := batch.ParseHeader(res.Batches[0]); h.BaseOffset != e.StartOffset || h.PartitionLeaderEpoch != e.Epoch {
			t.Fatalf("epoch %d starts at %d, batch there %+v", e.Epoch, e.StartOffset, h)
		}
	}
	l.Close()
	os.Remove(filepath.Join(dir, epochCheckpointFile))
	l = openLog(t, dir, compactConfig())
	defer l.Close()
	if got := l.EpochEntries(); !slices.Equal(got, epochs) {
		t.Fatalf("epochs rebuilt from the cleaned log %v, want %v", got, epochs)
	}
}

// Rule: retention (compact,delete) deleting segments while a clean reads
// them stops the pass without an error; the log stays whole.
func TestCleanRacesRetention(t *testing.T) {
	cfg := compactConfig()
	cfg.CleanupPolicy, cfg.RetentionMs = PolicyCompactDelete, 1000
	cfg.MinCleanableDirtyRatio = 0
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	fillKeyed(t, l, 30, 20, 7)
	l.SetHighWatermark(l.EndOffset())
	done := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < 20 && err == nil; i++ {
			_, err = l.Clean(context.Background(), t0)
		}
		done <- err
	}()
	for len(l.Segments()) > 1 {
		if _, err := l.EnforceRetention(t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Clean racing retention: %v", err)
	}
	if got := logView(t, l); len(got) != 1 {
		t.Fatalf("log after retention %v", got)
	}
}

// Rule: a pass whose context ends stops, removes its partial files and
// leaves the log as it was (here: cancelled before the first batch).
func TestCleanStopsWhenContextEnds(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, compactConfig())
	defer l.Close()
	before := fillKeyed(t, l, 3, 10, 2)
	l.SetHighWatermark(l.EndOffset())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Clean(ctx, t0); err != context.Canceled {
		t.Fatalf("Clean with an ended context: %v", err)
	}
	if got := logView(t, l); !slices.Equal(got, before) {
		t.Fatalf("log changed: %v", got)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), cleanedSuffix) {
			t.Fatalf("%s left", e.Name())
		}
	}
	if st := mustClean(t, l, t0); !st.Cleaned {
		t.Fatalf("the next pass did not run: %+v", st)
	}
}

// Rule: a truncation into the cleaned part lowers the cleaner checkpoint,
// so what is appended there again counts as dirty and is compacted.
func TestTruncationLowersCleanerCheckpoint(t *testing.T) {
	l := openLog(t, t.TempDir(), compactConfig())
	defer l.Close()
	fillKeyed(t, l, 4, 10, 4)
	l.SetHighWatermark(l.EndOffset())
	mustClean(t, l, t0)
	ckpt := filepath.Join(l.dir, cleanerCheckpointFile)
	if v, err := readCheckpoint(ckpt); err != nil || v != 40 {
		t.Fatalf("checkpoint %d, %v", v, err)
	}
	if err := l.TruncateTo(37); err != nil { // k3=s3-7, a surviving batch
		t.Fatal(err)
	}
	if v, err := readCheckpoint(ckpt); err != nil || v != 37 {
		t.Fatalf("checkpoint after truncation %d, %v", v, err)
	}
	for _, kv := range []string{"k3=a", "k3=b"} {
		mustAppend(t, l, plainKV(t0.UnixMilli(), kv))
	}
	forceRoll(t, l)
	mustAppend(t, l, plainKV(t0.UnixMilli(), "k9=active"))
	l.SetHighWatermark(l.EndOffset())
	if st := mustClean(t, l, t0); st.FirstDirtyOffset != 37 {
		t.Fatalf("stats %+v", st)
	}
	want := []string{"k2=s3-6@36", "k3=b@38", "k9=active@39"}
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
