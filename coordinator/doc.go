// Package coordinator holds the broker-side coordinators that sit above the
// cluster layer. Today that is producer id allocation (producerid.go): a
// broker hands out producer ids from blocks the controller committed in Raft,
// prefetching the next block before the current one runs out.
//
// The transaction coordinator's rules live in the subpackage
// coordinator/txn (pure: states, transitions, the __transaction_state
// record format and partition hash, decision 30); TransactionCoordinator
// (txn_coordinator.go and the other txn_*.go files, decision 32) loads,
// persists and sends for it through the small interfaces of txn_deps.go.
package coordinator
