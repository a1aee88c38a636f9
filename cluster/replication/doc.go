// Package replication holds the pure decision logic of Sluice's partition
// replication (DESIGN §8), written as Kafka does it. It does no I/O: no
// storage, no network, no goroutines, no locks, no clock reads. Every
// input (offsets, epochs, the current time) is passed in and every
// decision comes back as a value, so the rules are tested table-driven
// without a cluster (DESIGN §1.2, STYLE 1–2).
//
// Two cores live here:
//
//   - Tracker (tracker.go): the leader's view of one partition's replicas.
//     It follows each follower's log end offset from its fetches, keeps
//     Kafka's lastCaughtUpTime per follower, computes the high watermark,
//     names the followers to remove from (ShrinkCandidates) or add to
//     (FetchUpdate.ExpandISR) the ISR, models the one AlterPartition
//     request that may be in flight, and answers the min.insync.replicas
//     checks of acks=all produce. Kafka: kafka.cluster.Partition and
//     kafka.cluster.Replica.
//   - TruncationOffset (truncation.go): where a follower that starts
//     following a (new) leader must truncate its log, from the leader's
//     answer to OffsetForLeaderEpoch (KIP-101, KIP-279). Kafka:
//     AbstractFetcherThread.getOffsetTruncationState. Its helper
//     EndOffsetForEpoch (epochs.go) is the leader-epoch-cache lookup both
//     sides use (Kafka LeaderEpochFileCache.endOffsetFor).
//
// Neither type is safe for concurrent use; each has one owner (the
// partition's goroutine, or a mutex the caller holds around every call).
package replication
