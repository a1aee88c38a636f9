package batch_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fuzzSeeds are the seed inputs; testdata/fuzz/FuzzCanonicalize holds the
// same ones (regenerate with SLUICE_WRITE_FUZZ_CORPUS=1 go test -run
// TestWriteFuzzCorpus ./proto/batch/) plus any crashers found.
func fuzzSeeds(t testing.TB) map[string][]byte {
	canonical := build(t, batch.Producer{ID: 3, Epoch: 1, BaseSequence: 5}, 0, sampleRecords())
	small := build(t, batch.PlainProducer, batch.AttrTransactional, []testRecord{{ts: baseTS, key: []byte("k"), value: []byte("v"), headers: []batch.RecordHeader{{Key: "h", Value: []byte("1")}}}})
	seeds := map[string][]byte{
		"canonical":       canonical,
		"canonical-small": small,
		"proto-marshal":   marshal(t, toMessage(t, withHeader(t, canonical, func(*batch.Header) {}))),
		"shuffled":        shuffled(t, small),
		"truncated":       canonical[:len(canonical)-9],
		"garbage":         []byte("\x0a\xff\xff\xff\xff\x0f\x62\x00garbage\x00\x01"),
		"empty":           {},
		// Simple produce (decision 43): bookkeeping left to the broker.
		"simple-proto":     simpleBatch(t, batch.PlainProducer, sampleRecords()),
		"simple-canonical": simpleCanonical(t, batch.Producer{ID: 3, Epoch: 1, BaseSequence: 5}, sampleRecords()),
		"simple-one":       simpleCanonical(t, batch.PlainProducer, sampleRecords()[:1]),
	}
	// Compressed batches (decision 67): field 13.
	zs := compressedBatch(t, kafkarecords.Zstd, sampleRecords())
	seeds["compressed-zstd"] = zs
	seeds["compressed-gzip-proto"] = marshal(t, toMessage(t, compressedBatch(t, kafkarecords.Gzip, sampleRecords()[:1])))
	seeds["compressed-lz4-nulls"] = compressedBatch(t, kafkarecords.LZ4, nullRecords())
	seeds["compressed-snappy-shuffled"] = shuffled(t, compressedBatch(t, kafkarecords.Snappy, sampleRecords()))
	seeds["compressed-and-records"] = append(clone(zs), canonical[batch.HeaderSize:]...)
	seeds["compressed-garbage"] = compressedWith(t, kafkarecords.Zstd, 2, []byte("\x28\xb5\x2f\xfd garbage"))
	// Canonical header, non-canonical record framing (the overlong-tag one
	// was a crasher: output that failed Verify).
	for name, b := range nonCanonicalFraming(t, small) {
		seeds["framing-"+strings.ReplaceAll(name, " ", "-")] = b
	}
	return seeds
}

// The committed seed corpus must be what fuzzSeeds generates, so that
// `go test -fuzz` starts from every seed. SLUICE_WRITE_FUZZ_CORPUS=1
// rewrites the files instead of checking them.
func TestFuzzCorpusIsCurrent(t *testing.T) {
	write := os.Getenv("SLUICE_WRITE_FUZZ_CORPUS") != ""
	dir := filepath.Join("testdata", "fuzz", "FuzzCanonicalize")
	if write {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range fuzzSeeds(t) {
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
			t.Errorf("seed %s missing (regenerate with SLUICE_WRITE_FUZZ_CORPUS=1): %v", name, err)
			continue
		}
		if string(got) != body {
			t.Errorf("seed %s differs from fuzzSeeds (regenerate with SLUICE_WRITE_FUZZ_CORPUS=1)", name)
		}
	}
}

func FuzzCanonicalize(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		out, h, err := batch.Canonicalize(in)
		if err != nil {
			if out != nil {
				t.Fatalf("output on error %v", err)
			}
			return
		}
		vh, err := batch.Verify(out)
		if err != nil {
			t.Fatalf("output fails Verify: %v", err)
		}
		if vh != h {
			t.Fatalf("Verify header %+v, Canonicalize header %+v", vh, h)
		}
		var m sluicev1.RecordBatch
		if err := proto.Unmarshal(out, &m); err != nil {
			t.Fatalf("output does not decode as RecordBatch: %v", err)
		}
		// Accepted input is a valid RecordBatch holding the same records.
		var sent sluicev1.RecordBatch
		if err := proto.Unmarshal(data, &sent); err != nil {
			t.Fatalf("accepted input does not decode as RecordBatch: %v", err)
		}
		if h.IsCompressed() {
			checkCompressedOutput(t, out, h, &sent, &m)
			return
		}
		if sent.RecordCount == 0 && sent.LastOffsetDelta == 0 && sent.Crc == 0 {
			// Simple produce: the broker filled the offset deltas.
			for i, r := range sent.Records {
				r.OffsetDelta = int32(i)
			}
		}
		if !proto.Equal(&sluicev1.RecordBatch{Records: sent.Records}, &sluicev1.RecordBatch{Records: m.Records}) {
			t.Fatal("records of the output differ from those sent")
		}
		if len(m.Records) != int(h.RecordCount) || int(m.RecordCount) != len(m.Records) || h.RecordCount < 1 {
			t.Fatalf("%d records decoded, header says %d", len(m.Records), h.RecordCount)
		}
		if h.ProducerID <= 0 && (h.ProducerID != -1 || h.ProducerEpoch != -1 || h.BaseSequence != -1) {
			t.Fatalf("plain producer stored as %d/%d/%d", h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
		n := 0
		maxTS := m.BaseTimestamp
		err = batch.ForEachRecord(out, func(r batch.Record) error {
			want := m.Records[n]
			if r.Offset != m.BaseOffset+int64(n) || want.OffsetDelta != int32(n) ||
				r.Timestamp != m.BaseTimestamp+want.TimestampDelta ||
				!bytes.Equal(r.Key, want.Key) || !bytes.Equal(r.Value, want.Value) || len(r.Headers) != len(want.Headers) {
				return fmt.Errorf("record %d differs from proto.Unmarshal's", n)
			}
			maxTS = max(maxTS, r.Timestamp)
			n++
			return nil
		})
		if err != nil {
			t.Fatalf("ForEachRecord: %v", err)
		}
		if n != int(h.RecordCount) {
			t.Fatalf("ForEachRecord saw %d records, want %d", n, h.RecordCount)
		}
		if maxTS != h.MaxTimestamp {
			t.Fatalf("max timestamp %d, want %d", h.MaxTimestamp, maxTS)
		}
		again, h2, err := batch.Canonicalize(bytes.Clone(out))
		if err != nil {
			t.Fatalf("canonical output rejected: %v", err)
		}
		if !bytes.Equal(again, out) || h2 != h {
			t.Fatalf("Canonicalize is not idempotent:\n%x\n%x", out, again)
		}
		// The slow path (header fields reversed, after the records) agrees.
		slow, h3, err := batch.Canonicalize(shuffled(t, out))
		if err != nil {
			t.Fatalf("slow path rejects the canonical output: %v", err)
		}
		if !bytes.Equal(slow, out) || h3 != h {
			t.Fatalf("slow path differs from the fast path:\n%x\n%x", out, slow)
		}
		// What a client gets from proto.Unmarshal, re-encoded by
		// proto.Marshal with crc 0, is accepted as the same batch.
		m.Crc = 0
		re, h4, err := batch.Canonicalize(marshal(t, &m))
		if err != nil {
			t.Fatalf("proto.Marshal of the decoded output rejected: %v", err)
		}
		h4.CRC = h.CRC
		if h4 != h {
			t.Fatalf("proto.Marshal round trip: header %+v, want %+v", h4, h)
		}
		if _, err := batch.Verify(re); err != nil {
			t.Fatalf("proto.Marshal round trip fails Verify: %v", err)
		}
	})
}

// checkCompressedOutput checks FuzzCanonicalize's invariants on a
// compressed batch out (header h) that Canonicalize made of sent (m is
// out decoded): the compressed records kept as sent, the encoding stable
// under Canonicalize (again, shuffled, re-marshalled), and, when
// CheckCompressed accepts the records, ForEachRecord reading them all.
func checkCompressedOutput(t *testing.T, out []byte, h batch.Header, sent, m *sluicev1.RecordBatch) {
	if len(m.Records) != 0 || !bytes.Equal(m.CompressedRecords, sent.CompressedRecords) || len(m.CompressedRecords) == 0 {
		t.Fatal("compressed_records of the output differ from those sent")
	}
	if h.RecordCount < 1 || h.LastOffsetDelta != h.RecordCount-1 || !h.Codec().Known() {
		t.Fatalf("compressed header %+v", h)
	}
	for name, in := range map[string][]byte{"again": bytes.Clone(out), "shuffled": shuffled(t, out), "proto.Marshal": marshal(t, m)} {
		again, h2, err := batch.Canonicalize(in)
		if err != nil || !bytes.Equal(again, out) || h2 != h {
			t.Fatalf("%s: Canonicalize is not stable on a compressed batch: %v", name, err)
		}
	}
	c, err := batch.CheckCompressed(bytes.Clone(out))
	if err != nil {
		if errs.Code(err) == sluicev1.ErrorCode_NONE {
			t.Fatalf("CheckCompressed error without a code: %v", err)
		}
		return
	}
	n := 0
	stored := bytes.Clone(out)
	batch.SetMaxTimestamp(stored, c.Header.MaxTimestamp)
	if err := batch.ForEachRecord(stored, func(r batch.Record) error {
		if r.Offset != h.BaseOffset+int64(n) || r.Timestamp > c.Header.MaxTimestamp {
			return fmt.Errorf("record %d at offset %d, timestamp %d", n, r.Offset, r.Timestamp)
		}
		n++
		return nil
	}); err != nil || n != c.Scan.N || n != int(h.RecordCount) {
		t.Fatalf("ForEachRecord of a checked compressed batch: %d records of %d: %v", n, h.RecordCount, err)
	}
}
