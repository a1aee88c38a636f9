package client

// Partitioner chooses the partition of a record that was sent with
// Partition -1. It is called with the producer's lock held, so it must be
// fast and must not call back into the Producer. numPartitions is > 0.
// A negative result asks for the producer's sticky partition (the one the
// topic's current keyless batch goes to).
type Partitioner interface {
	Partition(topic string, key []byte, numPartitions int32) int32
}

// HashPartitioner is the default Partitioner, compatible with Apache
// Kafka's default partitioner for keyed records:
//
//	partition = (murmur2(key) & 0x7fffffff) % numPartitions
//
// where murmur2 is Kafka's Utils.murmur2: MurmurHash2 (32-bit) with seed
// 0x9747b28c, m = 0x5bd1e995, r = 24, reading the key as little-endian
// 4-byte words. Keyless records (nil or empty key) go to the sticky
// partition: all records of one batch share a partition, and the next
// batch moves to the next partition round-robin.
type HashPartitioner struct{}

// Partition implements Partitioner.
func (HashPartitioner) Partition(_ string, key []byte, numPartitions int32) int32 {
	if len(key) == 0 {
		return -1
	}
	return int32(uint32(Murmur2(key))&0x7fffffff) % numPartitions
}

// Murmur2 is Kafka's Utils.murmur2 hash of data.
func Murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	n4 := n / 4
	for i := 0; i < n4; i++ {
		j := i * 4
		k := uint32(data[j]) | uint32(data[j+1])<<8 | uint32(data[j+2])<<16 | uint32(data[j+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n4*4:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}
