package kafkarecords

import "fmt"

// Codec is a Kafka compression codec, attribute bits 0-2 of a batch
// (Kafka's and Sluice's alike).
type Codec int8

// Kafka's codecs.
const (
	None   Codec = 0
	Gzip   Codec = 1
	Snappy Codec = 2
	LZ4    Codec = 3
	Zstd   Codec = 4
)

func (c Codec) String() string {
	switch c {
	case None:
		return "none"
	case Gzip:
		return "gzip"
	case Snappy:
		return "snappy"
	case LZ4:
		return "lz4"
	case Zstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", int8(c))
}

// Known reports whether c is one of Kafka's codecs (0-4).
func (c Codec) Known() bool { return c >= None && c <= Zstd }

// ParseCodec reads a codec's name as Kafka's compression.type and
// clients spell it: none, gzip, snappy, lz4, zstd.
func ParseCodec(name string) (Codec, bool) {
	for c := None; c <= Zstd; c++ {
		if c.String() == name {
			return c, true
		}
	}
	return 0, false
}
