// Package coordinator holds what a broker wires into its coordinators,
// which run on coordinator/runtime in the packages of their pure cores:
// the transaction coordinator, txn.Coordinator (coordinator/txn, decisions
// 30 and 32), and the group coordinator, group.Coordinator
// (coordinator/group, decisions 39 and 40). Neither imports this package.
//
// It holds producer id allocation (producerid.go: a broker hands out
// producer ids from blocks the controller committed in Raft, prefetching
// the next block before the current one runs out; a txn.ProducerIDSource),
// the coordinator locator both coordinators are found by (locate.go), the
// broker's runtime.Log over its replica manager (ReplicaStateLog,
// statelog.go), and the transaction coordinator's inter-broker senders:
// the marker writer (txn_markerwriter.go, a txn.MarkerWriter), the
// partition leader's AddPartitionsToTxn verifier (txn_verifier.go) and
// their per-broker batching (txn_batcher.go).
package coordinator
