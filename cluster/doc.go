// Package cluster is the broker's side of the cluster (DESIGN §6–§8): the
// metadata cache built from the controller's metadata stream, the broker
// lifecycle (registration, heartbeats, controlled shutdown), the replica
// manager that hosts this node's partition replicas as the image assigns
// them, the read path (fetch for consumers and followers), and the hooks
// coordinators implement (leadership listener, committed append). The
// controller quorum itself is in cluster/controller and membership in
// cluster/membership.
//
// # Pure rules and their I/O
//
// The replication rules are a pure core in cluster/replication: no locks,
// no storage, no network, no clock (DESIGN §1.2). This package is their
// I/O counterpart: it holds the locks, reads and writes the logs, talks to
// other brokers and reads the clock, and asks the core what to do.
//
//	rule (cluster/replication)    I/O here
//	tracker.go (ISR, HW, acks)    isr.go, append.go, read.go (follower accounting)
//	truncation.go (KIP-101/279)   truncation.go, fetcher.go
//	epochs.go (epoch lookup)      read.go (OffsetForLeaderEpoch)
//
// # Files
//
//	replica.go          Replica: this node's replica of one partition, and its accessors
//	replica_manager.go  ReplicaManager: hosting the replicas the image assigns (Apply), start, close
//	leadership.go       becoming leader or follower as the image says
//	isr.go              the leader's ISR and high-watermark upkeep, AlterPartition
//	read.go             the read path: Fetch for consumers and followers, OffsetForLeaderEpoch
//	append.go           produce appends, and the committed append of internal records and control batches
//	listener.go         LeadershipListener: telling coordinators about leadership changes
//	txn.go              transactions' partition side: verified transactional produce, markers
//	truncation.go       a follower's truncation to the divergence point
//	fetcher.go          follower fetchers: one per source broker
//	retention.go        retention and producer-id expiry
//	broker.go           broker lifecycle: registration, heartbeats, metadata stream
//	metadata.go         MetadataCache: this broker's copy of the metadata image
//	controllerclient.go calling the active controller; connection pool
//	topicconfig.go      topic config rules
//
// Lock order and goroutine ownership: docs/locks.md.
package cluster
