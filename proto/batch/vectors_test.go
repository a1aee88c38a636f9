package batch_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/internal/golden"
	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// batchVectors is testdata/vectors.json: batches as a producer sends them
// and as the broker stores them (Canonicalize), with their CRCs, for
// clients in other languages (docs/clients.md, docs/record-format.md).
// -update rewrites the file.
type batchVectors struct {
	Comment    string        `json:"comment"`
	HeaderSize int           `json:"header_size"`
	CRCStart   int           `json:"crc_start"`
	CRC32CTest crc32cCheck   `json:"crc32c_check"`
	Vectors    []batchVector `json:"vectors"`
}

// crc32cCheck is the standard check value of CRC-32C, to test that an
// implementation uses the Castagnoli polynomial.
type crc32cCheck struct {
	InputASCII string `json:"input_ascii"`
	CRCHex     string `json:"crc_hex"`
}

type batchVector struct {
	Name            string `json:"name"`
	Description     string `json:"description"`
	InputHex        string `json:"input_hex"`
	CanonicalHex    string `json:"canonical_hex"`
	CRCHex          string `json:"crc_hex"`
	RecordCount     int32  `json:"record_count"`
	LastOffsetDelta int32  `json:"last_offset_delta"`
	MaxTimestamp    int64  `json:"max_timestamp"`
	// KafkaRecordsHex is, for a compressed batch, its records
	// decompressed: Kafka's v2 record encoding.
	KafkaRecordsHex string `json:"kafka_records_hex,omitempty"`
}

// zstdRawFrame is a zstd frame of raw as RFC 8878 lays it out, written by
// hand so that the vector does not depend on an encoder's version: no
// content size, a 1 KiB window, one raw block (raw is under 1 KiB).
func zstdRawFrame(raw []byte) []byte {
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00}
	h := uint32(len(raw))<<3 | 1 // raw block, the last
	out = append(out, byte(h), byte(h>>8), byte(h>>16))
	return append(out, raw...)
}

// vectorRecords are three records: a key and value, a header, a negative
// timestamp delta and one with neither key nor value.
func vectorRecords() []testRecord {
	return []testRecord{
		{ts: baseTS, key: []byte("k0"), value: []byte("hello")},
		{ts: baseTS + 5, key: []byte("k1"), value: []byte("world"), headers: []batch.RecordHeader{{Key: "trace", Value: []byte("t-1")}}},
		{ts: baseTS - 2},
	}
}

func deterministic(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBatchVectors(t *testing.T) {
	idem := batch.Producer{ID: 1000, Epoch: 0, BaseSequence: 0}
	crc0 := func(b []byte) []byte { return withHeader(t, b, func(*batch.Header) {}) }
	inputs := []struct {
		name, desc string
		in         []byte
	}{
		{"canonical-idempotent", "A canonical batch as the Go client sends it (idempotent producer 1000, epoch 0, sequences 0..2): stored as sent.",
			build(t, idem, 0, vectorRecords())},
		{"canonical-plain-crc-0", "A canonical batch of a plain producer sent with crc 0: the broker computes the CRC.",
			crc0(build(t, batch.PlainProducer, 0, vectorRecords()))},
		{"proto-marshal-idempotent", "The same batch as generated code encodes a RecordBatch message with every field filled (crc 0): the broker re-frames it canonically.",
			deterministic(t, func() *sluicev1.RecordBatch {
				m := toMessage(t, build(t, idem, 0, vectorRecords()))
				m.Crc = 0
				return m
			}())},
		{"simple-idempotent", "Simple produce: record_count, last_offset_delta, crc and every offset_delta left 0 (absent), as generated code encodes it; the broker fills them. Its canonical form is canonical-idempotent's.",
			deterministic(t, simpleMessage(idem, vectorRecords()))},
		{"simple-plain-one-record", "Simple produce of one record by a plain producer (producer fields absent: stored as -1).",
			deterministic(t, simpleMessage(batch.PlainProducer, vectorRecords()[:1]))},
		{"compressed-zstd-idempotent", "A compressed batch (decision 67) as generated code encodes it: attributes 4 (zstd), record_count 3 and last_offset_delta 2 exact, crc and max_timestamp 0, " +
			"compressed_records (field 13) a zstd frame of one raw block holding the three records in Kafka's v2 record encoding (kafka_records_hex). " +
			"Stored with its compressed bytes as sent, max_timestamp computed from the records.",
			deterministic(t, &sluicev1.RecordBatch{Attributes: 4, LastOffsetDelta: 2, BaseTimestamp: baseTS, ProducerId: 1000, RecordCount: 3,
				CompressedRecords: zstdRawFrame(kafkaEncode(vectorRecords()))})},
	}
	doc := batchVectors{
		Comment: "RecordBatch encodings (docs/record-format.md): input_hex is what a producer sends in PartitionProduceData.batch, " +
			"canonical_hex what the broker stores and fetch returns (base_offset and partition_leader_epoch 0 here; the leader sets them, " +
			"outside the CRC). The CRC is CRC-32C (Castagnoli) of canonical bytes [crc_start, end). A compressed batch's canonical form is what the " +
			"broker stores after checking its records (max_timestamp computed); kafka_records_hex holds its records decompressed. " +
			"Generated by TestBatchVectors in proto/batch/vectors_test.go (-update); do not edit.",
		HeaderSize: batch.HeaderSize,
		CRCStart:   batch.CRCStart,
		CRC32CTest: crc32cCheck{InputASCII: "123456789", CRCHex: fmt.Sprintf("%08x", crc32.Checksum([]byte("123456789"), crc32.MakeTable(crc32.Castagnoli)))},
	}
	for _, in := range inputs {
		out, h := store(t, in.in)
		v := batchVector{
			Name: in.name, Description: in.desc, InputHex: hex.EncodeToString(in.in), CanonicalHex: hex.EncodeToString(out),
			CRCHex: fmt.Sprintf("%08x", h.CRC), RecordCount: h.RecordCount, LastOffsetDelta: h.LastOffsetDelta, MaxTimestamp: h.MaxTimestamp,
		}
		if h.IsCompressed() {
			c, err := batch.CheckCompressed(bytes.Clone(out))
			if err != nil {
				t.Fatal(err)
			}
			v.KafkaRecordsHex = hex.EncodeToString(c.Records)
		}
		doc.Vectors = append(doc.Vectors, v)
	}
	if doc.Vectors[0].CanonicalHex != doc.Vectors[3].CanonicalHex || doc.Vectors[0].CanonicalHex != doc.Vectors[2].CanonicalHex {
		t.Error("the simple and proto.Marshal forms of the idempotent batch do not canonicalize to the Go client's batch")
	}
	golden.Check(t, "testdata/vectors.json", golden.JSON(t, doc, "vectors"))

	// The committed file as another language reads it.
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var read batchVectors
	if err := json.Unmarshal(raw, &read); err != nil {
		t.Fatal(err)
	}
	if read.CRC32CTest.CRCHex != "e3069283" || len(read.Vectors) == 0 {
		t.Fatalf("unexpected file: %+v", read.CRC32CTest)
	}
	for _, v := range read.Vectors {
		in, err1 := hex.DecodeString(v.InputHex)
		want, err2 := hex.DecodeString(v.CanonicalHex)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: bad hex", v.Name)
		}
		got, h := store(t, in)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: Canonicalize = %x; file says %x", v.Name, got, want)
			continue
		}
		if crc := fmt.Sprintf("%08x", batch.ComputeCRC(want)); crc != v.CRCHex || fmt.Sprintf("%08x", h.CRC) != v.CRCHex {
			t.Errorf("%s: CRC %s, file says %s", v.Name, crc, v.CRCHex)
		}
		if _, err := batch.Verify(want); err != nil {
			t.Errorf("%s: canonical form fails Verify: %v", v.Name, err)
		}
	}
}
