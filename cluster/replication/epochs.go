package replication

import "github.com/sluice-io/sluice/storage"

// UndefinedEpoch is the leader epoch of "no epoch": a log without
// epoch entries asks with it, and OffsetForLeaderEpoch answers it when it
// knows no suitable epoch (Kafka OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH).
// It is the storage cache's latest epoch when empty: one constant.
const UndefinedEpoch = storage.UndefinedEpoch

// UndefinedOffset is the end offset that goes with UndefinedEpoch
// (Kafka UNDEFINED_EPOCH_OFFSET).
const UndefinedOffset int64 = -1

// EpochEntry is one entry of a replica's leader-epoch cache: the first
// offset written in Epoch. A cache is a slice of entries, oldest first,
// with strictly increasing epochs and non-decreasing start offsets (Kafka
// LeaderEpochFileCache enforces the same and drops entries that break it).
// Epoch E covers the offsets from its StartOffset up to the next entry's
// StartOffset, or up to the log end offset for the last entry.
//
// It is storage's type, the entry a storage.Log's cache holds, so that
// Log.EpochEntries passes in as it is. This type and UndefinedEpoch are
// all this package takes from storage: it still does no I/O.
type EpochEntry = storage.EpochEntry

// LatestEpoch is the epoch a follower sends in OffsetForLeaderEpoch: the
// last entry's epoch, or UndefinedEpoch for an empty cache.
func LatestEpoch(entries []EpochEntry) int32 {
	if len(entries) == 0 {
		return UndefinedEpoch
	}
	return entries[len(entries)-1].Epoch
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch for the log whose epoch
// cache is entries (oldest first) and whose log end offset is leo: the
// largest epoch <= requested that the log has, and the end offset of that
// epoch, i.e. the first offset *not* in it (the next entry's start, or leo
// for the latest epoch). It is the same lookup on both sides: the leader
// answers followers with it, and a follower applies it to its own cache
// to interpret the answer (KIP-279). entries is not modified.
//
// The cases, exactly as Kafka's LeaderEpochFileCache.endOffsetFor:
//
//   - requested is UndefinedEpoch, or entries is empty:
//     (UndefinedEpoch, UndefinedOffset).
//   - requested is the latest epoch: (requested, leo). For a leader the
//     latest epoch is the one still being written.
//   - requested is above the latest epoch: (UndefinedEpoch,
//     UndefinedOffset). A leader adds its own epoch to its cache when it
//     is elected, so its latest epoch is larger than any epoch a follower
//     can hold and this answer means a follower is ahead of its leader.
//   - requested is below the first entry: (requested, first StartOffset).
//     Earlier epochs were removed with the segments that held them
//     (retention); the first known start offset is where the log this
//     replica can serve begins, so a follower truncates no further than
//     that (KAFKA-7415; before it Kafka answered UNDEFINED here, which
//     sent followers back to unsafe high-watermark truncation).
//   - otherwise: (largest epoch <= requested, start offset of the first
//     entry with a larger epoch).
func EndOffsetForEpoch(entries []EpochEntry, leo int64, requested int32) (int32, int64) {
	if requested == UndefinedEpoch || len(entries) == 0 {
		return UndefinedEpoch, UndefinedOffset
	}
	latest := entries[len(entries)-1]
	switch {
	case requested == latest.Epoch:
		return requested, leo
	case requested > latest.Epoch:
		return UndefinedEpoch, UndefinedOffset
	case requested < entries[0].Epoch:
		return requested, entries[0].StartOffset
	}
	// entries[0].Epoch <= requested < latest.Epoch: find the first entry
	// with a larger epoch; the one before it is the floor.
	i := 1
	for entries[i].Epoch <= requested {
		i++
	}
	return entries[i-1].Epoch, entries[i].StartOffset
}

// LeaderEndOffsetForEpoch is EndOffsetForEpoch as a leader in
// leaderEpoch answers it when its cache may not hold an entry for
// leaderEpoch yet, because the cache learns an epoch at its first append
// under it. Kafka instead assigns the new epoch at the leader's LEO on
// election (Partition.makeLeader → maybeAssignEpochStartOffset). That
// entry matters: after fast leader changes a follower may hold epochs
// above every epoch the new leader has written, and it must be told
// where the leader's log ends (its LEO) rather than UNDEFINED. Here the
// leader's epoch is treated as starting at leo whenever the cache's
// latest epoch is lower, which gives Kafka's answers exactly; a trailing
// entry starting at leo (an epoch with no records) is replaced, as
// LeaderEpochFileCache.assign would. entries is not modified.
func LeaderEndOffsetForEpoch(entries []EpochEntry, leo int64, leaderEpoch, requested int32) (int32, int64) {
	if leaderEpoch > LatestEpoch(entries) {
		n := len(entries)
		for n > 0 && entries[n-1].StartOffset >= leo {
			n--
		}
		entries = append(entries[:n:n], EpochEntry{Epoch: leaderEpoch, StartOffset: leo})
	}
	return EndOffsetForEpoch(entries, leo, requested)
}
