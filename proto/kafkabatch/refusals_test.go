package kafkabatch_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkabatch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// kafkaCode is the Sluice code of each sentinel: what the Kafka door
// answers for the partition.
var kafkaCode = map[error]sluicev1.ErrorCode{
	kafkabatch.ErrTruncated:            sluicev1.ErrorCode_CORRUPT_RECORD,
	kafkabatch.ErrBatchLength:          sluicev1.ErrorCode_CORRUPT_RECORD,
	kafkabatch.ErrLegacyMagic:          sluicev1.ErrorCode_INVALID_RECORD,
	kafkabatch.ErrMagic:                sluicev1.ErrorCode_CORRUPT_RECORD,
	kafkabatch.ErrCRC:                  sluicev1.ErrorCode_CORRUPT_RECORD,
	kafkabatch.ErrAttributes:           sluicev1.ErrorCode_INVALID_RECORD,
	kafkabatch.ErrCodec:                sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE,
	kafkabatch.ErrDecompress:           sluicev1.ErrorCode_CORRUPT_RECORD,
	kafkabatch.ErrDecompressedTooLarge: sluicev1.ErrorCode_MESSAGE_TOO_LARGE,
	kafkabatch.ErrTooLarge:             sluicev1.ErrorCode_MESSAGE_TOO_LARGE,
	kafkabatch.ErrRecordCount:          sluicev1.ErrorCode_INVALID_RECORD,
	kafkabatch.ErrOffsetDelta:          sluicev1.ErrorCode_INVALID_RECORD,
	kafkabatch.ErrVarint:               sluicev1.ErrorCode_CORRUPT_RECORD,
	kafkabatch.ErrRecordFraming:        sluicev1.ErrorCode_CORRUPT_RECORD,
	kafkabatch.ErrHeaderKey:            sluicev1.ErrorCode_INVALID_RECORD,
	kafkabatch.ErrCanonical:            sluicev1.ErrorCode_CORRUPT_RECORD,
}

// checkRefusal checks that err is sentinel with its code.
func checkRefusal(t *testing.T, name string, err, sentinel error) {
	t.Helper()
	var e *errs.Error
	switch {
	case err == nil:
		t.Errorf("%s: accepted, want %v", name, sentinel)
	case !errors.Is(err, sentinel):
		t.Errorf("%s: %v, want %v", name, err, sentinel)
	case !errors.As(err, &e) || e.Code != kafkaCode[sentinel]:
		t.Errorf("%s: %v has code %v, want %v", name, err, errs.Code(err), kafkaCode[sentinel])
	}
}

// rawRecord encodes a Kafka record body by hand (after its length) from
// parts, each a varint (int64) or raw bytes ([]byte); the record's
// length is computed unless length is given.
func rawRecord(length *int64, parts ...any) []byte {
	var body []byte
	for _, p := range parts {
		switch p := p.(type) {
		case int64:
			body = binary.AppendVarint(body, p)
		case int:
			body = binary.AppendVarint(body, int64(p))
		case []byte:
			body = append(body, p...)
		case string:
			body = append(body, p...)
		}
	}
	l := int64(len(body))
	if length != nil {
		l = *length
	}
	return append(binary.AppendVarint(nil, l), body...)
}

func ptr(v int64) *int64 { return &v }

// Every way a batch can be wrong is refused with its own sentinel and
// code, never a panic: by FromKafka, or for the records of a compressed
// batch by batch.CheckCompressed on append.
func TestFromKafkaRefusesBadBatches(t *testing.T) {
	kb := kmsgBatches()["headers"]
	good := kb.build(t, kafkabatch.None)
	oneRecord := kbatch{plainHeader(), []kmsg.Record{rec(0, 0, []byte("k"), []byte("v"))}}.build(t, kafkabatch.None)
	// withRaw replaces the records of oneRecord by hand-made ones.
	withRaw := func(records ...[]byte) []byte { return withRecords(t, oneRecord, bytes.Join(records, nil)) }
	// attrs byte 0, timestamp delta 0, offset delta i.
	rec0 := func(i int, rest ...any) []byte { return rawRecord(nil, append([]any{"\x00", 0, i}, rest...)...) }
	okRecord := rec0(0, 1, "k", 1, "v", 0)
	setInt32 := func(off int, v int32) func([]byte) {
		return func(b []byte) { binary.BigEndian.PutUint32(b[off:], uint32(v)) }
	}
	compressed := func(codec kafkabatch.Codec, data []byte) []byte {
		return withCompressed(t, kb, codec, data)
	}
	for _, c := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, kafkabatch.ErrTruncated},
		{"shorter than the magic", good[:16], kafkabatch.ErrTruncated},
		{"shorter than the header", good[:40], kafkabatch.ErrTruncated},
		{"truncated", good[:len(good)-1], kafkabatch.ErrTruncated},
		{"batchLength says more", patch(good, setInt32(8, int32(len(good)-12+1))), kafkabatch.ErrTruncated},
		{"batchLength says less", patch(good, setInt32(8, int32(len(good)-12-1))), kafkabatch.ErrBatchLength},
		{"batchLength below a header", patch(good, setInt32(8, 48)), kafkabatch.ErrBatchLength},
		{"batchLength negative", patch(good, setInt32(8, -1)), kafkabatch.ErrBatchLength},
		{"two batches", append(bytes.Clone(good), good...), kafkabatch.ErrBatchLength},
		{"magic 0", patch(good, func(b []byte) { b[16] = 0 }), kafkabatch.ErrLegacyMagic},
		{"magic 1", patch(good, func(b []byte) { b[16] = 1 }), kafkabatch.ErrLegacyMagic},
		{"magic 3", patch(good, func(b []byte) { b[16] = 3 }), kafkabatch.ErrMagic},
		{"magic -1", patch(good, func(b []byte) { b[16] = 0xff }), kafkabatch.ErrMagic},
		{"CRC field wrong", patch(good, func(b []byte) { b[17] ^= 1 }), kafkabatch.ErrCRC},
		{"record byte flipped", func() []byte { b := bytes.Clone(good); b[len(b)-3] ^= 0x40; return b }(), kafkabatch.ErrCRC},
		{"attribute bit 6 (delete horizon)", patch(good, func(b []byte) { b[22] |= 1 << 6 }), kafkabatch.ErrAttributes},
		{"attribute bit 15", patch(good, func(b []byte) { b[21] |= 0x80 }), kafkabatch.ErrAttributes},
		{"codec 5", patch(good, func(b []byte) { b[22] |= 5 }), kafkabatch.ErrCodec},
		{"codec 6", patch(good, func(b []byte) { b[22] |= 6 }), kafkabatch.ErrCodec},
		{"codec 7", patch(good, func(b []byte) { b[22] |= 7 }), kafkabatch.ErrCodec},
		{"recordCount 0", patch(good, func(b []byte) { setInt32(57, 0)(b); setInt32(23, -1)(b) }), kafkabatch.ErrRecordCount},
		{"recordCount negative", patch(good, func(b []byte) { setInt32(57, -3)(b); setInt32(23, -4)(b) }), kafkabatch.ErrRecordCount},
		{"recordCount one more", patch(good, func(b []byte) { setInt32(57, 3)(b); setInt32(23, 2)(b) }), kafkabatch.ErrRecordCount},
		{"recordCount one less", patch(good, func(b []byte) { setInt32(57, 1)(b); setInt32(23, 0)(b) }), kafkabatch.ErrRecordCount},
		{"lastOffsetDelta not count-1", patch(good, setInt32(23, 5)), kafkabatch.ErrRecordCount},
		{"offset deltas out of order", kbatch{plainHeader(), []kmsg.Record{rec(0, 0, nil, nil), rec(2, 0, nil, nil), rec(1, 0, nil, nil)}}.build(t, kafkabatch.None), kafkabatch.ErrOffsetDelta},
		{"offset deltas from 1", kbatch{plainHeader(), []kmsg.Record{rec(1, 0, nil, nil)}}.build(t, kafkabatch.None), kafkabatch.ErrOffsetDelta},
		{"record length varint of 6 bytes", withRaw([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}), kafkabatch.ErrVarint},
		{"record length varint beyond int32", withRaw([]byte{0xff, 0xff, 0xff, 0xff, 0x7f}), kafkabatch.ErrVarint},
		{"record length varint cut", withRaw([]byte{0x80}), kafkabatch.ErrVarint},
		{"offset delta varint of 6 bytes", withRaw(rawRecord(nil, "\x00", 0, "\x80\x80\x80\x80\x80\x00", 1, "k", 1, "v", 0)), kafkabatch.ErrVarint},
		{"timestamp varlong of 11 bytes", withRaw(rawRecord(nil, "\x00", "\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00", 0, -1, -1, 0)), kafkabatch.ErrVarint},
		{"timestamp varlong beyond int64", withRaw(rawRecord(nil, "\x00", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 0, -1, -1, 0)), kafkabatch.ErrVarint},
		{"record length negative", withRaw(rawRecord(ptr(-1), "\x00", 0, 0, -1, -1, 0)), kafkabatch.ErrRecordFraming},
		{"record length past the batch", withRaw(rawRecord(ptr(100), "\x00", 0, 0, -1, -1, 0)), kafkabatch.ErrRecordFraming},
		{"record length beyond its fields", withRaw(rawRecord(ptr(7), "\x00", 0, 0, -1, -1, 0, "x")), kafkabatch.ErrRecordFraming},
		{"record length short of its fields", withRaw(append(rawRecord(ptr(5), "\x00", 0, 0, -1, -1, 0), 0)), kafkabatch.ErrVarint},
		{"record empty", withRaw(rawRecord(nil)), kafkabatch.ErrRecordFraming},
		{"key length -2", withRaw(rec0(0, -2, -1, 0)), kafkabatch.ErrRecordFraming},
		{"value length -5", withRaw(rec0(0, -1, -5, 0)), kafkabatch.ErrRecordFraming},
		{"key length past the record", withRaw(rec0(0, 50, "k", -1, 0)), kafkabatch.ErrRecordFraming},
		{"header count -1", withRaw(rec0(0, -1, -1, -1)), kafkabatch.ErrRecordFraming},
		{"header count past the record", withRaw(rec0(0, -1, -1, 3, 1, "h", -1)), kafkabatch.ErrVarint},
		{"header key null", withRaw(rec0(0, -1, -1, 1, -1, 1, "v")), kafkabatch.ErrHeaderKey},
		{"header key length -2", withRaw(rec0(0, -1, -1, 1, -2, 1, "v")), kafkabatch.ErrRecordFraming},
		{"header key not UTF-8", withRaw(rec0(0, -1, -1, 1, 2, "\xc3\x28", -1)), kafkabatch.ErrHeaderKey},
		{"header value length -2", withRaw(rec0(0, -1, -1, 1, 1, "h", -2)), kafkabatch.ErrRecordFraming},
		{"second record bad", withRaw(okRecord, rec0(1, -3, -1, 0)), kafkabatch.ErrRecordFraming},
		{"two records, recordCount 1", withRaw(okRecord, rec0(1, -1, -1, 0)), kafkabatch.ErrRecordCount},
		{"gzip garbage", compressed(kafkabatch.Gzip, []byte("\x1f\x8b\x08\x00 not really gzip")), kafkabatch.ErrDecompress},
		{"gzip cut", compressed(kafkabatch.Gzip, compressWith(t, encodeRecords(kb.records), kafkabatch.Gzip)[:30]), kafkabatch.ErrDecompress},
		{"gzip trailing garbage", compressed(kafkabatch.Gzip, append(compressWith(t, encodeRecords(kb.records), kafkabatch.Gzip), "junk"...)), kafkabatch.ErrDecompress},
		{"snappy garbage", compressed(kafkabatch.Snappy, []byte("\xff\xff\xff\xff\xff\xff")), kafkabatch.ErrDecompress},
		{"snappy block corrupt", compressed(kafkabatch.Snappy, []byte{10, 0xfe, 1, 2}), kafkabatch.ErrDecompress},
		{"xerial block length past the end", compressed(kafkabatch.Snappy, append(xerialSnappy(encodeRecords(kb.records)), 0, 0, 1, 0)), kafkabatch.ErrDecompress},
		{"xerial cut", compressed(kafkabatch.Snappy, xerialSnappy(encodeRecords(kb.records))[:40]), kafkabatch.ErrDecompress},
		{"lz4 garbage", compressed(kafkabatch.LZ4, []byte("\x04\x22\x4d\x18 garbage")), kafkabatch.ErrDecompress},
		{"lz4 not a frame", compressed(kafkabatch.LZ4, []byte("hello")), kafkabatch.ErrDecompress},
		{"zstd garbage", compressed(kafkabatch.Zstd, []byte("\x28\xb5\x2f\xfd garbage")), kafkabatch.ErrDecompress},
		{"zstd not a frame", compressed(kafkabatch.Zstd, []byte("hello")), kafkabatch.ErrDecompress},
		{"zstd cut", compressed(kafkabatch.Zstd, compressWith(t, encodeRecords(kb.records), kafkabatch.Zstd)[:12]), kafkabatch.ErrDecompress},
		{"compressed empty", compressed(kafkabatch.Zstd, nil), kafkabatch.ErrDecompress},
		{"compressed records bad", compressed(kafkabatch.Gzip, compressWith(t, rec0(0, -2, -1, 0), kafkabatch.Gzip)), kafkabatch.ErrRecordFraming},
	} {
		_, _, err := produce(c.in, kafkabatch.Limits{})
		checkRefusal(t, c.name, err, c.want)
	}
	// The control records parse: a well-formed hand-made record passes.
	if _, _, err := kafkabatch.FromKafka(nil, withRaw(okRecord), kafkabatch.Limits{}); err != nil {
		t.Fatalf("hand-made record refused: %v", err)
	}
	// Record attributes are dropped, not refused.
	if _, _, err := kafkabatch.FromKafka(nil, withRaw(rawRecord(nil, "\x7f", 0, 0, 1, "k", 1, "v", 0)), kafkabatch.Limits{}); err != nil {
		t.Fatalf("record attributes refused: %v", err)
	}
}

// MaxBytes bounds the canonical batch: at it the batch passes, one byte
// under it is MESSAGE_TOO_LARGE.
func TestFromKafkaMaxBytes(t *testing.T) {
	in := kmsgBatches()["many-records"].build(t, kafkabatch.Zstd)
	canonical, _ := fromKafka(t, in)
	if _, _, err := kafkabatch.FromKafka(nil, in, kafkabatch.Limits{MaxBytes: len(canonical)}); err != nil {
		t.Fatalf("batch of exactly MaxBytes: %v", err)
	}
	_, _, err := kafkabatch.FromKafka(nil, in, kafkabatch.Limits{MaxBytes: len(canonical) - 1})
	checkRefusal(t, "one byte over MaxBytes", err, kafkabatch.ErrTooLarge)
}

// FromKafka builds in dst's storage when it is large enough.
func TestFromKafkaReusesDst(t *testing.T) {
	in := kmsgBatches()["headers"].build(t, kafkabatch.None)
	want, _ := fromKafka(t, in)
	buf := make([]byte, 3, 4096)
	got, _, err := kafkabatch.FromKafka(buf, in, kafkabatch.Limits{})
	if err != nil || !bytes.Equal(got, want) || &got[0] != &buf[:1][0] {
		t.Fatalf("FromKafka into a 4 KiB buffer: %v, same storage %v", err, err == nil && &got[0] == &buf[:1][0])
	}
	small := make([]byte, 0, 8)
	if got, _, err := kafkabatch.FromKafka(small, in, kafkabatch.Limits{}); err != nil || !bytes.Equal(got, want) || cap(got) != len(want) {
		t.Fatalf("FromKafka with a small dst: cap %d, len %d, %v", cap(got), len(want), err)
	}
}

// ParseHeader reads the header alone (a Kafka door checks the codec of
// a produce before decompressing anything).
func TestParseHeader(t *testing.T) {
	kb := kmsgBatches()["idempotent"]
	in := kb.build(t, kafkabatch.Zstd)
	h, err := kafkabatch.ParseHeader(in[:kafkabatch.HeaderSize])
	if err != nil {
		t.Fatal(err)
	}
	if h.Codec() != kafkabatch.Zstd || h.ProducerID != 1000 || h.ProducerEpoch != 3 || h.BaseSequence != 42 || h.RecordCount != 2 ||
		h.PartitionLeaderEpoch != -1 || h.BaseTimestamp != baseTS || int(h.BatchLength) != len(in)-12 || h.Magic != 2 {
		t.Fatalf("header %+v", h)
	}
}

// Batches splits a records field holding several batches, and reports a
// partial last one as ErrTruncated.
func TestBatchesSplitsARecordsField(t *testing.T) {
	var all []byte
	var want [][]byte
	for _, name := range []string{"plain", "headers", "commit-marker"} {
		b := kmsgBatches()[name].build(t, kafkabatch.Snappy)
		all = append(all, b...)
		want = append(want, b)
	}
	// A v1 message set frames the same way: Batches yields it, FromKafka
	// refuses it.
	legacy := patch(want[0], func(b []byte) { b[16] = 1 })
	all = append(all, legacy...)
	want = append(want, legacy)
	var got [][]byte
	for b, err := range kafkabatch.Batches(all) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
	}
	if len(got) != len(want) {
		t.Fatalf("%d batches, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("batch %d differs", i)
		}
	}
	for _, c := range []struct {
		name string
		in   []byte
		want error
	}{
		{"partial last batch", all[:len(all)-5], kafkabatch.ErrTruncated},
		{"partial length", append(bytes.Clone(want[0]), 0, 0, 0, 0, 0, 0, 0, 0, 0), kafkabatch.ErrTruncated},
		{"length below 14", append(bytes.Clone(want[0]), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 13), kafkabatch.ErrBatchLength},
	} {
		n, last := 0, error(nil)
		for _, err := range kafkabatch.Batches(c.in) {
			if err != nil {
				last = err
				break
			}
			n++
		}
		checkRefusal(t, c.name, last, c.want)
		if n != 1 && c.name != "partial last batch" {
			t.Errorf("%s: %d batches before the error, want 1", c.name, n)
		}
	}
}

// AppendKafka refuses a canonical batch it cannot convert faithfully:
// damaged bytes (its CRC), a compression bit, an attribute bit beyond
// Kafka's 16, a producer epoch beyond int16, a record count that lies.
func TestAppendKafkaRefusesWhatItCannotConvert(t *testing.T) {
	canonical, _ := fromKafka(t, kmsgBatches()["headers"].build(t, kafkabatch.None))
	rewrite := func(fn func(*batch.Header)) []byte {
		b := bytes.Clone(canonical)
		h, _ := batch.ParseHeader(b)
		fn(&h)
		batch.PutHeader(b, h)
		h.CRC = batch.ComputeCRC(b)
		batch.PutHeader(b, h)
		return b
	}
	flipped := bytes.Clone(canonical)
	flipped[len(flipped)-1] ^= 1
	for _, c := range []struct {
		name string
		in   []byte
		want error
	}{
		{"short", canonical[:50], kafkabatch.ErrCanonical},
		{"not canonical", append([]byte{0x08}, canonical[1:]...), kafkabatch.ErrCanonical},
		{"damaged at rest", flipped, kafkabatch.ErrCanonical},
		{"compression bit", rewrite(func(h *batch.Header) { h.Attributes |= 1 }), kafkabatch.ErrCanonical},
		{"attribute bit 16", rewrite(func(h *batch.Header) { h.Attributes |= 1 << 16 }), kafkabatch.ErrCanonical},
		{"epoch beyond int16", rewrite(func(h *batch.Header) { h.ProducerEpoch = 1 << 15 }), kafkabatch.ErrCanonical},
		{"record count lies", rewrite(func(h *batch.Header) { h.RecordCount = 3 }), kafkabatch.ErrCanonical},
		{"offset deltas past the last", rewrite(func(h *batch.Header) { h.LastOffsetDelta = 0 }), kafkabatch.ErrCanonical},
		{"record entry cut", func() []byte {
			b := bytes.Clone(canonical[:len(canonical)-1])
			h, _ := batch.ParseHeader(b)
			h.CRC = batch.ComputeCRC(b)
			batch.PutHeader(b, h)
			return b
		}(), kafkabatch.ErrCanonical},
	} {
		prefix := []byte("kept")
		out, err := kafkabatch.AppendKafka(bytes.Clone(prefix), c.in, kafkabatch.None)
		checkRefusal(t, c.name, err, c.want)
		if !bytes.Equal(out, prefix) {
			t.Errorf("%s: dst changed to %q", c.name, out)
		}
	}
	_, err := kafkabatch.AppendKafka(nil, canonical, kafkabatch.Codec(5))
	checkRefusal(t, "codec 5", err, kafkabatch.ErrCodec)
}
