package replication_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/replication"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is t0 plus ms milliseconds.
func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

const lag = time.Second

// base is a three-replica partition led by 1 at leader epoch 5: LEO 10,
// persisted HW 4, epoch started at 10, lag window 1s, min ISR 1.
func base(mod func(*replication.TrackerConfig)) replication.TrackerConfig {
	cfg := replication.TrackerConfig{
		LeaderID:               1,
		LeaderEpoch:            5,
		PartitionEpoch:         10,
		Replicas:               []int32{1, 2, 3},
		ISR:                    []int32{1, 2, 3},
		LeaderLEO:              10,
		HW:                     4,
		LeaderEpochStartOffset: 10,
		LagTimeMax:             lag,
		MinInsyncReplicas:      1,
		Now:                    at(0),
	}
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

func isr(ids ...int32) func(*replication.TrackerConfig) {
	return func(c *replication.TrackerConfig) { c.ISR = ids }
}

// step is one action on a Tracker and its checks.
type step func(t *testing.T, tr *replication.Tracker)

func wantHW(hw int64) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		if got := tr.HW(); got != hw {
			t.Fatalf("HW = %d, want %d", got, hw)
		}
	}
}

func appendTo(ms int, leo int64, wantChanged bool, hw int64) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		if got := tr.LeaderAppended(leo, at(ms)); got != wantChanged || tr.HW() != hw {
			t.Fatalf("t=%dms LeaderAppended(%d) = %v, HW %d; want %v, HW %d", ms, leo, got, tr.HW(), wantChanged, hw)
		}
	}
}

// fetch records a fetch and checks the whole FetchUpdate.
func fetch(ms int, id int32, offset int64, want replication.FetchUpdate) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		got, err := tr.FollowerFetched(id, offset, at(ms))
		if err != nil {
			t.Fatalf("t=%dms FollowerFetched(%d, %d): %v", ms, id, offset, err)
		}
		if got != want {
			t.Fatalf("t=%dms FollowerFetched(%d, %d) = %+v, want %+v", ms, id, offset, got, want)
		}
	}
}

// upd is shorthand for a FetchUpdate.
func upd(hw int64, changed, expand bool) replication.FetchUpdate {
	return replication.FetchUpdate{HW: hw, HWChanged: changed, ExpandISR: expand}
}

func wantShrink(ms int, ids ...int32) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		if got := tr.ShrinkCandidates(at(ms)); !slices.Equal(got, ids) {
			t.Fatalf("t=%dms ShrinkCandidates = %v, want %v", ms, got, ids)
		}
	}
}

func begin(ids ...int32) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		req, err := tr.BeginISRChange(ids)
		if err != nil {
			t.Fatalf("BeginISRChange(%v): %v", ids, err)
		}
		want := replication.AlterRequest{LeaderID: tr.LeaderID(), LeaderEpoch: tr.LeaderEpoch(), PartitionEpoch: tr.PartitionEpoch(), NewISR: ids}
		if req.LeaderID != want.LeaderID || req.LeaderEpoch != want.LeaderEpoch || req.PartitionEpoch != want.PartitionEpoch || !slices.Equal(req.NewISR, ids) {
			t.Fatalf("BeginISRChange(%v) = %+v, want %+v", ids, req, want)
		}
	}
}

func beginErr(target error, ids ...int32) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		pendingBefore, _ := tr.PendingISR()
		if _, err := tr.BeginISRChange(ids); !errors.Is(err, target) {
			t.Fatalf("BeginISRChange(%v) error = %v, want %v", ids, err, target)
		}
		if p, _ := tr.PendingISR(); !slices.Equal(p, pendingBefore) {
			t.Fatalf("refused BeginISRChange changed the pending ISR to %v", p)
		}
	}
}

func commit(ms int, epoch int32, wantChanged bool, hw int64, ids ...int32) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		changed, err := tr.ISRChangeCommitted(ids, epoch, at(ms))
		if err != nil {
			t.Fatalf("ISRChangeCommitted(%v, %d): %v", ids, epoch, err)
		}
		if changed != wantChanged || tr.HW() != hw || !slices.Equal(tr.ISR(), ids) || tr.PartitionEpoch() != epoch {
			t.Fatalf("ISRChangeCommitted(%v, %d) = %v, HW %d, ISR %v, epoch %d; want %v, HW %d",
				ids, epoch, changed, tr.HW(), tr.ISR(), tr.PartitionEpoch(), wantChanged, hw)
		}
		if _, ok := tr.PendingISR(); ok {
			t.Fatal("change still pending after commit")
		}
	}
}

func fail(ms int, wantChanged bool, hw int64) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		if changed := tr.ISRChangeFailed(at(ms)); changed != wantChanged || tr.HW() != hw {
			t.Fatalf("ISRChangeFailed = %v, HW %d; want %v, HW %d", changed, tr.HW(), wantChanged, hw)
		}
	}
}

func wantCaughtUpAt(id int32, ms int) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		f, ok := tr.Follower(id)
		if !ok || !f.LastCaughtUpTime.Equal(at(ms)) {
			t.Fatalf("follower %d LastCaughtUpTime = %v (ok %v), want t=%dms", id, f.LastCaughtUpTime.Sub(t0), ok, ms)
		}
	}
}

func wantEnough(want bool) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		if got := tr.EnoughReplicas(); got != want {
			t.Fatalf("EnoughReplicas = %v, want %v (ISR %v, maximal %v)", got, want, tr.ISR(), tr.MaximalISR())
		}
	}
}

func ineligible(id int32) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		if err := tr.SetISREligible(id, false); err != nil {
			t.Fatal(err)
		}
	}
}

type trackerCase struct {
	name  string
	cfg   replication.TrackerConfig
	steps []step
}

func runTrackerCases(t *testing.T, tests []trackerCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := replication.NewTracker(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.steps {
				s(t, tr)
			}
		})
	}
}

// TestHighWatermark checks Partition.maybeIncrementLeaderHW's rules.
func TestHighWatermark(t *testing.T) {
	runTrackerCases(t, []trackerCase{
		{
			name: "HW is the minimum LEO over the ISR, leader included",
			cfg:  base(nil),
			steps: []step{
				wantHW(4),
				fetch(10, 2, 10, upd(4, false, false)), // 3 has not fetched yet
				fetch(20, 3, 7, upd(7, true, false)),
				fetch(30, 3, 10, upd(10, true, false)),
				appendTo(40, 15, false, 10),
				fetch(50, 2, 15, upd(10, false, false)),
				fetch(60, 3, 12, upd(12, true, false)),
			},
		},
		{
			name: "an ISR follower with an unknown LEO holds the HW after election",
			cfg:  base(nil),
			steps: []step{
				appendTo(10, 20, false, 4),
				fetch(20, 2, 20, upd(4, false, false)),
				fetch(30, 3, 20, upd(20, true, false)),
			},
		},
		{
			name: "the HW never moves backwards, even when a follower's LEO does",
			cfg:  base(isr(1, 2)),
			steps: []step{
				fetch(10, 2, 10, upd(10, true, false)),
				fetch(20, 2, 6, upd(10, false, false)),
				appendTo(30, 12, false, 10),
			},
		},
		{
			name: "with only the leader in the ISR the HW follows the leader LEO",
			cfg:  base(isr(1)),
			steps: []step{
				wantHW(10), // advanced at election
				appendTo(10, 12, true, 12),
				appendTo(20, 11, false, 12), // out-of-order report: ignored
			},
		},
		{
			name: "a persisted HW above the leader LEO is lowered to it",
			cfg: base(func(c *replication.TrackerConfig) {
				c.HW = 50
				c.ISR = []int32{1, 2}
			}),
			steps: []step{wantHW(10)},
		},
		{
			// KIP-966: offsets count as committed only on at least
			// min.insync.replicas replicas.
			name: "the HW does not advance while the ISR is below min.insync.replicas",
			cfg: base(func(c *replication.TrackerConfig) {
				c.ISR = []int32{1}
				c.MinInsyncReplicas = 2
			}),
			steps: []step{
				wantHW(4),
				appendTo(10, 20, false, 4),
				fetch(20, 2, 10, upd(4, false, true)),
				begin(1, 2),
				appendTo(30, 21, false, 4), // pending member counts for the min, committed ISR does not
				commit(40, 11, true, 10, 1, 2),
				fetch(50, 2, 21, upd(21, true, false)),
			},
		},
		{
			name: "min.insync.replicas above the replication factor is capped at it",
			cfg: base(func(c *replication.TrackerConfig) {
				c.Replicas, c.ISR, c.MinInsyncReplicas = []int32{1}, []int32{1}, 3
			}),
			steps: []step{wantHW(10), wantEnough(true), appendTo(10, 11, true, 11)},
		},
		{
			// Kafka's shouldWaitForReplicaToJoinIsr: without it the
			// follower would chase a HW equal to the leader's LEO.
			name: "a caught-up eligible follower outside the ISR holds the HW until it joins",
			cfg:  base(func(c *replication.TrackerConfig) { c.Replicas, c.ISR = []int32{1, 2}, []int32{1} }),
			steps: []step{
				wantHW(10),
				fetch(100, 2, 10, upd(10, false, true)), // at the leader's LEO: caught up at 100ms
				appendTo(200, 20, false, 10),            // 2 is caught up and holds the HW
				fetch(300, 2, 15, upd(15, true, true)),  // reached the LEO of its previous fetch: caught up as of 100ms
				appendTo(1100, 25, false, 15),           // 1100-100 <= 1s: still caught up
				appendTo(1101, 26, true, 26),            // no longer caught up: the HW leaves it behind
			},
		},
		{
			name: "a follower outside the ISR that never fetched does not hold the HW",
			cfg:  base(func(c *replication.TrackerConfig) { c.Replicas, c.ISR = []int32{1, 2}, []int32{1} }),
			steps: []step{
				wantHW(10),
				appendTo(10, 20, true, 20),
			},
		},
		{
			// KIP-841: fenced or shutting-down brokers are not ISR
			// eligible.
			name: "an ineligible follower neither holds the HW nor is proposed for the ISR",
			cfg:  base(func(c *replication.TrackerConfig) { c.Replicas, c.ISR = []int32{1, 2}, []int32{1} }),
			steps: []step{
				ineligible(2),
				fetch(100, 2, 10, upd(10, false, false)),
				appendTo(200, 20, true, 20),
				beginErr(replication.ErrNotCaughtUp, 1, 2),
			},
		},
		{
			// KIP-497: the maximal ISR.
			name: "a pending expansion counts the new member for the HW; a failed one stops counting it",
			cfg:  base(func(c *replication.TrackerConfig) { c.Replicas, c.ISR = []int32{1, 2}, []int32{1} }),
			steps: []step{
				fetch(100, 2, 10, upd(10, false, true)),
				begin(1, 2),
				appendTo(5000, 20, false, 10), // 2 is not caught up any more, but it is being added
				fail(5000, true, 20),
			},
		},
		{
			name: "a pending shrink still counts the member being removed until the shrink commits",
			cfg:  base(isr(1, 2)),
			steps: []step{
				fetch(10, 2, 10, upd(10, true, false)),
				appendTo(100, 20, false, 10),
				wantShrink(1010),
				wantShrink(1011, 2),
				begin(1),
				appendTo(1100, 25, false, 10),
				commit(1200, 11, true, 25, 1),
			},
		},
	})
}

// TestLastCaughtUpTime checks Replica.updateFetchStateOrThrow's rule and
// the shrink rule built on it (Partition.getOutOfSyncReplicas).
func TestLastCaughtUpTime(t *testing.T) {
	runTrackerCases(t, []trackerCase{
		{
			name: "fetching at the leader LEO makes the follower caught up at that fetch",
			cfg:  base(isr(1, 2)),
			steps: []step{
				fetch(500, 2, 10, upd(10, true, false)),
				wantCaughtUpAt(2, 500),
				appendTo(600, 11, false, 10),
				wantShrink(1500),
				wantShrink(1501, 2),
			},
		},
		{
			name: "reaching the leader LEO of the previous fetch makes it caught up as of the previous fetch",
			cfg:  base(isr(1, 2)),
			steps: []step{
				fetch(100, 2, 5, upd(5, true, false)), // leader LEO 10 at this fetch
				appendTo(150, 20, false, 5),
				fetch(200, 2, 10, upd(10, true, false)), // 10 >= 10: caught up as of 100ms
				wantCaughtUpAt(2, 100),
				wantShrink(1100),
				wantShrink(1101, 2),
			},
		},
		{
			name: "a fetch behind both the current and the previous leader LEO leaves lastCaughtUp unchanged",
			cfg:  base(isr(1, 2)),
			steps: []step{
				fetch(100, 2, 5, upd(5, true, false)),
				appendTo(150, 30, false, 5),
				fetch(200, 2, 8, upd(8, true, false)), // 8 < 10 (previous) and < 30 (now)
				wantCaughtUpAt(2, 0),                  // still the election's grant
				wantShrink(1000),
				wantShrink(1001, 2),
			},
		},
		{
			name: "lastCaughtUp never moves backwards",
			cfg:  base(isr(1, 2)),
			steps: []step{
				fetch(500, 2, 10, upd(10, true, false)),
				fetch(300, 2, 10, upd(10, false, false)), // an earlier time passed in late
				wantCaughtUpAt(2, 500),
			},
		},
		{
			name: "ISR followers get a full lag window after election",
			cfg:  base(nil),
			steps: []step{
				wantCaughtUpAt(2, 0),
				wantShrink(1000),
				wantShrink(1001, 2, 3),
			},
		},
		{
			name: "a follower at the leader LEO is never out of sync on an idle partition",
			cfg:  base(nil),
			steps: []step{
				fetch(100, 2, 10, upd(4, false, false)),
				fetch(100, 3, 10, upd(10, true, false)),
				wantShrink(100000),
				appendTo(100000, 11, false, 10),
				wantShrink(100000, 2, 3),
			},
		},
		{
			name: "a slow follower that fetches often but never catches up is shrunk",
			cfg:  base(isr(1, 2)),
			steps: []step{
				appendTo(0, 20, false, 4),
				fetch(300, 2, 12, upd(12, true, false)),
				appendTo(400, 30, false, 12),
				fetch(700, 2, 19, upd(19, true, false)), // < 20: the previous fetch's leader LEO
				appendTo(800, 40, false, 19),
				fetch(1001, 2, 29, upd(29, true, false)), // < 30
				wantShrink(1001, 2),
			},
		},
		{
			name: "no shrink candidates while an ISR change is in flight",
			cfg:  base(nil),
			steps: []step{
				begin(1, 2),
				wantShrink(5000),
				fail(5000, false, 4),
				wantShrink(5000, 2, 3),
			},
		},
		{
			name: "the leader and followers outside the ISR are never shrink candidates",
			cfg:  base(isr(1, 2)),
			steps: []step{
				appendTo(10, 20, false, 4),
				wantShrink(5000, 2),
			},
		},
	})
}

// TestISRExpansion checks Partition.maybeExpandIsr / isFollowerInSync and
// the guard in BeginISRChange.
func TestISRExpansion(t *testing.T) {
	// Replica 4 is outside the ISR; 3 has not fetched, holding the HW at
	// 4, below the leader epoch start offset 10.
	cfg := base(func(c *replication.TrackerConfig) { c.Replicas, c.ISR = []int32{1, 2, 3, 4}, []int32{1, 2, 3} })
	runTrackerCases(t, []trackerCase{
		{
			name: "a follower joins once its LEO reaches both the HW and the leader epoch start offset (KIP-101)",
			cfg:  cfg,
			steps: []step{
				fetch(10, 4, 4, upd(4, false, false)), // >= HW 4 but < epoch start 10
				fetch(20, 4, 9, upd(4, false, false)),
				fetch(30, 4, 10, upd(4, false, true)),
				begin(1, 2, 3, 4),
				wantEnough(true),
				commit(40, 11, false, 4, 1, 2, 3, 4),
				fetch(50, 4, 10, upd(4, false, false)), // already in the ISR
			},
		},
		{
			name: "no expansion is proposed while another ISR change is in flight",
			cfg:  cfg,
			steps: []step{
				begin(1, 2),
				fetch(10, 4, 10, upd(4, false, false)),
				beginErr(replication.ErrISRChangeInFlight, 1, 2, 4),
				fail(20, false, 4),
				fetch(30, 4, 10, upd(4, false, true)),
			},
		},
		{
			name: "BeginISRChange refuses a replica that fell below the HW since it was reported",
			cfg:  base(func(c *replication.TrackerConfig) { c.Replicas, c.ISR = []int32{1, 2}, []int32{1} }),
			steps: []step{
				fetch(100, 2, 10, upd(10, false, true)),
				appendTo(5000, 20, true, 20), // 2 stopped being caught up; the HW moved on
				beginErr(replication.ErrNotCaughtUp, 1, 2),
				fetch(5100, 2, 20, upd(20, false, true)),
				begin(1, 2),
			},
		},
		{
			name: "the controller's committed ISR is authoritative even if it differs from the proposal",
			cfg:  cfg,
			steps: []step{
				fetch(10, 4, 10, upd(4, false, true)),
				begin(1, 2, 3, 4),
				commit(20, 12, false, 4, 1, 2, 4), // the controller also removed 3
				// 3 still has the lag window granted at election, so as a
				// caught-up replica it holds the HW (at its unknown LEO)
				// until the window ends.
				fetch(30, 2, 10, upd(4, false, false)),
				fetch(1001, 2, 10, upd(10, true, false)),
			},
		},
	})
}

func wantExpand(ids ...int32) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		if got := tr.ExpandCandidates(); !slices.Equal(got, ids) {
			t.Fatalf("ExpandCandidates = %v, want %v", got, ids)
		}
	}
}

func eligible(id int32) step {
	return func(t *testing.T, tr *replication.Tracker) {
		t.Helper()
		if err := tr.SetISREligible(id, true); err != nil {
			t.Fatal(err)
		}
	}
}

// A follower that may join the ISR without fetching again (with fetch
// sessions a caught-up follower does not list its idle partitions) is
// found by ExpandCandidates once what held it back is gone.
func TestISRExpandCandidates(t *testing.T) {
	cfg := base(func(c *replication.TrackerConfig) { c.Replicas, c.ISR = []int32{1, 2, 3, 4}, []int32{1, 2, 3} })
	runTrackerCases(t, []trackerCase{
		{
			name: "a caught-up follower that was ineligible joins once eligible",
			cfg:  cfg,
			steps: []step{
				ineligible(4),
				fetch(10, 4, 10, upd(4, false, false)),
				wantExpand(),
				eligible(4),
				wantExpand(4),
			},
		},
		{
			name: "a caught-up follower blocked by an ISR change in flight joins after it",
			cfg:  cfg,
			steps: []step{
				begin(1, 2),
				fetch(10, 4, 10, upd(4, false, false)),
				wantExpand(),
				fail(20, false, 4),
				wantExpand(4),
			},
		},
		{
			name: "a follower behind the leader epoch start is no candidate",
			cfg:  cfg,
			steps: []step{
				fetch(10, 4, 9, upd(4, false, false)),
				wantExpand(),
			},
		},
	})
}

// TestEnoughReplicas checks the min.insync.replicas rule for acks=all
// before an append, over the minimal ISR.
func TestEnoughReplicas(t *testing.T) {
	minISR := func(n int32, ids ...int32) replication.TrackerConfig {
		return base(func(c *replication.TrackerConfig) { c.MinInsyncReplicas, c.ISR = n, ids })
	}
	runTrackerCases(t, []trackerCase{
		{name: "committed ISR at min.insync.replicas is enough", cfg: minISR(2, 1, 2), steps: []step{wantEnough(true)}},
		{name: "committed ISR below min.insync.replicas is not", cfg: minISR(2, 1), steps: []step{wantEnough(false)}},
		{name: "min.insync.replicas 1 with only the leader", cfg: minISR(1, 1), steps: []step{wantEnough(true)}},
		{
			name: "a pending shrink already stops counting the member being removed",
			cfg:  minISR(2, 1, 2),
			steps: []step{
				begin(1),
				wantEnough(false),
				fail(10, false, 4),
				wantEnough(true),
			},
		},
		{
			name: "a pending expansion does not count the member being added until committed",
			cfg: base(func(c *replication.TrackerConfig) {
				c.MinInsyncReplicas, c.ISR, c.LeaderEpochStartOffset = 2, []int32{1}, 4
			}),
			steps: []step{
				fetch(10, 2, 4, upd(4, false, true)),
				begin(1, 2),
				wantEnough(false),
				commit(20, 11, false, 4, 1, 2),
				wantEnough(true),
			},
		},
	})
}

func TestAcksAllResult(t *testing.T) {
	tr, err := replication.NewTracker(base(func(c *replication.TrackerConfig) { c.MinInsyncReplicas, c.ISR = 2, []int32{1, 2} }))
	if err != nil {
		t.Fatal(err)
	}
	check := func(offset int64, wantDone bool, wantCode sluicev1.ErrorCode) {
		t.Helper()
		done, err := tr.AcksAllResult(offset)
		if done != wantDone || errs.Code(err) != wantCode {
			t.Fatalf("AcksAllResult(%d) = %v, %v; want %v, %v", offset, done, err, wantDone, wantCode)
		}
		if tr.Committed(offset) != wantDone {
			t.Fatalf("Committed(%d) = %v, want %v", offset, !wantDone, wantDone)
		}
	}
	check(4, false, sluicev1.ErrorCode_NONE)
	check(3, true, sluicev1.ErrorCode_NONE)
	if _, err := tr.FollowerFetched(2, 10, at(10)); err != nil {
		t.Fatal(err)
	}
	check(9, true, sluicev1.ErrorCode_NONE)
	check(10, false, sluicev1.ErrorCode_NONE)
	// The ISR shrinks below min.insync.replicas while offset 9 waited:
	// committed, but not as the producer required.
	if _, err := tr.BeginISRChange([]int32{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.ISRChangeCommitted([]int32{1}, 11, at(20)); err != nil {
		t.Fatal(err)
	}
	check(9, true, sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND)
	if tr.LeaderAppended(30, at(30)) || tr.HW() != 10 {
		t.Fatalf("HW moved to %d under min.insync.replicas", tr.HW())
	}
}

func TestFollowerFetchedErrors(t *testing.T) {
	tests := []struct {
		name    string
		replica int32
		offset  int64
		want    sluicev1.ErrorCode
	}{
		{"replica not in the assignment", 9, 5, sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH},
		{"the leader itself", 1, 5, sluicev1.ErrorCode_INVALID_REQUEST},
		{"offset beyond the leader LEO", 2, 11, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE},
		{"negative offset", 2, -1, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := replication.NewTracker(base(nil))
			if err != nil {
				t.Fatal(err)
			}
			_, err = tr.FollowerFetched(tc.replica, tc.offset, at(10))
			if !errors.Is(err, &errs.Error{Code: tc.want}) {
				t.Fatalf("error = %v, want code %v", err, tc.want)
			}
			if f, _ := tr.Follower(2); f.LEO != -1 || !f.LastFetchTime.IsZero() {
				t.Fatalf("refused fetch changed follower state: %+v", f)
			}
		})
	}
}

func TestBeginISRChangeValidation(t *testing.T) {
	tests := []struct {
		name string
		isr  []int32
		want error
	}{
		{"duplicate member", []int32{1, 2, 2}, replication.ErrInvalidISR},
		{"member outside the replicas", []int32{1, 2, 7}, replication.ErrInvalidISR},
		{"leader left out", []int32{2, 3}, replication.ErrInvalidISR},
		{"same as the committed ISR", []int32{3, 1, 2}, replication.ErrInvalidISR},
		{"empty", nil, replication.ErrInvalidISR},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := replication.NewTracker(base(nil))
			if err != nil {
				t.Fatal(err)
			}
			beginErr(tc.want, tc.isr...)(t, tr)
		})
	}
}

func TestISRChangeCommittedErrors(t *testing.T) {
	tr, err := replication.NewTracker(base(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.ISRChangeCommitted([]int32{1, 2}, 11, at(0)); !errors.Is(err, replication.ErrNoISRChangeInFlight) {
		t.Fatalf("commit without a change: %v", err)
	}
	if tr.ISRChangeFailed(at(0)) {
		t.Fatal("ISRChangeFailed without a change moved the HW")
	}
	begin(1, 2)(t, tr)
	if _, err := tr.ISRChangeCommitted([]int32{1, 2}, 9, at(0)); !errors.Is(err, replication.ErrStaleMetadata) {
		t.Fatalf("stale commit: %v", err)
	}
	if _, err := tr.ISRChangeCommitted([]int32{2, 3}, 11, at(0)); !errors.Is(err, replication.ErrInvalidISR) {
		t.Fatalf("commit without the leader: %v", err)
	}
	if p, ok := tr.PendingISR(); !ok || !slices.Equal(p, []int32{1, 2}) || !slices.Equal(tr.ISR(), []int32{1, 2, 3}) {
		t.Fatalf("refused commits changed state: pending %v %v, ISR %v", p, ok, tr.ISR())
	}
	// Equal partition epoch: the controller had nothing to change.
	commit(0, 10, false, 4, 1, 2)(t, tr)
}

func TestApplyMetadata(t *testing.T) {
	newTracker := func(t *testing.T) *replication.Tracker {
		t.Helper()
		tr, err := replication.NewTracker(base(nil))
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	t.Run("refused: newer leader epoch, older leader or partition epoch, invalid state", func(t *testing.T) {
		tr := newTracker(t)
		for _, tc := range []struct {
			leaderEpoch, partitionEpoch int32
			replicas, isr               []int32
			want                        error
		}{
			{6, 11, []int32{1, 2, 3}, []int32{1, 2}, replication.ErrNewLeaderEpoch},
			{4, 11, []int32{1, 2, 3}, []int32{1, 2}, replication.ErrStaleMetadata},
			{5, 9, []int32{1, 2, 3}, []int32{1, 2}, replication.ErrStaleMetadata},
			{5, 11, []int32{2, 3}, []int32{2, 3}, replication.ErrInvalidISR},
			{5, 11, []int32{1, 2, 3}, []int32{1, 4}, replication.ErrInvalidISR},
		} {
			if _, err := tr.ApplyMetadata(tc.leaderEpoch, tc.partitionEpoch, tc.replicas, tc.isr, at(0)); !errors.Is(err, tc.want) {
				t.Errorf("ApplyMetadata(%d, %d, %v, %v) error = %v, want %v", tc.leaderEpoch, tc.partitionEpoch, tc.replicas, tc.isr, err, tc.want)
			}
		}
		if !slices.Equal(tr.ISR(), []int32{1, 2, 3}) || tr.PartitionEpoch() != 10 {
			t.Fatalf("refused updates changed state: ISR %v, epoch %d", tr.ISR(), tr.PartitionEpoch())
		}
	})
	t.Run("a replay of the current state keeps the change in flight", func(t *testing.T) {
		tr := newTracker(t)
		begin(1, 2)(t, tr)
		if changed, err := tr.ApplyMetadata(5, 10, []int32{1, 2, 3}, []int32{1, 2, 3}, at(0)); err != nil || changed {
			t.Fatalf("replay: %v, %v", changed, err)
		}
		if _, ok := tr.PendingISR(); !ok {
			t.Fatal("replay dropped the change in flight")
		}
	})
	t.Run("an ISR change by the controller drops the change in flight", func(t *testing.T) {
		tr := newTracker(t)
		fetch(10, 2, 10, upd(4, false, false))(t, tr)
		begin(1, 3)(t, tr)
		changed, err := tr.ApplyMetadata(5, 11, []int32{1, 2, 3}, []int32{1, 2}, at(20))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tr.PendingISR(); ok {
			t.Fatal("change still in flight")
		}
		// 3, out of the ISR now, still holds the HW while the lag window
		// granted at election lasts (a caught-up replica may rejoin).
		if changed || tr.HW() != 4 {
			t.Fatalf("ApplyMetadata = %v, HW %d; want false, HW 4", changed, tr.HW())
		}
		appendTo(1000, 10, false, 4)(t, tr)
		appendTo(1001, 10, true, 10)(t, tr)
	})
	t.Run("a replica removed from the ISR and ineligible (fenced) releases the HW at once", func(t *testing.T) {
		tr := newTracker(t)
		fetch(10, 2, 10, upd(4, false, false))(t, tr)
		ineligible(3)(t, tr)
		changed, err := tr.ApplyMetadata(5, 11, []int32{1, 2, 3}, []int32{1, 2}, at(20))
		if err != nil || !changed || tr.HW() != 10 {
			t.Fatalf("ApplyMetadata = %v, %v, HW %d; want true, nil, HW 10", changed, err, tr.HW())
		}
	})
	t.Run("a reassignment adds an unknown follower and forgets a removed one", func(t *testing.T) {
		tr := newTracker(t)
		fetch(10, 2, 10, upd(4, false, false))(t, tr)
		fetch(10, 3, 8, upd(8, true, false))(t, tr)
		changed, err := tr.ApplyMetadata(5, 11, []int32{1, 2, 4}, []int32{1, 2}, at(20))
		if err != nil || !changed || tr.HW() != 10 {
			t.Fatalf("ApplyMetadata = %v, %v, HW %d; want true, nil, HW 10", changed, err, tr.HW())
		}
		if tr.FollowerLEO(3) != -1 {
			t.Errorf("removed follower 3 still has LEO %d", tr.FollowerLEO(3))
		}
		if _, ok := tr.Follower(3); ok {
			t.Error("removed follower 3 still tracked")
		}
		f, ok := tr.Follower(4)
		if !ok || f.LEO != -1 || !f.LastCaughtUpTime.IsZero() || !f.Eligible {
			t.Errorf("new follower 4 = %+v, %v; want unknown LEO, never caught up, eligible", f, ok)
		}
		if !slices.Equal(tr.Replicas(), []int32{1, 2, 4}) {
			t.Errorf("Replicas = %v", tr.Replicas())
		}
		// 4 is outside the ISR and never caught up: it does not hold the HW.
		appendTo(30, 12, false, 10)(t, tr)
		fetch(40, 2, 12, upd(12, true, false))(t, tr)
		if _, err := tr.FollowerFetched(3, 12, at(50)); errs.Code(err) != sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH {
			t.Errorf("fetch from removed replica: %v", err)
		}
	})
}

func TestNewTrackerValidation(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*replication.TrackerConfig)
	}{
		{"leader not in replicas", func(c *replication.TrackerConfig) { c.LeaderID = 9 }},
		{"leader not in ISR", func(c *replication.TrackerConfig) { c.ISR = []int32{2, 3} }},
		{"ISR member not in replicas", func(c *replication.TrackerConfig) { c.ISR = []int32{1, 4} }},
		{"duplicate replica", func(c *replication.TrackerConfig) { c.Replicas = []int32{1, 2, 2} }},
		{"duplicate ISR member", func(c *replication.TrackerConfig) { c.ISR = []int32{1, 1} }},
		{"no lag window", func(c *replication.TrackerConfig) { c.LagTimeMax = 0 }},
		{"min.insync.replicas 0", func(c *replication.TrackerConfig) { c.MinInsyncReplicas = 0 }},
		{"negative LEO", func(c *replication.TrackerConfig) { c.LeaderLEO = -1 }},
		{"negative HW", func(c *replication.TrackerConfig) { c.HW = -1 }},
		{"epoch start beyond LEO", func(c *replication.TrackerConfig) { c.LeaderEpochStartOffset = 11 }},
		{"negative epoch start", func(c *replication.TrackerConfig) { c.LeaderEpochStartOffset = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := replication.NewTracker(base(tc.mod)); !errors.Is(err, replication.ErrInvalidConfig) {
				t.Fatalf("error = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestTrackerCopiesSlices(t *testing.T) {
	cfg := base(nil)
	tr, err := replication.NewTracker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ISR[1], cfg.Replicas[1] = 9, 9
	got := tr.ISR()
	got[0] = 9
	if !slices.Equal(tr.ISR(), []int32{1, 2, 3}) || !slices.Equal(tr.Replicas(), []int32{1, 2, 3}) {
		t.Fatalf("tracker state aliased a caller's slice: ISR %v, replicas %v", tr.ISR(), tr.Replicas())
	}
	proposed := []int32{1, 2}
	req, err := tr.BeginISRChange(proposed)
	if err != nil {
		t.Fatal(err)
	}
	proposed[1], req.NewISR[0] = 3, 7
	if p, _ := tr.PendingISR(); !slices.Equal(p, []int32{1, 2}) {
		t.Fatalf("pending ISR aliased: %v", p)
	}
	if tr.InSyncCount() != 3 || !slices.Equal(tr.MaximalISR(), []int32{1, 2, 3}) {
		t.Fatalf("InSyncCount %d, MaximalISR %v", tr.InSyncCount(), tr.MaximalISR())
	}
}

func TestMaximalISRDuringExpansion(t *testing.T) {
	tr, err := replication.NewTracker(base(func(c *replication.TrackerConfig) {
		c.Replicas, c.ISR, c.LeaderEpochStartOffset = []int32{1, 2, 3}, []int32{1}, 7
	}))
	if err != nil {
		t.Fatal(err)
	}
	if tr.LeaderEpochStartOffset() != 7 || tr.LeaderEpoch() != 5 || tr.LeaderID() != 1 {
		t.Fatalf("accessors: start %d, epoch %d, leader %d", tr.LeaderEpochStartOffset(), tr.LeaderEpoch(), tr.LeaderID())
	}
	fetch(10, 3, 10, upd(10, false, true))(t, tr)
	fetch(10, 2, 10, upd(10, false, true))(t, tr)
	begin(1, 3, 2)(t, tr)
	if got := tr.MaximalISR(); !slices.Equal(got, []int32{1, 3, 2}) {
		t.Fatalf("MaximalISR = %v, want committed then added, [1 3 2]", got)
	}
	beginErr(replication.ErrISRChangeInFlight, 1, 2)(t, tr)
}

func TestFollowerLEO(t *testing.T) {
	tr, err := replication.NewTracker(base(nil))
	if err != nil {
		t.Fatal(err)
	}
	fetch(10, 2, 7, upd(4, false, false))(t, tr)
	for id, want := range map[int32]int64{1: 10, 2: 7, 3: -1, 8: -1} {
		if got := tr.FollowerLEO(id); got != want {
			t.Errorf("FollowerLEO(%d) = %d, want %d", id, got, want)
		}
	}
	if err := tr.SetISREligible(8, false); !errors.Is(err, replication.ErrInvalidISR) {
		t.Errorf("SetISREligible on an unknown replica: %v", err)
	}
}
