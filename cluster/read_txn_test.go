package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
)

// Tests of the read path with transactions (DESIGN §10): the last stable
// offset bounds read_committed fetches, consumers never see markers, and
// read_committed consumers never see aborted batches, while followers get
// every batch verbatim. Transactional batches are appended straight to the
// leader's log (the produce path still refuses them) and markers as a
// coordinator writes them.

func txnDataBatch(pid int64, epoch, seq int32, value string) []byte {
	var b batch.Builder
	b.Reset(1000)
	b.Add(1000, nil, []byte(value), nil)
	return b.Finish(batch.Producer{ID: pid, Epoch: epoch, BaseSequence: seq}, batch.AttrTransactional)
}

// leaderAppend appends b to p's log as its leader would (data through the
// idempotence rules, control through the marker rule) and accounts the
// leader's log end for the high watermark.
func leaderAppend(t *testing.T, p *Replica, b []byte, control bool, now time.Time) int64 {
	t.Helper()
	var last int64
	if control {
		res, err := p.log.AppendControl(b, p.LeaderEpoch(), now)
		if err != nil {
			t.Fatal(err)
		}
		last = res.LastOffset
	} else {
		res, err := p.log.Append(b, p.LeaderEpoch(), now)
		if err != nil {
			t.Fatal(err)
		}
		last = res.LastOffset
	}
	p.leaderAppended(last+1, now)
	return last
}

// batchOffsets is the base offsets of batches, each checked not to be a
// control batch when consumer is set.
func batchOffsets(t *testing.T, batches [][]byte, consumer bool) []int64 {
	t.Helper()
	var out []int64
	for _, b := range batches {
		h, err := batch.ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if consumer && h.IsControl() {
			t.Fatalf("a consumer was served the control batch at %d", h.BaseOffset)
		}
		out = append(out, h.BaseOffset)
	}
	return out
}

func equalOffsets(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Rule (DESIGN §10, ref §5): LSO = min(first offset of the oldest open
// transaction, HW); read_committed fetches stop at it and report it;
// read_uncommitted ones stop at the HW. Once the transaction aborts,
// read_committed leaves its batches out, neither isolation serves the
// marker, and NextFetchOffset is past everything looked at.
func TestFetchLastStableOffsetAndAbortedFiltering(t *testing.T) {
	r := newReadRig(t)
	p, err := r.m.Replica("s", 0)
	if err != nil {
		t.Fatal(err)
	}
	const pid = 7
	leaderAppend(t, p, plainBatch(1), false, r.now)                // 0
	leaderAppend(t, p, txnDataBatch(pid, 0, 0, "a"), false, r.now) // 1: open
	leaderAppend(t, p, plainBatch(1), false, r.now)                // 2
	if hw, lso := p.HighWatermark(), p.LastStableOffset(); hw != 3 || lso != 1 {
		t.Fatalf("open transaction: HW %d LSO %d, want 3 1", hw, lso)
	}
	got := r.fetch(consumerFetch(FetchTxnCommitted, part("s", 0))).Partitions[0]
	if got.Err != nil || got.LastStableOffset != 1 || got.HighWatermark != 3 || got.NextFetchOffset != 1 ||
		!equalOffsets(batchOffsets(t, got.Batches, true), []int64{0}) {
		t.Fatalf("read_committed with the transaction open: %+v", got)
	}
	got = r.fetch(consumerFetch(FetchHighWatermark, part("s", 0))).Partitions[0]
	if got.Err != nil || got.NextFetchOffset != 3 || !equalOffsets(batchOffsets(t, got.Batches, true), []int64{0, 1, 2}) {
		t.Fatalf("read_uncommitted with the transaction open: %+v", got)
	}

	// The coordinator aborts: the marker goes through the committed append.
	marker := batch.MarkerBatch(batch.Producer{ID: pid, Epoch: 1}, batch.ControlAbort, 0, 1000)
	res, err := r.m.AppendCommitted(context.Background(), TopicPartition{Topic: "s", Partition: 0}, marker, NoLeaderEpoch, r.now)
	if err != nil || res.BaseOffset != 3 {
		t.Fatalf("abort marker: %+v %v", res, err)
	}
	if hw, lso := p.HighWatermark(), p.LastStableOffset(); hw != 4 || lso != 4 {
		t.Fatalf("after the abort: HW %d LSO %d, want 4 4", hw, lso)
	}
	got = r.fetch(consumerFetch(FetchTxnCommitted, part("s", 0))).Partitions[0]
	if got.Err != nil || got.LastStableOffset != 4 || got.NextFetchOffset != 4 ||
		!equalOffsets(batchOffsets(t, got.Batches, true), []int64{0, 2}) {
		t.Fatalf("read_committed after the abort: offsets %v %+v", batchOffsets(t, got.Batches, false), got)
	}
	got = r.fetch(consumerFetch(FetchHighWatermark, part("s", 0))).Partitions[0]
	if got.Err != nil || got.NextFetchOffset != 4 || !equalOffsets(batchOffsets(t, got.Batches, true), []int64{0, 1, 2}) {
		t.Fatalf("read_uncommitted after the abort: %+v", got)
	}
}

// Rule: a consumer never gets stuck on batches it may not see: a fetch
// whose range holds only left-out batches answers at once, with no batches
// and NextFetchOffset past them, even with min bytes and a long max wait.
func TestFetchAdvancesOverFilteredOnlyRange(t *testing.T) {
	r := newReadRig(t)
	p, _ := r.m.Replica("s", 0)
	const pid = 11
	leaderAppend(t, p, txnDataBatch(pid, 0, 0, "gone"), false, r.now)
	leaderAppend(t, p, batch.MarkerBatch(batch.Producer{ID: pid, Epoch: 1}, batch.ControlAbort, 0, 1000), true, r.now)
	for _, iso := range []FetchIsolation{FetchHighWatermark, FetchTxnCommitted} {
		params := consumerFetch(iso, part("s", 0))
		if iso == FetchHighWatermark {
			params.Partitions[0].FetchOffset = 1 // the marker alone
		}
		params.MinBytes, params.MaxWait = 1, 30*time.Second
		start := time.Now()
		got := r.fetch(params).Partitions[0]
		if got.Err != nil || len(got.Batches) != 0 || got.NextFetchOffset != 2 {
			t.Fatalf("isolation %d over filtered batches: %+v", iso, got)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("isolation %d: the fetch waited %v instead of answering the progress", iso, d)
		}
	}
}

// Rule (DESIGN §8, §10): followers still get every batch up to the log
// end verbatim — open transactions, aborted data and markers — while the
// leader's LSO stays at the open transaction once the HW passes it
// (storage's TestFollowerTransactionStateFromVerbatimAppends checks that a
// follower derives the same state from those bytes).
func TestFollowerFetchGetsTransactionalBatchesVerbatim(t *testing.T) {
	r := newReadRig(t)
	p, _ := r.m.Replica("r", 0)
	const pid = 5
	leaderAppend(t, p, txnDataBatch(pid, 0, 0, "x"), false, r.now)
	leaderAppend(t, p, batch.MarkerBatch(batch.Producer{ID: pid, Epoch: 1}, batch.ControlAbort, 0, 1000), true, r.now)
	leaderAppend(t, p, txnDataBatch(pid, 1, 0, "y"), false, r.now) // open
	got := r.fetch(r.followerFetch(0)).Partitions[0]
	if got.Err != nil || !equalOffsets(batchOffsets(t, got.Batches, false), []int64{0, 1, 2}) {
		t.Fatalf("follower fetch: %+v", got)
	}
	got = r.fetch(r.followerFetch(3)).Partitions[0] // caught up: HW 3
	if got.HighWatermark != 3 || got.LastStableOffset != 2 {
		t.Fatalf("leader after the follower caught up: HW %d LSO %d, want 3 2", got.HighWatermark, got.LastStableOffset)
	}
	if aborted := p.log.AbortedTransactions(0, 3); len(aborted) != 1 || aborted[0].FirstOffset != 0 || aborted[0].LastOffset != 1 {
		t.Fatalf("leader's aborted index %+v", aborted)
	}
}
