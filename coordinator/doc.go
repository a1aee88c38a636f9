// Package coordinator holds the broker-side coordinators that sit above the
// cluster layer. Today that is producer id allocation (producerid.go): a
// broker hands out producer ids from blocks the controller committed in Raft,
// prefetching the next block before the current one runs out.
package coordinator
