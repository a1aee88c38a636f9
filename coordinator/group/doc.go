// Package group is the consumer-group coordinator: its pure core (DESIGN
// §11, docs/design.md decision 39) and its shard adapter, Coordinator (two
// layers, below). The core is the membership state machine of
// the ConsumerGroupHeartbeat protocol in the style of Kafka's KIP-848, with
// the assignors run on the server ("uniform", "range"), the per-member
// reconciliation that revokes before it assigns, the member checks of
// OffsetCommit and TxnOffsetCommit, and the records and offsets state of
// the coordinator's log, __consumer_offsets. Beside it, the classic
// protocol of Kafka clients (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup; files classic*.go, docs/design.md decision 70): a
// ClassicGroup relays the members' protocol metadata and the leader's
// assignment, and its record in __consumer_offsets survives a failover,
// as a KIP-848 group's members do (decision 72).
// A group id is one protocol's at a time.
//
// # Two layers
//
// The pure core — every file but coordinator*.go — holds rules only: no
// network, goroutines, clock reads, locks or storage. Every method takes
// the time it should act at; the owner of a Group (Coordinator) serialises
// calls to it — a Group is not safe for concurrent use.
//
// The shard adapter — the files coordinator*.go — is Coordinator, the
// group coordinator on coordinator/runtime (decisions 40, 53 and 54): it
// loads the __consumer_offsets partitions this node leads into an
// OffsetsState each, runs every group's Group for its heartbeats, writes
// offsets, group epochs and members to the log before applying them and
// answering, rebuilds each group with its members at load, and serves
// the offset, describe, list and delete requests. It reads and appends
// through a runtime.Log and a TxnOffsetAppender, which the node wires in
// (coordinator.ReplicaStateLog and cluster.ReplicaManager); this package
// never imports package coordinator.
//
// # The model
//
// A Group has a group epoch, bumped whenever what the assignor sees
// changes: a member joins, leaves or is fenced; a member's subscription or
// rack changes — a regex subscription's matches included, as topics are
// created or deleted (regex.go, decision 73); the group's assignor
// changes (the one most members ask for); or the partition count or
// racks of a subscribed topic change. At
// every bump the group's assignor computes, synchronously, the target
// assignment for that epoch (AssignmentEpoch == Epoch after every call but
// RestoreEpoch on a group with members).
//
// Each member then converges towards its target on its own heartbeats
// (reconcile.go, Kafka's CurrentAssignmentBuilder): partitions the target
// takes away are revoked first — the member is answered its assignment
// without them and keeps its epoch (UnrevokedPartitions) until a heartbeat
// reports them released; only then does it move to the target epoch and
// get the target's partitions that no other member still holds
// (UnreleasedPartitions until they are released by their previous owner,
// then Stable). A partition is never in two members' assignments at once.
//
// # What the caller persists
//
// The coordinator persists committed offsets and KIP-848 membership as
// Kafka does (persist.go, decision 72): the group record (group epoch,
// target assignment epoch, hash of the metadata the target was computed
// from) and one MemberRecord per member — its metadata (subscription,
// rack, client id, timeouts, instance id, assignor), its epoch and
// previous epoch, reconciliation state, assigned partitions, partitions
// pending revocation, and its share of the target. After a coordinator
// failover the new coordinator rebuilds each group (Restore): members
// keep their ids, epochs and assignments and go on heartbeating, their
// session (and a revoking member's rebalance) timers restarting at the
// load; members that do not come back expire as usual. A classic group
// is persisted whole (ClassicGroupRecord) whenever a rebalance
// completes, and restored Stable with its members (RestoreClassic): the
// owner writes ClassicGroup.PendingRecord, reports RecordWritten, and
// only then delivers TakeAnswers.
//
// Unlike coordinator/txn, a call changes the Group in place (a heartbeat's
// answer depends on every member before it). So the order is: call;
// append what PendingRecords returns (the group record if the epoch,
// assignment epoch or metadata moved, the records of the members whose
// persisted state changed, tombstones for members gone — one batch; a
// plain heartbeat has none) to __consumer_offsets; report
// RecordsWritten; answer only once it is committed (an answer may carry
// the new epoch as a member epoch). If that append fails, do not
// answer: the Group is ahead of the log, so drop it and rebuild it
// (Restore from the log, RestoreEpoch at the epoch it tried, Forget the
// members it tried to write) before serving the group again, as the
// coordinator does after losing leadership.
//
// # The log
//
// The records of __consumer_offsets (record.go, DESIGN §11, decision 40)
// and OffsetsState (offsets_state.go): the committed and
// transaction-pending offsets, group records and member records of one partition of the
// topic, rebuilt by replaying its batches (the log is the state). Like a
// Group it reads no clock and does no I/O; Coordinator runs one per led
// partition.
//
// # Time
//
// Session and rebalance timeouts are deadlines kept per member; the caller
// calls Expire at NextDeadline (or later) with the current time.
package group
