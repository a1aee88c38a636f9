package client

import (
	"fmt"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/kafkarecords"
)

// Compression is a codec the producer compresses its batches with
// (WithCompression): Kafka's codecs, with Kafka's numbers, which a
// compressed batch names in its attributes (decision 67).
type Compression int8

// The codecs.
const (
	CompressionNone   = Compression(kafkarecords.None)
	CompressionGzip   = Compression(kafkarecords.Gzip)
	CompressionSnappy = Compression(kafkarecords.Snappy)
	CompressionLZ4    = Compression(kafkarecords.LZ4)
	CompressionZstd   = Compression(kafkarecords.Zstd)
)

// String is the codec's name as Kafka spells it: none, gzip, snappy,
// lz4, zstd.
func (c Compression) String() string { return kafkarecords.Codec(c).String() }

// ParseCompression reads a codec's name (none, gzip, snappy, lz4, zstd).
func ParseCompression(name string) (Compression, error) {
	c, ok := kafkarecords.ParseCodec(name)
	if !ok {
		return 0, fmt.Errorf("sluice: unknown compression %q (none, gzip, snappy, lz4 or zstd)", name)
	}
	return Compression(c), nil
}

// WithCompression compresses every batch the producer sends with c
// (default CompressionNone). A compressed batch carries its records in
// Kafka's record encoding, compressed (docs/record-format.md "Compressed
// batches"); the broker stores it as sent, unless the topic's
// compression.type says otherwise, and every consumer — this package's,
// Kafka clients — decompresses it. Compression costs the producer CPU and
// saves network, disk and the replicas' bandwidth; lz4 and zstd are the
// usual choices (docs/benchmarks.md). Batches still close at
// WithBatchBytes of uncompressed records, and a record's size is checked
// against the limits uncompressed.
func WithCompression(c Compression) ProducerOption {
	return func(cfg *producerConfig) error {
		if !kafkarecords.Codec(c).Known() {
			return fmt.Errorf("sluice: unknown compression %d", c)
		}
		cfg.compression = c
		return nil
	}
}

// compress replaces data, a finished uncompressed batch, by its
// compressed form in a buffer of bufs, and gives data's buffer back. A
// batch that cannot be compressed (none can: batches stay far below the
// 64 MiB a compressed batch may hold) is sent as it is.
func compress(data []byte, c Compression, bufs *bufPool) []byte {
	if c == CompressionNone {
		return data
	}
	out, err := batch.Compress(bufs.get(), data, kafkarecords.Codec(c))
	if err != nil {
		bufs.put(out)
		return data
	}
	bufs.put(data)
	return out
}
