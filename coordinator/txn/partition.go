package txn

// DefaultStatePartitions is transaction.state.log.num.partitions: the
// number of partitions of __transaction_state.
const DefaultStatePartitions = 50

// StateTopic is the internal topic holding the transaction records.
const StateTopic = "__transaction_state"

// FNV-1a 32-bit parameters (http://www.isthe.com/chongo/tech/comp/fnv/).
const (
	fnvOffset32 uint32 = 2166136261 // 0x811c9dc5
	fnvPrime32  uint32 = 16777619   // 0x01000193
)

// IDHash is the 32-bit FNV-1a hash of the transactional id's UTF-8
// bytes: start at 0x811c9dc5; for each byte, XOR it in, then multiply by
// 0x01000193 modulo 2^32. (Go's hash/fnv.New32a computes the same.)
func IDHash(transactionalID string) uint32 {
	h := fnvOffset32
	for i := 0; i < len(transactionalID); i++ {
		h ^= uint32(transactionalID[i])
		h *= fnvPrime32
	}
	return h
}

// PartitionFor returns the __transaction_state partition that holds
// transactionalID, and whose leader is its coordinator (decision 30):
// IDHash(id) mod numPartitions, both taken as unsigned 32-bit integers.
// numPartitions must be the topic's partition count (≥ 1; it never
// changes after the topic is created, or every id would move).
// It panics if numPartitions < 1.
//
// Kafka uses abs(Java String.hashCode) mod N, which depends on UTF-16
// code units and Java's abs(MIN_VALUE); FNV-1a over UTF-8 needs a few
// lines in any language, so any client or tool can find the coordinator
// without asking, and its test vectors are in testdata/partitions.json.
func PartitionFor(transactionalID string, numPartitions int32) int32 {
	if numPartitions < 1 {
		panic("txn: __transaction_state needs at least one partition")
	}
	return int32(IDHash(transactionalID) % uint32(numPartitions))
}
