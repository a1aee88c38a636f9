package kafkabatch_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/kafkabatch"
	"github.com/sluice-io/sluice/proto/kafkarecords"
)

// The tests build Kafka batches with franz-go's kmsg (an encoder written
// from Kafka's message specs, independent of this package) and compress
// them with the libraries franz-go itself uses.

const baseTS = 1700000000000

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// kbatch is a Kafka batch to build: its header fields (Length, CRC,
// Magic, NumRecords and Records are filled by build) and records (their
// Length filled by build).
type kbatch struct {
	hdr     kmsg.RecordBatch
	records []kmsg.Record
}

// plainHeader is a plain producer's batch header as franz-go writes it.
func plainHeader() kmsg.RecordBatch {
	return kmsg.RecordBatch{PartitionLeaderEpoch: -1, FirstTimestamp: baseTS, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1}
}

// encodeRecords encodes records with their lengths filled.
func encodeRecords(records []kmsg.Record) []byte {
	var raw []byte
	for i := range records {
		r := records[i]
		r.Length = 0
		body := len(r.AppendTo(nil)) - 1 // a zero length is one byte
		r.Length = int32(body)
		raw = r.AppendTo(raw)
	}
	return raw
}

// build encodes kb with its records compressed by codec, computing
// NumRecords, LastOffsetDelta (when 0 and there is more than one record
// it is set to len-1), MaxTimestamp (when 0: the largest record
// timestamp, at least the first), Length and CRC.
func (kb kbatch) build(t testing.TB, codec kafkabatch.Codec) []byte {
	t.Helper()
	h := kb.hdr
	raw := encodeRecords(kb.records)
	h.Magic = 2
	h.NumRecords = int32(len(kb.records))
	if h.LastOffsetDelta == 0 && len(kb.records) > 1 {
		h.LastOffsetDelta = int32(len(kb.records) - 1)
	}
	if h.MaxTimestamp == 0 {
		h.MaxTimestamp = h.FirstTimestamp
		for _, r := range kb.records {
			h.MaxTimestamp = max(h.MaxTimestamp, h.FirstTimestamp+r.TimestampDelta64)
		}
	}
	h.Attributes = h.Attributes&^7 | int16(codec)
	h.Records = compressWith(t, raw, codec)
	return seal(h)
}

// seal sets Length and CRC of h and encodes it.
func seal(h kmsg.RecordBatch) []byte {
	h.Length = int32(49 + len(h.Records))
	h.CRC = 0
	b := h.AppendTo(nil)
	h.CRC = int32(crc32.Checksum(b[21:], castagnoli))
	return h.AppendTo(nil)
}

// withRecords is b (an uncompressed batch) with its records replaced by
// raw and its length and CRC recomputed: for records kmsg cannot write.
func withRecords(t testing.TB, b, raw []byte) []byte {
	t.Helper()
	var h kmsg.RecordBatch
	if err := h.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	h.Records = raw
	return seal(h)
}

// patch changes the header bytes of batch b with fn and recomputes its
// CRC (unless fn changed the CRC itself).
func patch(b []byte, fn func(b []byte)) []byte {
	b = bytes.Clone(b)
	crc := binary.BigEndian.Uint32(b[17:])
	fn(b)
	if binary.BigEndian.Uint32(b[17:]) == crc {
		binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	}
	return b
}

// compressWith compresses raw as a Kafka client does: franz-go's gzip,
// lz4 and zstd settings, and snappy as one raw block (librdkafka,
// franz-go's non-streaming path). xerialSnappy is the Java client's.
func compressWith(t testing.TB, raw []byte, codec kafkabatch.Codec) []byte {
	t.Helper()
	switch codec {
	case kafkabatch.None:
		return raw
	case kafkabatch.Gzip:
		var buf bytes.Buffer
		w, _ := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
		write(t, w, raw)
		return buf.Bytes()
	case kafkabatch.Snappy:
		return s2.EncodeSnappy(nil, raw)
	case kafkabatch.LZ4:
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		if err := w.Apply(lz4.CompressionLevelOption(lz4.Fast)); err != nil {
			t.Fatal(err)
		}
		write(t, w, raw)
		return buf.Bytes()
	case kafkabatch.Zstd:
		enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(64<<10), zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
		if err != nil {
			t.Fatal(err)
		}
		return enc.EncodeAll(raw, nil)
	}
	t.Fatalf("codec %d", codec)
	return nil
}

// xerialSnappy frames raw as snappy-java's SnappyOutputStream (the Java
// client) does: the header, then 32 KiB blocks each behind a big-endian
// length.
func xerialSnappy(raw []byte) []byte {
	out := []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}
	for len(raw) > 0 {
		n := min(len(raw), 32<<10)
		block := s2.EncodeSnappy(nil, raw[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		raw = raw[n:]
	}
	return out
}

func write(t testing.TB, w io.WriteCloser, b []byte) {
	t.Helper()
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// rec is a kmsg record with offset delta i and timestamp delta ts.
func rec(i int, ts int64, key, value []byte, headers ...kmsg.Header) kmsg.Record {
	return kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: ts, Key: key, Value: value, Headers: headers}
}

// produce is what a broker does with a produced Kafka batch: FromKafka,
// then, for a compressed one, batch.CheckCompressed (cluster runs it on
// append: the records' checks and max_timestamp). Info.Header is the
// stored batch's.
func produce(in []byte, limits kafkabatch.Limits) ([]byte, kafkabatch.Info, error) {
	out, info, err := kafkabatch.FromKafka(nil, in, limits)
	if err == nil && info.Header.IsCompressed() {
		var c batch.CompressedCheck
		c, err = batch.CheckCompressed(out)
		info.Header = c.Header
	}
	if err != nil {
		return nil, info, err
	}
	return out, info, nil
}

// fromKafka is produce with no limits, failing the test on error.
func fromKafka(t testing.TB, in []byte) ([]byte, kafkabatch.Info) {
	t.Helper()
	out, info, err := produce(in, kafkabatch.Limits{})
	if err != nil {
		t.Fatalf("FromKafka: %v", err)
	}
	return out, info
}

// withCompressed is the batch kb compressed by codec, its records field
// replaced by compressed (which the test built as a client would).
func withCompressed(t testing.TB, kb kbatch, codec kafkabatch.Codec, compressed []byte) []byte {
	t.Helper()
	var h kmsg.RecordBatch
	if err := h.ReadFrom(kb.build(t, codec)); err != nil {
		t.Fatal(err)
	}
	h.Records = compressed
	return seal(h)
}

// zstdFrame writes a zstd frame by hand, as RFC 8878 lays it out: no
// content size, a window of 2^windowLog bytes, no checksum; then raw
// blocks of raw (proto/kafkarecords' tests have the RLE variant).
func zstdFrame(windowLog int, raw []byte) []byte {
	out := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	out = append(out, 0x00, byte((windowLog-10)<<3))
	const maxBlock = 128 << 10
	for len(raw) > 0 {
		n := min(len(raw), maxBlock, 1<<windowLog)
		h := uint32(n) << 3 // raw block
		if n == len(raw) {
			h |= 1
		}
		out = append(out, byte(h), byte(h>>8), byte(h>>16))
		out = append(out, raw[:n]...)
		raw = raw[n:]
	}
	return out
}

// toKafka is AppendKafka(nil, canonical, codec), failing the test on
// error.
func toKafka(t testing.TB, canonical []byte, codec kafkabatch.Codec) []byte {
	t.Helper()
	out, err := kafkabatch.AppendKafka(nil, canonical, codec)
	if err != nil {
		t.Fatalf("AppendKafka: %v", err)
	}
	return out
}

// kafkaRecords decodes a Kafka batch with kmsg, its records
// decompressed first when it is compressed.
func kafkaRecords(t testing.TB, b []byte) (kmsg.RecordBatch, []kmsg.Record) {
	t.Helper()
	var h kmsg.RecordBatch
	if err := h.ReadFrom(b); err != nil {
		t.Fatalf("kmsg cannot read the batch: %v", err)
	}
	records := h.Records
	if codec := kafkabatch.Codec(h.Attributes & 7); codec != kafkabatch.None {
		var err error
		if records, err = kafkarecords.Decompress(records, codec, kafkarecords.MaxUncompressedBytes); err != nil {
			t.Fatalf("the %v batch does not decompress: %v", codec, err)
		}
	}
	var out []kmsg.Record
	for raw := records; len(raw) > 0; {
		var r kmsg.Record
		if err := r.ReadFrom(raw); err != nil {
			t.Fatalf("kmsg cannot read record %d: %v", len(out), err)
		}
		l, n := binary.Varint(raw) // Kafka's varints are zigzag, as Go's
		out = append(out, r)
		n += int(l)
		raw = raw[n:]
	}
	return h, out
}

// canonicalRecords decodes a canonical batch with proto/batch.
func canonicalRecords(t testing.TB, b []byte) []batch.Record {
	t.Helper()
	var out []batch.Record
	if err := batch.ForEachRecord(b, func(r batch.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatalf("ForEachRecord: %v", err)
	}
	return out
}

// uncompressed is canonical batch b with its records uncompressed
// (batch.SetCodec), failing the test on error.
func uncompressed(t testing.TB, b []byte) []byte {
	t.Helper()
	out, err := batch.SetCodec(b, nil, kafkabatch.None)
	if err != nil {
		t.Fatalf("SetCodec(none): %v", err)
	}
	return out
}
