package replication_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluice-io/sluice/cluster/replication"
)

// simLog is a replica's log reduced to what truncation looks at: the
// leader epoch of every offset from start, and the leader-epoch cache,
// maintained the way Kafka's LeaderEpochFileCache is.
type simLog struct {
	start  int64
	epochs []int32 // epochs[i] is the epoch of offset start+i
	cache  []replication.EpochEntry
}

// records builds a log from offset 0 holding one record per epoch given.
func records(epochs ...int32) *simLog { return recordsFrom(0, epochs...) }

// recordsFrom builds a log whose first retained offset is start.
func recordsFrom(start int64, epochs ...int32) *simLog {
	l := &simLog{start: start}
	for _, e := range epochs {
		l.append(e)
	}
	return l
}

func (l *simLog) leo() int64 { return l.start + int64(len(l.epochs)) }

// assign is LeaderEpochFileCache.assign: entries that are not below the
// new one in both epoch and start offset are dropped, then it is added.
func (l *simLog) assign(epoch int32, start int64) {
	l.cache = slices.DeleteFunc(l.cache, func(e replication.EpochEntry) bool {
		return e.Epoch >= epoch || e.StartOffset >= start
	})
	l.cache = append(l.cache, replication.EpochEntry{Epoch: epoch, StartOffset: start})
}

func (l *simLog) append(epoch int32) {
	if replication.LatestEpoch(l.cache) != epoch {
		l.assign(epoch, l.leo())
	}
	l.epochs = append(l.epochs, epoch)
}

// lead is what a newly elected leader does (Partition.makeLeader): its
// cache gets the new epoch starting at its LEO, before any record.
func (l *simLog) lead(epoch int32) *simLog {
	l.assign(epoch, l.leo())
	return l
}

// answer is the leader's OffsetForLeaderEpoch answer.
func (l *simLog) answer(requested int32) replication.EpochEndOffset {
	e, end := replication.EndOffsetForEpoch(l.cache, l.leo(), requested)
	return replication.EpochEndOffset{LeaderEpoch: e, EndOffset: end}
}

// apply carries out a decision on the log and its cache.
func (l *simLog) apply(d replication.TruncationDecision) {
	switch {
	case d.Fully:
		l.start, l.epochs, l.cache = d.FetchFrom, nil, nil
	case d.Truncate:
		l.epochs = l.epochs[:min(d.TruncateTo, l.leo())-l.start]
		l.cache = slices.DeleteFunc(l.cache, func(e replication.EpochEntry) bool { return e.StartOffset >= d.TruncateTo })
	}
}

func (l *simLog) clone() *simLog {
	return &simLog{start: l.start, epochs: slices.Clone(l.epochs), cache: slices.Clone(l.cache)}
}

func (l *simLog) String() string {
	return fmt.Sprintf("start=%d epochs=%v cache=%v", l.start, l.epochs, l.cache)
}

func input(f *simLog, hw int64, leaderAnswer replication.EpochEndOffset, leaderLogStart int64) replication.TruncationInput {
	return replication.TruncationInput{
		LogStartOffset:       f.start,
		LogEndOffset:         f.leo(),
		HighWatermark:        hw,
		Epochs:               f.cache,
		Leader:               leaderAnswer,
		LeaderLogStartOffset: leaderLogStart,
	}
}

func answer(epoch int32, end int64) *replication.EpochEndOffset {
	return &replication.EpochEndOffset{LeaderEpoch: epoch, EndOffset: end}
}

// TestTruncationOffset checks one OffsetForLeaderEpoch round per
// scenario of KIP-101 and KIP-279. The leader's answer is computed from
// the leader's log unless the row gives it.
func TestTruncationOffset(t *testing.T) {
	tests := []struct {
		name     string
		follower *simLog
		hw       int64
		leader   *simLog
		answer   *replication.EpochEndOffset // overrides leader's answer
		want     replication.TruncationDecision
	}{
		{
			// A leads epoch 0 with m1, m2 (HW 2). B has fetched m2 but
			// not yet learned the new HW (1). B restarts: truncating to
			// its HW would drop m2, and if A then died B would lead
			// without the committed m2. With epochs B asks for epoch 0,
			// A answers (0, LEO 2) and B keeps m2.
			name:     "KIP-101 scenario 1: follower keeps a committed message above its stale HW",
			follower: records(0, 0), hw: 1,
			leader: records(0, 0),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, TruncateTo: 2, FetchFrom: 2},
		},
		{
			// The other half: B was elected in epoch 1 with m1, m2; A
			// comes back and must keep both.
			name:     "KIP-101 scenario 1: old leader returning under the new one keeps its committed tail",
			follower: records(0, 0), hw: 2,
			leader: records(0, 0).lead(1),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, TruncateTo: 2, FetchFrom: 2},
		},
		{
			// A led epoch 0 and wrote m3 that B never fetched (HW 2). B
			// leads epoch 1; A follows it and loses the uncommitted m3.
			name:     "leader change: follower's uncommitted message the new leader lacks is truncated",
			follower: records(0, 0, 0), hw: 2,
			leader: records(0, 0).lead(1),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, Truncate: true, TruncateTo: 2, FetchFrom: 2},
		},
		{
			// A leads with m1, m2 (HW 2, both acknowledged); B had m2
			// only in its page cache. Power fails on both (no fsync, as
			// in Sluice's default flush policy); B comes back with m1
			// only, is elected in epoch 1 and writes m3 at offset 1. A
			// returns: HW truncation would keep m2 at offset 1 while B has
			// m3 there (divergence). With epochs A truncates to 1 and
			// fetches m3. m2 was below A's HW and is lost: BelowHW.
			name:     "KIP-101 scenario 2: divergent logs after both replicas crash are resolved by epochs",
			follower: records(0, 0), hw: 2,
			leader: records(0).lead(1).appendR(1),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, Truncate: true, TruncateTo: 1, FetchFrom: 1, BelowHW: true},
		},
		{
			// A leads epoch 1 (offsets 0, 1); B has offset 0 only. B leads
			// epoch 2 and writes offsets 1, 2. A leads epoch 3 without
			// having seen them and writes offset 2. B follows A and asks
			// for epoch 2, which A never had: A answers (1, 2), the end
			// of its epoch 1. KIP-101 alone would truncate B to 2 and keep
			// its epoch-2 offset 1, which differs from A's. KIP-279: B
			// ends epoch 1 at offset 1, and truncates to min(1, 2).
			name:     "KIP-279: fast leader changes, follower asks for an epoch the leader never had",
			follower: records(1, 2, 2), hw: 1,
			leader: records(1, 1).lead(3).appendR(3),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, Truncate: true, TruncateTo: 1, FetchFrom: 1},
		},
		{
			// X leads epoch 0 (offset 0). A leads epoch 1 (offsets 1, 2),
			// B missed them. B leads epoch 2 (offset 1). A leads epoch 3
			// (offset 3). B asks for 2; A answers (1, 3); B never had
			// epoch 1, so it cuts everything after its epoch 0 and asks
			// again.
			name:     "KIP-279: follower lacks the answered epoch, truncates to its own earlier epoch and asks again",
			follower: records(0, 2), hw: 1,
			leader: records(0, 1, 1).lead(3).appendR(3),
			want:   replication.TruncationDecision{Rule: replication.RuleFollowerLacksEpoch, Truncate: true, TruncateTo: 1, FetchFrom: 1, NeedAnotherRound: true},
		},
		{
			name:     "KIP-279: second round of the previous scenario finds the common epoch, nothing more to cut",
			follower: records(0), hw: 1,
			leader: records(0, 1, 1).lead(3).appendR(3),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, TruncateTo: 1, FetchFrom: 1},
		},
		{
			name:     "follower ahead of the new leader in the last common epoch truncates to the leader's end offset",
			follower: records(1, 1, 1, 1, 1), hw: 3,
			leader: records(1, 1, 1).lead(2),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, Truncate: true, TruncateTo: 3, FetchFrom: 3},
		},
		{
			// The follower was elected in epoch 8 and lost leadership
			// before writing anything: its cache ends with {8, 2} at its
			// LEO. The leader (epochs 4, 7, 9) answers epoch 8 with (7, 3);
			// the follower never had 7, and the end of its epoch 5 is 2 =
			// its LEO. No record is cut but the empty epoch-8 entry is
			// (Truncate), else the next round would ask for 8 again.
			name:     "former leader that wrote nothing in its epoch: the empty epoch entry is cut, not just records",
			follower: records(5, 5).lead(8), hw: 0,
			leader: records(4, 4, 7, 9),
			want:   replication.TruncationDecision{Rule: replication.RuleFollowerLacksEpoch, Truncate: true, TruncateTo: 2, FetchFrom: 2, NeedAnotherRound: true},
		},
		{
			name:     "follower exactly equal to the new leader: no truncation",
			follower: records(0, 0, 1, 1), hw: 4,
			leader: records(0, 0, 1, 1).lead(2),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, TruncateTo: 4, FetchFrom: 4},
		},
		{
			name:     "follower restarting under the same leader epoch, equal logs: no truncation",
			follower: records(0, 0, 1, 1), hw: 2,
			leader: records(0, 0, 1, 1),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, TruncateTo: 4, FetchFrom: 4},
		},
		{
			name:     "follower behind the leader with the same history: no truncation",
			follower: records(0, 0), hw: 2,
			leader: records(0, 0, 0, 0, 1),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, TruncateTo: 2, FetchFrom: 2},
		},
		{
			// A: epochs 0,0 | 1,1 | 3,3,3; B: 0,0 | 1 | 2,2. Epoch 2 was
			// B's (A missed it), epoch 3 is A's (B missed it). B asks for
			// 2, A answers (1, 4); B's epoch 1 ends at 3.
			name:     "repeated failovers across four epochs truncate to the last common offset",
			follower: records(0, 0, 1, 2, 2), hw: 3,
			leader: records(0, 0, 1, 1, 3, 3, 3),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, Truncate: true, TruncateTo: 3, FetchFrom: 3},
		},
		{
			name:     "follower behind the leader's log start truncates fully and starts at it",
			follower: records(0, 0), hw: 2,
			leader: recordsFrom(10, 0, 0, 0, 0, 0, 1),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, TruncateTo: 2, Fully: true, FetchFrom: 10},
		},
		{
			// Follower lacks epoch 1 and must go back to offset 2, which
			// is below the leader's log start (5): no second round, start
			// over at 5.
			name:     "divergence point below the leader's log start: start over at it, no further round",
			follower: records(0, 0, 2), hw: 2,
			leader: recordsFrom(5, 1, 1, 3),
			want:   replication.TruncationDecision{Rule: replication.RuleFollowerLacksEpoch, Truncate: true, TruncateTo: 2, Fully: true, FetchFrom: 5},
		},
		{
			// The answer (2, 4) lies below the follower's first retained
			// offset 5: cutting to 4 empties the log, which restarts at 4.
			name:     "truncation below the follower's own log start empties the log (Fully at TruncateTo)",
			follower: recordsFrom(5, 3, 3, 3), hw: 5,
			answer: answer(2, 4),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, Truncate: true, TruncateTo: 4, Fully: true, FetchFrom: 4, BelowHW: true},
		},
		{
			name:     "empty follower log: nothing to truncate, fetch from 0",
			follower: records(), hw: 0,
			leader: records(0, 0, 1),
			want:   replication.TruncationDecision{Rule: replication.RuleHighWatermark, TruncateTo: 0, FetchFrom: 0},
		},
		{
			name:     "empty follower log, leader's log starts later: start at the leader's log start",
			follower: records(), hw: 0,
			leader: recordsFrom(7, 1, 1),
			want:   replication.TruncationDecision{Rule: replication.RuleHighWatermark, TruncateTo: 0, Fully: true, FetchFrom: 7},
		},
		{
			name:     "leader answers UNDEFINED: fall back to the follower's HW (KIP-101 legacy, unsafe)",
			follower: records(0, 0, 1), hw: 2,
			answer: answer(replication.UndefinedEpoch, replication.UndefinedOffset),
			want:   replication.TruncationDecision{Rule: replication.RuleHighWatermark, Truncate: true, TruncateTo: 2, FetchFrom: 2},
		},
		{
			name:     "leader answers an offset without an epoch (pre-KIP-279 protocol): truncate to it",
			follower: records(0, 0, 1), hw: 2,
			answer: answer(replication.UndefinedEpoch, 1),
			want:   replication.TruncationDecision{Rule: replication.RuleLeaderEndOffset, Truncate: true, TruncateTo: 1, FetchFrom: 1, BelowHW: true},
		},
		{
			name:     "leader answers an epoch above the one asked (protocol violation): truncate to its offset",
			follower: records(0, 1), hw: 1,
			answer: answer(5, 1),
			want:   replication.TruncationDecision{Rule: replication.RuleLeaderEndOffset, Truncate: true, TruncateTo: 1, FetchFrom: 1},
		},
		{
			name:     "leader end offset beyond the follower's LEO never extends the log",
			follower: records(0, 0), hw: 2,
			answer: answer(0, 9),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, TruncateTo: 2, FetchFrom: 2},
		},
		{
			name:     "follower HW above its LEO is read as its LEO",
			follower: records(0, 0, 0), hw: 7,
			leader: records(0, 0, 0).lead(1),
			want:   replication.TruncationDecision{Rule: replication.RuleEpochMatch, TruncateTo: 3, FetchFrom: 3},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ans replication.EpochEndOffset
			var leaderStart int64
			if tc.answer != nil {
				ans = *tc.answer
			} else {
				ans = tc.leader.answer(replication.LatestEpoch(tc.follower.cache))
				leaderStart = tc.leader.start
			}
			in := input(tc.follower, tc.hw, ans, leaderStart)
			epochs := slices.Clone(in.Epochs)
			got := replication.TruncationOffset(in)
			if got != tc.want {
				t.Errorf("TruncationOffset(%+v)\n got  %+v\n want %+v", in, got, tc.want)
			}
			if !slices.Equal(epochs, in.Epochs) {
				t.Errorf("input epochs modified: %v, was %v", in.Epochs, epochs)
			}
		})
	}
}

// resolve runs OffsetForLeaderEpoch rounds until the follower may fetch,
// applying each decision to f. It returns the number of rounds and the
// last decision.
func resolve(t *testing.T, f, leader *simLog, hw int64) (int, replication.TruncationDecision) {
	t.Helper()
	return resolveWith(t, f, leader, hw, leader.answer)
}

// resolveWith is resolve with the leader's answers given by answer.
func resolveWith(t *testing.T, f, leader *simLog, hw int64, answer func(int32) replication.EpochEndOffset) (int, replication.TruncationDecision) {
	t.Helper()
	for round := 1; ; round++ {
		if round > 100 {
			t.Fatalf("no convergence after 100 rounds: follower %v, leader %v", f, leader)
		}
		d := replication.TruncationOffset(input(f, hw, answer(replication.LatestEpoch(f.cache)), leader.start))
		if d.TruncateTo > f.leo() {
			t.Fatalf("round %d: TruncateTo %d beyond follower LEO %d", round, d.TruncateTo, f.leo())
		}
		f.apply(d)
		if !d.NeedAnotherRound {
			return round, d
		}
	}
}

func TestTruncationRoundsConverge(t *testing.T) {
	tests := []struct {
		name       string
		follower   *simLog
		leader     *simLog
		wantRounds int
		wantLEO    int64
	}{
		{"KIP-279 two rounds", records(0, 2), records(0, 1, 1).lead(3).appendR(3), 2, 1},
		{
			// The follower holds epochs 2, 4 and 6 that the leader never
			// had, each above a leader epoch it lacks: one round per
			// epoch peeled off.
			"one round per divergent epoch the follower holds",
			records(0, 0, 2, 4, 6), records(0, 0, 1, 3, 5, 7), 4, 2,
		},
		{"empty epoch entry at the follower's LEO, then divergence from offset 0", records(5, 5).lead(8), records(4, 4, 7, 9), 2, 0},
		{"no divergence: one round", records(0, 0, 1), records(0, 0, 1, 1).lead(2), 1, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rounds, _ := resolve(t, tc.follower, tc.leader, 0)
			if rounds != tc.wantRounds || tc.follower.leo() != tc.wantLEO {
				t.Errorf("rounds %d, follower LEO %d; want %d, %d (follower %v)", rounds, tc.follower.leo(), tc.wantRounds, tc.wantLEO, tc.follower)
			}
		})
	}
}

// TestTruncationMatchesLongestCommonPrefix replays random histories of
// leader elections (clean or not), appends and partial replication on
// three replicas, and checks the property KIP-101/279 exist for: after
// the rounds, a follower's log is exactly the longest common prefix of
// its old log and the leader's (log matching: the same epoch at the same
// offset means the same record), so nothing divergent survives and
// nothing shared is cut. It runs with Kafka's caches (a leader assigns its
// epoch at election, answers with EndOffsetForEpoch) and with caches that
// learn an epoch at its first append (answers with
// LeaderEndOffsetForEpoch).
func TestTruncationMatchesLongestCommonPrefix(t *testing.T) {
	for _, eager := range []bool{true, false} {
		name := map[bool]string{true: "epoch assigned at election", false: "epoch learned at first append"}[eager]
		t.Run(name, func(t *testing.T) { checkLongestCommonPrefix(t, eager) })
	}
}

func checkLongestCommonPrefix(t *testing.T, eager bool) {
	rng := rand.New(rand.NewPCG(101, 279))
	for history := 0; history < 500; history++ {
		replicas := []*simLog{records(), records(), records()}
		var trace []string
		for epoch := int32(0); epoch < 10; epoch++ {
			l := rng.IntN(len(replicas))
			leader := replicas[l]
			answer := leader.answer
			if eager {
				leader.lead(epoch)
			} else {
				answer = func(requested int32) replication.EpochEndOffset {
					e, end := replication.LeaderEndOffsetForEpoch(leader.cache, leader.leo(), epoch, requested)
					return replication.EpochEndOffset{LeaderEpoch: e, EndOffset: end}
				}
			}
			for range rng.IntN(4) {
				leader.append(epoch)
			}
			trace = append(trace, fmt.Sprintf("epoch %d: leader %d %v", epoch, l, leader.epochs))
			for i, f := range replicas {
				if i == l || rng.IntN(3) == 0 {
					continue // not every follower gets to fetch in every epoch
				}
				before := f.clone()
				lcp := commonPrefix(before, leader)
				_, d := resolveWith(t, f, leader, 0, answer)
				if d.Fully {
					t.Fatalf("history %d: unexpected full truncation with log start 0\n%v", history, trace)
				}
				if f.leo() != lcp || !slices.Equal(f.epochs, leader.epochs[:lcp]) {
					t.Fatalf("history %d: follower %d %v resolved to %v, want the common prefix of length %d with leader %v\n%v",
						history, i, before.epochs, f.epochs, lcp, leader.epochs, trace)
				}
				// Then it replicates part of what the leader has.
				for _, e := range leader.epochs[f.leo():][:rng.IntN(len(leader.epochs)-int(f.leo())+1)] {
					f.append(e)
				}
			}
		}
	}
}

func commonPrefix(a, b *simLog) int64 {
	n := 0
	for n < len(a.epochs) && n < len(b.epochs) && a.epochs[n] == b.epochs[n] {
		n++
	}
	return int64(n)
}

// appendR appends one record and returns the log, for building tables.
func (l *simLog) appendR(epoch int32) *simLog {
	l.append(epoch)
	return l
}

func TestTruncationRuleString(t *testing.T) {
	for rule, want := range map[replication.TruncationRule]string{
		replication.RuleEpochMatch:         "epoch-match",
		replication.RuleFollowerLacksEpoch: "follower-lacks-epoch",
		replication.RuleLeaderEndOffset:    "leader-end-offset",
		replication.RuleHighWatermark:      "high-watermark",
		replication.TruncationRule(99):     "unknown",
	} {
		if got := rule.String(); got != want {
			t.Errorf("TruncationRule(%d).String() = %q, want %q", int(rule), got, want)
		}
	}
}

// TestLazyLeaderCacheNeedsLeaderEpoch shows why LeaderEndOffsetForEpoch
// exists. The new leader (epoch 2) has written nothing and its cache,
// which learns epochs at the first append, ends at epoch 0. The follower
// holds epoch-1 records from a leader the new one never followed (its HW
// 3 says offset 2 was committed: the new leader's election was unclean).
// Asked
// for epoch 1, the plain lookup finds it above the cache and answers
// UNDEFINED, which sends the follower to unsafe HW truncation (it keeps
// its divergent offset 2, below its HW). Answering with the leader's
// epoch resolves it like Kafka: cut to 2.
func TestLazyLeaderCacheNeedsLeaderEpoch(t *testing.T) {
	leader := records(0, 0)
	follower := records(0, 0, 1, 1)
	const hw = 3
	e, end := replication.EndOffsetForEpoch(leader.cache, leader.leo(), 1)
	plain := replication.TruncationOffset(input(follower, hw, replication.EpochEndOffset{LeaderEpoch: e, EndOffset: end}, 0))
	if plain.Rule != replication.RuleHighWatermark || plain.TruncateTo != 3 {
		t.Fatalf("plain lookup: %+v, want the HW fallback to 3", plain)
	}
	e, end = replication.LeaderEndOffsetForEpoch(leader.cache, leader.leo(), 2, 1)
	got := replication.TruncationOffset(input(follower, hw, replication.EpochEndOffset{LeaderEpoch: e, EndOffset: end}, 0))
	want := replication.TruncationDecision{Rule: replication.RuleEpochMatch, Truncate: true, TruncateTo: 2, FetchFrom: 2, BelowHW: true}
	if got != want {
		t.Fatalf("with the leader's epoch: %+v, want %+v", got, want)
	}
}
