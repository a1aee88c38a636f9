package runtime

import "github.com/sluice-io/sluice/coordinator/keyhash"

// PartitionFor is the partition of an internal topic with numPartitions
// partitions that holds key (keyhash.PartitionFor: the hash both
// coordinators, FindCoordinator and the tools route by). It panics if
// numPartitions < 1.
func PartitionFor(key string, numPartitions int32) int32 {
	return keyhash.PartitionFor(key, numPartitions)
}
