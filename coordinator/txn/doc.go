// Package txn is the transaction coordinator: its pure core (DESIGN §10,
// docs/design.md decision 30) and its shard adapter, Coordinator (two
// layers, below). The core holds the transaction states and their allowed
// predecessors, the per-transactional-id Metadata, the transitions each
// coordinator request makes, the __transaction_state record format, and the
// map from a transactional id to its __transaction_state partition.
//
// # Two layers
//
// The pure core — state.go, metadata.go, transitions.go, record.go,
// load.go, partition.go — holds rules only, for the same reason
// cluster/replication and cluster/controller's FSM do: no network,
// goroutines, clock reads, locks or storage. It imports nothing of Sluice
// but the error table, the partition name and the key hash, and is tested
// table-driven without sockets.
//
// The shard adapter — the files coordinator*.go — is Coordinator, the
// transaction coordinator on coordinator/runtime (decisions 32, 53 and
// 54): it loads the __transaction_state partitions this node leads,
// answers the coordinator requests by running the core, persists and
// applies as below, sends markers through a MarkerWriter and takes
// producer ids from a ProducerIDSource (coordinator_deps.go). Package
// coordinator implements those two and the broker's runtime.Log
// (coordinator.ReplicaStateLog); the node wires them in, and this package
// never imports it. Names read as txn.Metadata, txn.EndTxn,
// txn.Coordinator instead of repeating "Txn".
//
// # Write first, apply after
//
// Every transition is a function from the current Metadata (nil when the
// id is unknown) and a request to a Result. A Result never changes its
// input; it carries the Metadata to persist (Result.Write), Kafka's
// "TxnTransitMetadata". The caller (Coordinator) must:
//
//  1. Encode Result.Write with EncodeRecord and append it to the id's
//     __transaction_state partition (PartitionFor), as leader at the
//     coordinator epoch (that partition's leader epoch, as heard by the
//     coordinator's cluster.LeadershipListener), with
//     cluster.ReplicaManager.AppendCommitted.
//  2. Only once that append returns nil (committed: below the high
//     watermark), replace its in-memory Metadata with *Result.Write, then
//     answer the requester (Result.Err, Result.ProducerID,
//     Result.ProducerEpoch) and, if Result.SendMarkers, send the markers.
//     If the append fails, memory is left as it was and the requester
//     gets a retriable error (NOT_COORDINATOR when leadership was lost,
//     else COORDINATOR_NOT_AVAILABLE), as Kafka does. When the error
//     wraps cluster.ErrCommitUnknown the record may still commit, so the
//     old Metadata may be stale: the caller must not decide another
//     transition for that id from it until it knows (it re-reads the
//     partition from the log, or keeps answering ErrConcurrent until the
//     record is below the high watermark or truncated). Leadership lost
//     means the partition is reloaded anyway.
//
// A Result with Write == nil changes nothing and is answered at once.
//
// One transition in flight per transactional id: from step 1 until step 2
// has applied (or dropped) the Result, the caller answers every other
// request for that id with ErrConcurrent (CONCURRENT_TRANSACTIONS,
// retriable) instead of calling this package, as Kafka's pendingState
// does. The marker sender's own Complete is the one call that follows a
// Prepare* write without waiting for a request.
//
// Markers: when the applied Write is in PrepareCommit or PrepareAbort, the
// coordinator writes a COMMIT or ABORT marker (producer id and epoch of
// the Write, coordinator epoch = the partition leader epoch) to every
// partition in Write.Partitions — none for an empty transaction — and then
// calls Complete and persists its Result the same way. A coordinator that
// loads a partition and finds an id in Prepare* resends its markers
// (Metadata.PendingMarkers) and completes it.
//
// # Two transaction versions
//
// Sluice serves both client transaction versions Kafka 4.x serves
// (ClientVersion, docs/design.md decision 69), and records in Metadata
// (and its record) the version of each transaction's client, as Kafka's
// clientTransactionVersion:
//
//   - TV2 (KIP-890 part 2), what the gRPC door always speaks: the
//     partition leader receiving a transactional produce adds the
//     partition (AddPartitions), and every commit or abort bumps the
//     epoch — Prepare*, its markers and Complete* carry the epoch + 1,
//     which the producer continues with.
//   - TV1 (Kafka clients that send AddPartitionsToTxn and AddOffsetsToTxn
//     themselves and EndTxn below v5: librdkafka, kafkajs): the client's
//     AddPartitions adds; the partition leader and the group coordinator
//     only verify (AddPartitionsRequest.VerifyOnly, KIP-890 part 1); EndTxn
//     prepares, writes markers and completes at the producer's current
//     epoch, which the producer keeps.
//
// Requests say their version (the zero value is TV1, as Kafka's level 0);
// the stored version decides what the coordinator does on its own: a
// fence or timeout abort bumps the epoch once for either version (so the
// old producer is fenced) and sends its markers with the aborted
// transaction's version, and a TV2 EndTxn is a retry of a bumped commit
// only when the stored transaction was TV2. InitProducerId is the same for
// both, so a TV1 and a TV2 client sharing a transactional id fence each
// other as any two producers do.
package txn
