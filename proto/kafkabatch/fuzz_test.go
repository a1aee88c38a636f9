package kafkabatch_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkabatch"
)

// fromKafkaSeeds are the seeds of FuzzFromKafka: the kmsg-built batches
// (the large one left out), some compressed, and refusals.
// testdata/fuzz/FuzzFromKafka holds the same ones (regenerate with
// SLUICE_WRITE_FUZZ_CORPUS=1 go test -run TestFuzzCorpusIsCurrent
// ./proto/kafkabatch/) plus the batches real clients sent (real-*,
// recorded and checked by kafka's TestRealTrafficSeeds: see
// kafka/testdata/README.md) and any crashers found.
func fromKafkaSeeds(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{}
	for name, kb := range kmsgBatches() {
		if name == "large-values" {
			continue
		}
		seeds[name] = kb.build(t, kafkabatch.None)
	}
	small := kmsgBatches()["headers"]
	for _, codec := range []kafkabatch.Codec{kafkabatch.Gzip, kafkabatch.Snappy, kafkabatch.LZ4, kafkabatch.Zstd} {
		seeds["headers-"+codec.String()] = small.build(t, codec)
	}
	seeds["headers-snappy-xerial"] = withCompressed(t, small, kafkabatch.Snappy, xerialSnappy(encodeRecords(small.records)))
	seeds["truncated"] = seeds["plain"][:len(seeds["plain"])-4]
	seeds["magic-1"] = patch(seeds["plain"], func(b []byte) { b[16] = 1 })
	seeds["empty"] = nil
	return seeds
}

// appendKafkaSeeds are the seeds of FuzzAppendKafka: canonical batches
// as FromKafka, the Go client's Builder, the log cleaner (gaps, no
// records) and MarkerBatch write them.
func appendKafkaSeeds(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{}
	for _, name := range []string{"headers", "nulls-and-empties", "commit-marker"} {
		seeds[name], _ = fromKafka(t, kmsgBatches()[name].build(t, kafkabatch.None))
	}
	var b batch.Builder
	b.Reset(baseTS)
	b.Add(baseTS, []byte("k"), []byte("v"), []batch.RecordHeader{{Key: "h", Value: []byte("1")}})
	b.Add(baseTS-3, nil, nil, nil)
	seeds["builder"] = b.Finish(batch.Producer{ID: 3, Epoch: 1, BaseSequence: 5}, batch.AttrTransactional)
	seeds["compacted"], _, _ = batch.Filter(nil, seeds["nulls-and-empties"], func(r batch.Record) bool { return r.Offset%2 == 0 })
	seeds["compacted-empty"], _, _ = batch.Filter(nil, seeds["headers"], func(batch.Record) bool { return false })
	// Compressed canonical batches (decision 67), as produced and as
	// compacted.
	seeds["headers-zstd"], _ = fromKafka(t, kmsgBatches()["headers"].build(t, kafkabatch.Zstd))
	seeds["nulls-and-empties-lz4"], _ = fromKafka(t, kmsgBatches()["nulls-and-empties"].build(t, kafkabatch.LZ4))
	seeds["compacted-gzip"], _, _ = batch.Filter(nil, uncompressedGzip(t, seeds["nulls-and-empties"]), func(r batch.Record) bool { return r.Offset%2 == 0 })
	return seeds
}

// The committed seed corpora must be what the seed functions generate,
// so that `go test -fuzz` starts from every seed. SLUICE_WRITE_FUZZ_CORPUS=1
// rewrites the files instead of checking them.
func TestFuzzCorpusIsCurrent(t *testing.T) {
	write := os.Getenv("SLUICE_WRITE_FUZZ_CORPUS") != ""
	for fuzz, seeds := range map[string]map[string][]byte{"FuzzFromKafka": fromKafkaSeeds(t), "FuzzAppendKafka": appendKafkaSeeds(t)} {
		dir := filepath.Join("testdata", "fuzz", fuzz)
		if write {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for name, b := range seeds {
			path := filepath.Join(dir, "seed-"+name)
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
			if write {
				if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s seed %s missing (regenerate with SLUICE_WRITE_FUZZ_CORPUS=1): %v", fuzz, name, err)
				continue
			}
			if string(got) != body {
				t.Errorf("%s seed %s differs from its seed function (regenerate with SLUICE_WRITE_FUZZ_CORPUS=1)", fuzz, name)
			}
		}
	}
}

// checkTyped fails unless err is an *errs.Error with one of the
// package's sentinels and that sentinel's code.
func checkTyped(t *testing.T, err error) {
	t.Helper()
	for sentinel, code := range kafkaCode {
		if errors.Is(err, sentinel) {
			if errs.Code(err) != code {
				t.Fatalf("%v has code %v, want %v", err, errs.Code(err), code)
			}
			return
		}
	}
	t.Fatalf("error without a sentinel: %v", err)
}

// FuzzFromKafka: no input panics; a refusal is typed; what is accepted
// is a canonical batch that batch.Canonicalize keeps and batch.Verify
// accepts, and AppendKafka of it (any codec) reads back to the same
// canonical batch, with kmsg seeing the records of the input.
func FuzzFromKafka(f *testing.F) {
	for _, b := range fromKafkaSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// As mutated, and resealed: most mutations break the CRC (and
		// the batchLength), which would keep the fuzzer out of the
		// records and the codecs.
		checkFromKafka(t, data)
		if len(data) >= kafkabatch.HeaderSize {
			sealed := bytes.Clone(data)
			binary.BigEndian.PutUint32(sealed[8:], uint32(len(sealed)-12))
			sealed[16] = kafkabatch.Magic
			binary.BigEndian.PutUint32(sealed[17:], crc32.Checksum(sealed[21:], castagnoli))
			checkFromKafka(t, sealed)
		}
	})
}

// checkFromKafka checks FuzzFromKafka's invariants on one input.
func checkFromKafka(t *testing.T, data []byte) {
	out, info, err := produce(data, kafkabatch.Limits{})
	if err != nil {
		if out != nil {
			t.Fatalf("output on error %v", err)
		}
		checkTyped(t, err)
		return
	}
	h, err := batch.Verify(out)
	if err != nil || h != info.Header {
		t.Fatalf("Verify: %+v, %v; FromKafka said %+v", h, err, info.Header)
	}
	if again, h2, err := batch.Canonicalize(bytes.Clone(out)); err != nil || !bytes.Equal(again, out) || h2 != h {
		t.Fatalf("Canonicalize changes FromKafka's output: %v", err)
	}
	// The Kafka batch AppendKafka sends converts back to the same
	// canonical batch (a compressed one: its compressed bytes copied).
	if back, _ := fromKafka(t, toKafka(t, out, kafkabatch.None)); !bytes.Equal(back, out) {
		t.Fatalf("FromKafka(AppendKafka(c)) != c\n got %x\nwant %x", back, out)
	}
	// Uncompressed, and compressed again by AppendKafka with any
	// codec, it holds the same records.
	plain := uncompressed(t, out)
	if _, err := batch.Verify(plain); err != nil {
		t.Fatalf("SetCodec(none) output fails Verify: %v", err)
	}
	codec := kafkabatch.Codec(len(data) % 5)
	if back, _ := fromKafka(t, toKafka(t, plain, codec)); !bytes.Equal(uncompressed(t, back), plain) {
		t.Fatalf("FromKafka(AppendKafka(c, %v)) != c", codec)
	}
	// kmsg reads the same records from the input and the output.
	_, sent := kafkaRecords(t, data)
	_, got := kafkaRecords(t, toKafka(t, plain, kafkabatch.None))
	if len(sent) != len(got) {
		t.Fatalf("%d records out, %d in", len(got), len(sent))
	}
	for i := range sent {
		if !sameRecord(sent[i], got[i]) {
			t.Fatalf("record %d: %+v, sent %+v", i, got[i], sent[i])
		}
	}
}

// sameRecord compares Kafka records but their lengths and attributes.
func sameRecord(a, b kmsg.Record) bool {
	if a.TimestampDelta64 != b.TimestampDelta64 || a.OffsetDelta != b.OffsetDelta ||
		!sameNullable(a.Key, b.Key) || !sameNullable(a.Value, b.Value) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !sameNullable(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

// uncompressedGzip is canonical batch b with its records gzipped.
func uncompressedGzip(t testing.TB, b []byte) []byte {
	out, err := batch.SetCodec(b, nil, kafkabatch.Gzip)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzAppendKafka: no canonical input panics; a refusal is typed; what
// is converted, kmsg reads as the records proto/batch reads from the
// input, and its header as the input's.
func FuzzAppendKafka(f *testing.F) {
	for _, b := range appendKafkaSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := kafkabatch.AppendKafka(nil, data, kafkabatch.None)
		if err != nil {
			if len(out) != 0 {
				t.Fatalf("output on error %v", err)
			}
			checkTyped(t, err)
			return
		}
		bh, err := batch.ParseHeader(data)
		if err != nil {
			t.Fatalf("AppendKafka accepted a batch ParseHeader refuses: %v", err)
		}
		kh, got := kafkaRecords(t, out)
		if kh.FirstOffset != bh.BaseOffset || kh.PartitionLeaderEpoch != bh.PartitionLeaderEpoch || uint32(uint16(kh.Attributes)) != bh.Attributes ||
			kh.LastOffsetDelta != bh.LastOffsetDelta || kh.FirstTimestamp != bh.BaseTimestamp || kh.MaxTimestamp != bh.MaxTimestamp ||
			kh.ProducerID != bh.ProducerID || int32(kh.ProducerEpoch) != bh.ProducerEpoch || kh.FirstSequence != bh.BaseSequence ||
			kh.NumRecords != bh.RecordCount || int(kh.NumRecords) != len(got) {
			t.Fatalf("Kafka header %+v from %+v", kh, bh)
		}
		var want []batch.Record
		if batch.ForEachRecord(data, func(r batch.Record) error {
			want = append(want, r)
			return nil
		}) != nil {
			return // proto/batch is stricter about header fields' wire types
		}
		if len(want) != len(got) {
			t.Fatalf("%d records, proto/batch reads %d", len(got), len(want))
		}
		for i, r := range want {
			k := got[i]
			if r.Offset-bh.BaseOffset != int64(k.OffsetDelta) || r.Timestamp-bh.BaseTimestamp != k.TimestampDelta64 ||
				!sameNullable(r.Key, k.Key) || !sameNullable(r.Value, k.Value) || len(r.Headers) != len(k.Headers) {
				t.Fatalf("record %d: %+v, proto/batch reads %+v", i, k, r)
			}
			for j, h := range r.Headers {
				if h.Key != k.Headers[j].Key || !sameNullable(h.Value, k.Headers[j].Value) {
					t.Fatalf("record %d header %d: %+v, proto/batch reads %+v", i, j, k.Headers[j], h)
				}
			}
		}
	})
}
