package replication_test

import (
	"slices"
	"testing"

	"github.com/sluice-io/sluice/cluster/replication"
)

// TestEndOffsetForEpoch checks the lookup against Kafka's
// LeaderEpochFileCache.endOffsetFor, case by case.
func TestEndOffsetForEpoch(t *testing.T) {
	// Epoch 2 is missing (a leader that wrote nothing, or whose entries
	// were replaced); the log's first retained offset is 5.
	cache := []replication.EpochEntry{{Epoch: 1, StartOffset: 5}, {Epoch: 3, StartOffset: 10}, {Epoch: 4, StartOffset: 20}}
	const leo = 30
	tests := []struct {
		name      string
		entries   []replication.EpochEntry
		leo       int64
		requested int32
		wantEpoch int32
		wantEnd   int64
	}{
		{"undefined epoch requested: undefined", cache, leo, replication.UndefinedEpoch, -1, -1},
		{"empty cache: undefined", nil, 0, 3, -1, -1},
		{"latest epoch: ends at the log end offset", cache, leo, 4, 4, 30},
		{"above the latest epoch: undefined (follower ahead of its leader)", cache, leo, 5, -1, -1},
		{"below the first epoch: the requested epoch ends where the retained log starts (KAFKA-7415)", cache, leo, 0, 0, 5},
		{"first epoch: ends at the next entry's start", cache, leo, 1, 1, 10},
		{"missing epoch: the largest epoch below it, ending at the next entry's start", cache, leo, 2, 1, 10},
		{"middle epoch", cache, leo, 3, 3, 20},
		{"single entry, requested", []replication.EpochEntry{{Epoch: 7, StartOffset: 0}}, 12, 7, 7, 12},
		{"single entry, below it", []replication.EpochEntry{{Epoch: 7, StartOffset: 3}}, 12, 6, 6, 3},
		{"latest epoch without records yet (new leader): ends at its start = LEO", []replication.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: 8}}, 8, 2, 2, 8},
		{"epoch before a leader with no records yet", []replication.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: 8}}, 8, 1, 1, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.entries)
			e, end := replication.EndOffsetForEpoch(tc.entries, tc.leo, tc.requested)
			if e != tc.wantEpoch || end != tc.wantEnd {
				t.Errorf("EndOffsetForEpoch(%v, %d, %d) = (%d, %d), want (%d, %d)", tc.entries, tc.leo, tc.requested, e, end, tc.wantEpoch, tc.wantEnd)
			}
			if !slices.Equal(before, tc.entries) {
				t.Errorf("entries modified: %v, was %v", tc.entries, before)
			}
		})
	}
}

// TestLeaderEndOffsetForEpoch checks that a leader whose cache has not
// learned its own epoch answers as Kafka's leader, which assigned it at
// election.
func TestLeaderEndOffsetForEpoch(t *testing.T) {
	cache := []replication.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 3, StartOffset: 5}}
	tests := []struct {
		name        string
		entries     []replication.EpochEntry
		leaderEpoch int32
		requested   int32
		wantEpoch   int32
		wantEnd     int64
	}{
		{"follower holds an epoch between the leader's last written and its current one", cache, 5, 4, 3, 8},
		{"the leader's current epoch, not cached yet", cache, 5, 5, 5, 8},
		{"above the leader's current epoch", cache, 5, 6, -1, -1},
		{"the leader's last written epoch ends at its LEO", cache, 5, 3, 3, 8},
		{"older epoch", cache, 5, 2, 1, 5},
		{"current epoch already cached: plain lookup", []replication.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 5, StartOffset: 6}}, 5, 4, 1, 6},
		{"empty trailing entry at the LEO is replaced", []replication.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 3, StartOffset: 8}}, 5, 3, 1, 8},
		{"empty cache: the whole log is the leader's epoch", nil, 2, 1, 1, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.entries)
			e, end := replication.LeaderEndOffsetForEpoch(tc.entries, 8, tc.leaderEpoch, tc.requested)
			if e != tc.wantEpoch || end != tc.wantEnd {
				t.Errorf("LeaderEndOffsetForEpoch(%v, 8, %d, %d) = (%d, %d), want (%d, %d)", tc.entries, tc.leaderEpoch, tc.requested, e, end, tc.wantEpoch, tc.wantEnd)
			}
			if !slices.Equal(before, tc.entries) {
				t.Errorf("entries modified: %v, was %v", tc.entries, before)
			}
		})
	}
}

func TestLatestEpoch(t *testing.T) {
	if got := replication.LatestEpoch(nil); got != replication.UndefinedEpoch {
		t.Errorf("LatestEpoch(nil) = %d, want %d", got, replication.UndefinedEpoch)
	}
	if got := replication.LatestEpoch([]replication.EpochEntry{{Epoch: 1}, {Epoch: 4, StartOffset: 9}}); got != 4 {
		t.Errorf("LatestEpoch = %d, want 4", got)
	}
}
