// Package keyhash is the hash that places a coordinator key (a
// transactional id, a group id) on a partition of its internal topic
// (decision 30). Both coordinators and every tool that finds a
// coordinator without asking use it; it has no dependencies so that the
// pure cores (coordinator/txn, coordinator/group) and the runtime can
// share it.
package keyhash

// FNV-1a 32-bit parameters (http://www.isthe.com/chongo/tech/comp/fnv/).
const (
	fnvOffset32 uint32 = 2166136261 // 0x811c9dc5
	fnvPrime32  uint32 = 16777619   // 0x01000193
)

// Sum32 is the 32-bit FNV-1a hash of key's UTF-8 bytes: start at
// 0x811c9dc5; for each byte, XOR it in, then multiply by 0x01000193
// modulo 2^32. (Go's hash/fnv.New32a computes the same.)
func Sum32(key string) uint32 {
	h := fnvOffset32
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= fnvPrime32
	}
	return h
}

// PartitionFor returns the partition of an internal topic with
// numPartitions partitions that holds key, and whose leader is its
// coordinator: Sum32(key) mod numPartitions, both taken as unsigned 32-bit
// integers. numPartitions must be the topic's partition count (≥ 1; it
// never changes after the topic is created, or every key would move). It
// panics if numPartitions < 1.
//
// Kafka uses abs(Java String.hashCode) mod N, which depends on UTF-16
// code units and Java's abs(MIN_VALUE); FNV-1a over UTF-8 needs a few
// lines in any language, so any client or tool can find the coordinator
// without asking (test vectors: coordinator/txn/testdata/partitions.json).
func PartitionFor(key string, numPartitions int32) int32 {
	if numPartitions < 1 {
		panic("keyhash: an internal topic needs at least one partition")
	}
	return int32(Sum32(key) % uint32(numPartitions))
}
