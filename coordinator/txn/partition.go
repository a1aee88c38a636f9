package txn

import "github.com/sluice-io/sluice/coordinator/keyhash"

// DefaultStatePartitions is transaction.state.log.num.partitions: the
// number of partitions of __transaction_state.
const DefaultStatePartitions = 50

// StateTopic is the internal topic holding the transaction records.
const StateTopic = "__transaction_state"

// IDHash is the 32-bit FNV-1a hash of the transactional id's UTF-8
// bytes (keyhash.Sum32, which both coordinators share).
func IDHash(transactionalID string) uint32 { return keyhash.Sum32(transactionalID) }

// PartitionFor returns the __transaction_state partition that holds
// transactionalID, and whose leader is its coordinator (decision 30):
// keyhash.PartitionFor, the hash both coordinators route by. It panics if
// numPartitions < 1.
func PartitionFor(transactionalID string, numPartitions int32) int32 {
	return keyhash.PartitionFor(transactionalID, numPartitions)
}
