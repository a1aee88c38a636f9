package batch_test

import (
	"bytes"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/kafkarecords"
)

func benchRecords() []testRecord {
	recs := make([]testRecord, 100)
	for i := range recs {
		recs[i] = testRecord{ts: baseTS + int64(i), key: []byte("key-0000"), value: bytes.Repeat([]byte{byte(i)}, 100)}
	}
	return recs
}

// BenchmarkCanonicalize measures the fast path: a canonical batch (what the
// Go client sends) validated and patched in place.
func BenchmarkCanonicalize(b *testing.B) {
	in := build(b, batch.PlainProducer, 0, benchRecords())
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := batch.Canonicalize(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCanonicalizeSlow measures the rebuilding path on proto.Marshal
// output of the same batch.
func BenchmarkCanonicalizeSlow(b *testing.B) {
	in := marshal(b, toMessage(b, build(b, batch.PlainProducer, 0, benchRecords())))
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := batch.Canonicalize(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBuilder(b *testing.B) {
	recs := benchRecords()
	size := int64(len(build(b, batch.PlainProducer, 0, recs)))
	b.SetBytes(size)
	b.ReportAllocs()
	var bld batch.Builder
	for b.Loop() {
		bld.Reset(baseTS)
		for _, r := range recs {
			bld.Add(r.ts, r.key, r.value, nil)
		}
		if bld.Finish(batch.PlainProducer, 0) == nil {
			b.Fatal("empty batch")
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	in := build(b, batch.PlainProducer, 0, benchRecords())
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := batch.Verify(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCanonicalizeSimple measures a simple-produce batch (decision
// 43) in the canonical layout: validated, then copied with its offset
// deltas filled.
func BenchmarkCanonicalizeSimple(b *testing.B) {
	in := simpleCanonical(b, batch.PlainProducer, benchRecords())
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := batch.Canonicalize(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckCompressed measures the check a broker runs once on
// every compressed batch it is sent (decompression and a walk of Kafka's
// records), by codec; bytes are the records uncompressed, in Kafka's
// encoding. BenchmarkForEachRecordCompressed is what a consumer pays to
// read one (CRC, decompression, decoding).
func BenchmarkCheckCompressed(b *testing.B) {
	recs := benchRecords()
	raw := kafkaEncode(recs)
	for _, codec := range []kafkarecords.Codec{kafkarecords.LZ4, kafkarecords.Zstd} {
		b.Run(codec.String(), func(b *testing.B) {
			in, _ := store(b, compressedBatch(b, codec, recs))
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := batch.CheckCompressed(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkForEachRecordCompressed(b *testing.B) {
	recs := benchRecords()
	raw := kafkaEncode(recs)
	for _, codec := range []kafkarecords.Codec{kafkarecords.None, kafkarecords.LZ4, kafkarecords.Zstd} {
		b.Run(codec.String(), func(b *testing.B) {
			in := build(b, batch.PlainProducer, 0, recs)
			if codec != kafkarecords.None {
				in, _ = store(b, compressedBatch(b, codec, recs))
			}
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := batch.ForEachRecord(in, func(batch.Record) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
