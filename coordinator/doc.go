// Package coordinator holds the broker-side coordinators that sit above the
// cluster layer. Today that is producer id allocation (producerid.go): a
// broker hands out producer ids from blocks the controller committed in Raft,
// prefetching the next block before the current one runs out.
//
// The transaction coordinator lives in coordinator/txn: its pure core
// (states, transitions, the __transaction_state record format and
// partition hash, decision 30) and its shard adapter on coordinator/runtime,
// txn.Coordinator (decision 32). What it needs from a broker is here: the
// broker's runtime.Log (ReplicaStateLog, statelog.go), the marker writer
// (txn_markerwriter.go), the partition leader's AddPartitionsToTxn
// verifier (txn_verifier.go), their per-broker batching (txn_batcher.go)
// and the coordinator locator (locate.go). The group coordinator
// (GroupCoordinator, group_coordinator.go and group_requests.go, decision
// 40) runs on coordinator/runtime over the core of coordinator/group.
package coordinator
