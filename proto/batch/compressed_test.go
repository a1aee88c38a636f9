package batch_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Compressed batches (decision 67): the tests build the Kafka records
// with franz-go's kmsg and compress them with the libraries clients use,
// independently of the code under test.

var codecs = []kafkarecords.Codec{kafkarecords.Gzip, kafkarecords.Snappy, kafkarecords.LZ4, kafkarecords.Zstd}

// kafkaEncode encodes recs as Kafka records (record i has offset delta
// i, timestamp delta from baseTS), nulls as nulls.
func kafkaEncode(recs []testRecord) []byte {
	var out []byte
	for i, tr := range recs {
		r := kmsg.Record{TimestampDelta64: tr.ts - baseTS, OffsetDelta: int32(i), Key: tr.key, Value: tr.value}
		for _, h := range tr.headers {
			r.Headers = append(r.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		out = r.AppendTo(out)
	}
	return out
}

// clientCompress compresses raw with codec as franz-go does (snappy: a
// raw block).
func clientCompress(t testing.TB, raw []byte, codec kafkarecords.Codec) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch codec {
	case kafkarecords.Gzip:
		w := gzip.NewWriter(&buf)
		w.Write(raw)
		w.Close()
	case kafkarecords.Snappy:
		return s2.EncodeSnappy(nil, raw)
	case kafkarecords.LZ4:
		w := lz4.NewWriter(&buf)
		w.Write(raw)
		w.Close()
	case kafkarecords.Zstd:
		enc, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		return enc.EncodeAll(raw, nil)
	default:
		t.Fatalf("codec %v", codec)
	}
	return buf.Bytes()
}

// compressedBatch is the canonical compressed batch of recs as a client
// that compresses sends it: header as for any batch, max_timestamp and
// crc 0, the records in compressed_records.
func compressedBatch(t testing.TB, codec kafkarecords.Codec, recs []testRecord) []byte {
	t.Helper()
	return compressedWith(t, codec, len(recs), clientCompress(t, kafkaEncode(recs), codec))
}

// compressedWith is a compressed batch of n records whose compressed
// records are comp.
func compressedWith(t testing.TB, codec kafkarecords.Codec, n int, comp []byte) []byte {
	t.Helper()
	b := make([]byte, batch.HeaderSize)
	batch.PutHeader(b, batch.Header{Attributes: uint32(codec), LastOffsetDelta: int32(n - 1), BaseTimestamp: baseTS,
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: int32(n)})
	return batch.AppendCompressedRecords(b, comp)
}

// store is what a broker stores for a producer's batch: Canonicalize,
// then CheckCompressed for a compressed one.
func store(t testing.TB, in []byte) ([]byte, batch.Header) {
	t.Helper()
	out, h, err := batch.Canonicalize(bytes.Clone(in))
	if err == nil && h.IsCompressed() {
		var c batch.CompressedCheck
		c, err = batch.CheckCompressed(out)
		h = c.Header
	}
	if err != nil {
		t.Fatalf("store: %v", err)
	}
	return out, h
}

// records decodes b with ForEachRecord.
func records(t testing.TB, b []byte) []batch.Record {
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

// sameRecords compares decoded records, null and empty apart.
func sameRecords(t testing.TB, got, want []batch.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	nullable := func(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }
	for i, g := range got {
		w := want[i]
		ok := g.Offset == w.Offset && g.Timestamp == w.Timestamp && nullable(g.Key, w.Key) && nullable(g.Value, w.Value) && len(g.Headers) == len(w.Headers)
		for j := 0; ok && j < len(g.Headers); j++ {
			ok = g.Headers[j].Key == w.Headers[j].Key && nullable(g.Headers[j].Value, w.Headers[j].Value)
		}
		if !ok {
			t.Fatalf("record %d = %+v, want %+v", i, g, w)
		}
	}
}

// nullRecords differ from sampleRecords by nulls and empties, which a
// compressed batch (Kafka's encoding) keeps apart.
func nullRecords() []testRecord {
	return []testRecord{
		{ts: baseTS, key: nil, value: []byte("null key")},
		{ts: baseTS + 1, key: []byte{}, value: nil, headers: []batch.RecordHeader{{Key: "n", Value: nil}, {Key: "e", Value: []byte{}}}},
		{ts: baseTS + 9, key: []byte("k"), value: []byte{}},
	}
}

// A compressed batch is stored as sent: Canonicalize keeps its bytes
// (CRC and plain producer filled), by the fast path and from any
// encoding; Verify accepts it; CheckCompressed computes max_timestamp;
// ForEachRecord reads the records back, nulls and empties apart.
func TestCompressedBatchesAreStoredAsSent(t *testing.T) {
	for _, codec := range codecs {
		for name, recs := range map[string][]testRecord{"sample": sampleRecords(), "nulls": nullRecords()} {
			t.Run(codec.String()+"/"+name, func(t *testing.T) {
				in := compressedBatch(t, codec, recs)
				comp, _ := batch.CompressedRecords(in)
				out, h := store(t, in)
				if got, err := batch.CompressedRecords(out); err != nil || !bytes.Equal(got, comp) {
					t.Fatalf("compressed_records changed: %v", err)
				}
				if !bytes.Equal(out[batch.CRCStart:batch.CRCStart+5], in[batch.CRCStart:batch.CRCStart+5]) || h.Codec() != codec {
					t.Fatalf("attributes changed: %+v", h)
				}
				maxTS := int64(baseTS)
				for _, r := range recs {
					maxTS = max(maxTS, r.ts)
				}
				if h.MaxTimestamp != maxTS || h.RecordCount != int32(len(recs)) {
					t.Fatalf("header %+v, want max timestamp %d", h, maxTS)
				}
				if vh, err := batch.Verify(out); err != nil || vh != h {
					t.Fatalf("Verify: %+v, %v", vh, err)
				}
				// Again: unchanged. From generated code's encoding:
				// the same bytes.
				if again, h2, err := batch.Canonicalize(bytes.Clone(out)); err != nil || !bytes.Equal(again, out) || h2 != h {
					t.Fatalf("Canonicalize of the stored batch: %v", err)
				}
				m := toMessage(t, out)
				if !bytes.Equal(m.CompressedRecords, comp) || len(m.Records) != 0 {
					t.Fatal("generated code does not read compressed_records")
				}
				if slow, h3, err := batch.Canonicalize(marshal(t, m)); err != nil || !bytes.Equal(slow, out) || h3 != h {
					t.Fatalf("proto.Marshal of the stored batch: %v\n%x\n%x", err, slow, out)
				}
				if slow, _, err := batch.Canonicalize(shuffled(t, out)); err != nil || !bytes.Equal(slow, out) {
					t.Fatalf("shuffled fields: %v", err)
				}
				plain := build(t, batch.PlainProducer, 0, recs)
				want := records(t, plain)
				if name == "nulls" {
					// The Builder writes no empty field: compare
					// with Kafka's nulls instead.
					want[1].Key, want[1].Headers[1].Value, want[2].Value = []byte{}, []byte{}, []byte{}
				}
				sameRecords(t, records(t, out), want)
			})
		}
	}
}

// The producer rules of a compressed batch, each with its code; nothing
// is decompressed by Canonicalize.
func TestCanonicalizeCompressedRules(t *testing.T) {
	good := compressedBatch(t, kafkarecords.Zstd, sampleRecords())
	comp, _ := batch.CompressedRecords(good)
	field := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	header := good[:batch.HeaderSize]
	entries := build(t, batch.PlainProducer, 0, sampleRecords())[batch.HeaderSize:]
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	storedOK, _ := store(t, good)
	for _, c := range []struct {
		name string
		in   []byte
		want sluicev1.ErrorCode
	}{
		{"good", clone(good), sluicev1.ErrorCode_NONE},
		{"good, crc sent", clone(storedOK), sluicev1.ErrorCode_NONE},
		{"wrong crc", func() []byte { b := clone(storedOK); b[len(b)-1] ^= 1; return b }(), sluicev1.ErrorCode_CORRUPT_RECORD},
		{"codec 5", withHeader(t, good, func(h *batch.Header) { h.Attributes = 5 }), sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE},
		{"codec 7 slow", marshal(t, func() *sluicev1.RecordBatch { m := toMessage(t, good); m.Attributes = 7; return m }()), sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE},
		{"records and compressed_records", cat(header, entries, field(13, comp)), sluicev1.ErrorCode_INVALID_RECORD},
		{"compressed_records twice", cat(header, field(13, comp), field(13, comp)), sluicev1.ErrorCode_INVALID_RECORD},
		{"compressed_records empty", cat(header, field(13, nil)), sluicev1.ErrorCode_INVALID_RECORD},
		{"codec without compressed_records", clone(header), sluicev1.ErrorCode_INVALID_RECORD},
		{"simple produce", withHeader(t, good, func(h *batch.Header) { h.RecordCount, h.LastOffsetDelta = 0, 0 }), sluicev1.ErrorCode_INVALID_RECORD},
		{"record_count negative", withHeader(t, good, func(h *batch.Header) { h.RecordCount, h.LastOffsetDelta = -1, -2 }), sluicev1.ErrorCode_INVALID_RECORD},
		{"last_offset_delta wrong", withHeader(t, good, func(h *batch.Header) { h.LastOffsetDelta++ }), sluicev1.ErrorCode_INVALID_RECORD},
		{"unknown attribute bit", withHeader(t, good, func(h *batch.Header) { h.Attributes |= 1 << 7 }), sluicev1.ErrorCode_INVALID_RECORD},
		// Not decompressed here: garbage passes Canonicalize and is
		// refused by CheckCompressed (below).
		{"garbage compressed", cat(header, field(13, []byte("not zstd"))), sluicev1.ErrorCode_NONE},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := batch.Canonicalize(c.in)
			if got := errs.Code(err); got != c.want {
				t.Fatalf("Canonicalize: %v (%v), want %v", got, err, c.want)
			}
			if err != nil && out != nil {
				t.Fatalf("output on error")
			}
		})
	}
	// max.message.bytes bounds the compressed size.
	if _, _, err := batch.CanonicalizeMax(clone(good), len(good)); err != nil {
		t.Fatalf("at max.message.bytes: %v", err)
	}
	if _, _, err := batch.CanonicalizeMax(clone(good), len(good)-1); errs.Code(err) != sluicev1.ErrorCode_MESSAGE_TOO_LARGE {
		t.Fatalf("one byte over max.message.bytes: %v", err)
	}
}

// CheckCompressed refuses what Kafka's broker refuses in a compressed
// batch's records, with the kafkarecords sentinels.
func TestCheckCompressedRefusals(t *testing.T) {
	recs := sampleRecords()
	raw := kafkaEncode(recs)
	zs := func(b []byte) []byte { return clientCompress(t, b, kafkarecords.Zstd) }
	var outOfOrder []byte
	for i, d := range []int32{0, 2, 1} {
		r := kmsg.Record{OffsetDelta: d, Value: []byte{byte(i)}}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		outOfOrder = r.AppendTo(outOfOrder)
	}
	for _, c := range []struct {
		name     string
		in       []byte
		sentinel error
		code     sluicev1.ErrorCode
	}{
		{"count too high", compressedWith(t, kafkarecords.Zstd, len(recs)+1, zs(raw)), kafkarecords.ErrRecordCount, sluicev1.ErrorCode_INVALID_RECORD},
		{"count too low", compressedWith(t, kafkarecords.Zstd, len(recs)-1, zs(raw)), kafkarecords.ErrRecordCount, sluicev1.ErrorCode_INVALID_RECORD},
		{"offset deltas out of order", compressedWith(t, kafkarecords.Zstd, 3, zs(outOfOrder)), kafkarecords.ErrOffsetDelta, sluicev1.ErrorCode_INVALID_RECORD},
		{"record cut", compressedWith(t, kafkarecords.Zstd, len(recs), zs(raw[:len(raw)-1])), kafkarecords.ErrRecordFraming, sluicev1.ErrorCode_CORRUPT_RECORD},
		{"not zstd", compressedWith(t, kafkarecords.Zstd, len(recs), []byte("not zstd")), kafkarecords.ErrDecompress, sluicev1.ErrorCode_CORRUPT_RECORD},
		{"gzip cut", compressedWith(t, kafkarecords.Gzip, len(recs), clientCompress(t, raw, kafkarecords.Gzip)[:20]), kafkarecords.ErrDecompress, sluicev1.ErrorCode_CORRUPT_RECORD},
		// 65 MiB of zeros in a few KiB: refused at
		// kafkarecords.MaxUncompressedBytes (64 MiB).
		{"bomb", compressedWith(t, kafkarecords.Zstd, 1, zs(make([]byte, kafkarecords.MaxUncompressedBytes+1<<20))), kafkarecords.ErrDecompressedTooLarge, sluicev1.ErrorCode_MESSAGE_TOO_LARGE},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, _, err := batch.Canonicalize(c.in)
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			_, err = batch.CheckCompressed(b)
			if !errors.Is(err, c.sentinel) || errs.Code(err) != c.code {
				t.Fatalf("CheckCompressed = %v (%v), want %v", err, errs.Code(err), c.sentinel)
			}
		})
	}
}

// Kafka applies max.message.bytes to the compressed size: franz-go's
// TestConsumeMaxDecompressBatchBytes produces 3 KiB of zstd that
// decompresses to 3 MiB. Stored under a 1 MiB max.message.bytes and read
// back.
func TestSmallCompressedBatchOfLargeRecords(t *testing.T) {
	value := bytes.Repeat([]byte("x"), 3<<20)
	in := compressedBatch(t, kafkarecords.Zstd, []testRecord{{ts: baseTS, value: value}})
	if len(in) > 4<<10 {
		t.Fatalf("batch of %d bytes", len(in))
	}
	b, _, err := batch.CanonicalizeMax(in, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	c, err := batch.CheckCompressed(b)
	if err != nil || len(c.Records) < 3<<20 || c.Scan.N != 1 {
		t.Fatalf("CheckCompressed: %v", err)
	}
	if got := records(t, b); len(got) != 1 || !bytes.Equal(got[0].Value, value) {
		t.Fatal("the 3 MiB record does not read back")
	}
}

// A compressed batch damaged at rest is detected by its CRC before it is
// decompressed: Verify, ForEachRecord and Filter refuse it.
func TestCorruptCompressedBatchIsDetected(t *testing.T) {
	for _, codec := range codecs {
		stored, _ := store(t, compressedBatch(t, codec, sampleRecords()))
		for _, at := range []int{batch.HeaderSize + 3, len(stored) - 1, batch.CRCStart + 9} {
			b := clone(stored)
			b[at] ^= 0x20
			if _, err := batch.Verify(b); errs.Code(err) != sluicev1.ErrorCode_CORRUPT_RECORD {
				t.Errorf("%v byte %d: Verify = %v", codec, at, err)
			}
			err := batch.ForEachRecord(b, func(batch.Record) error { return nil })
			if errs.Code(err) != sluicev1.ErrorCode_CORRUPT_RECORD || !bytes.Contains([]byte(errs.Message(err)), []byte("CRC")) {
				t.Errorf("%v byte %d: ForEachRecord = %v, want a CRC mismatch", codec, at, err)
			}
			if _, _, err := batch.Filter(nil, b, func(batch.Record) bool { return true }); errs.Code(err) != sluicev1.ErrorCode_CORRUPT_RECORD {
				t.Errorf("%v byte %d: Filter = %v", codec, at, err)
			}
		}
	}
}

// Filter of a compressed batch (the log cleaner's rewrite) keeps its
// codec and recompresses the records kept, byte for byte in Kafka's
// encoding, with their offset deltas; all kept: the batch unchanged;
// none: an empty uncompressed batch.
func TestFilterCompressedBatches(t *testing.T) {
	for _, codec := range codecs {
		stored, h := store(t, compressedBatch(t, codec, sampleRecords()))
		all := records(t, stored)
		odd, n, err := batch.Filter([]byte("prefix"), stored, func(r batch.Record) bool { return r.Offset%2 == 1 })
		if err != nil || n != 2 || !bytes.HasPrefix(odd, []byte("prefix")) {
			t.Fatalf("%v: Filter kept %d: %v", codec, n, err)
		}
		odd = odd[len("prefix"):]
		oh, err := batch.Verify(odd)
		if err != nil || oh.Codec() != codec || oh.RecordCount != 2 || oh.LastOffsetDelta != h.LastOffsetDelta || oh.MaxTimestamp != h.MaxTimestamp {
			t.Fatalf("%v: filtered header %+v, %v", codec, oh, err)
		}
		sameRecords(t, records(t, odd), []batch.Record{all[1], all[3]})
		if same, n, err := batch.Filter(nil, stored, func(batch.Record) bool { return true }); err != nil || n != 4 || !bytes.Equal(same, stored) {
			t.Fatalf("%v: Filter keeping all changed the batch: %v", codec, err)
		}
		none, n, err := batch.Filter(nil, stored, func(batch.Record) bool { return false })
		nh, verr := batch.Verify(none)
		if err != nil || verr != nil || n != 0 || nh.IsCompressed() || len(none) != batch.HeaderSize || nh.LastOffsetDelta != h.LastOffsetDelta {
			t.Fatalf("%v: Filter keeping none: %+v, %v, %v", codec, nh, err, verr)
		}
		// Filtered again (a second cleaning pass): gaps stay.
		again, n, err := batch.Filter(nil, odd, func(r batch.Record) bool { return r.Offset == 3 })
		if err != nil || n != 1 {
			t.Fatalf("%v: second Filter: %v", codec, err)
		}
		sameRecords(t, records(t, again), []batch.Record{all[3]})
	}
}

// SetCodec converts between codecs and to and from field-12 records,
// keeping the header but the codec and every record.
func TestSetCodec(t *testing.T) {
	plain := build(t, batch.Producer{ID: 7, Epoch: 2, BaseSequence: 40}, batch.AttrTransactional, sampleRecords())
	ph, _ := batch.ParseHeader(plain)
	want := records(t, plain)
	for _, codec := range codecs {
		comp, err := batch.SetCodec(plain, nil, codec)
		if err != nil {
			t.Fatal(err)
		}
		h, err := batch.Verify(comp)
		if err != nil || h.Codec() != codec || h.Attributes&^batch.AttrCompressionMask != ph.Attributes ||
			h.ProducerID != 7 || h.BaseSequence != 40 || h.MaxTimestamp != ph.MaxTimestamp || h.RecordCount != ph.RecordCount {
			t.Fatalf("%v: header %+v, %v", codec, h, err)
		}
		sameRecords(t, records(t, comp), want)
		if back, err := batch.SetCodec(comp, nil, kafkarecords.None); err != nil || !bytes.Equal(back, plain) {
			t.Fatalf("%v: back to none: %v\n%x\n%x", codec, err, back, plain)
		}
		// From one codec to another, with the records CheckCompressed
		// decompressed.
		c, err := batch.CheckCompressed(clone(comp))
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range codecs {
			conv, err := batch.SetCodec(comp, c.Records, to)
			if err != nil {
				t.Fatal(err)
			}
			if h, err := batch.Verify(conv); err != nil || h.Codec() != to {
				t.Fatalf("%v to %v: %+v, %v", codec, to, h, err)
			}
			sameRecords(t, records(t, conv), want)
		}
	}
	if same, err := batch.SetCodec(plain, nil, kafkarecords.None); err != nil || &same[0] != &plain[0] {
		t.Fatal("SetCodec to the batch's own codec copied it")
	}
	if _, err := batch.SetCodec(plain, nil, 6); errs.Code(err) != sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE {
		t.Fatalf("SetCodec(6) = %v", err)
	}
	// A batch of more records than a compressed batch may hold
	// uncompressed is refused.
	var big batch.Builder
	big.Reset(baseTS)
	value := make([]byte, 1<<20)
	for range kafkarecords.MaxUncompressedBytes>>20 + 1 {
		big.Add(baseTS, nil, value, nil)
	}
	if _, err := batch.SetCodec(big.Finish(batch.PlainProducer, 0), nil, kafkarecords.LZ4); errs.Code(err) != sluicev1.ErrorCode_MESSAGE_TOO_LARGE {
		t.Fatalf("SetCodec of a 65 MiB batch = %v", err)
	}
}

// A compressed batch's records are Kafka's record encoding: written by
// hand from the spec, read by ForEachRecord.
func TestCompressedRecordsAreKafkasEncoding(t *testing.T) {
	// Record 0: attributes 0, timestamp delta 5, offset delta 0, key
	// null, value "v", one header "h" = null.
	body := []byte{0, 10, 0, 1, 2, 'v', 2, 2, 'h', 1}
	raw := append(binary.AppendVarint(nil, int64(len(body))), body...)
	b := make([]byte, batch.HeaderSize)
	batch.PutHeader(b, batch.Header{Attributes: uint32(kafkarecords.Snappy), BaseTimestamp: baseTS, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: 1})
	b = batch.AppendCompressedRecords(b, s2.EncodeSnappy(nil, raw))
	stored, _ := store(t, b)
	got := records(t, stored)
	if len(got) != 1 || got[0].Key != nil || string(got[0].Value) != "v" || got[0].Timestamp != baseTS+5 ||
		len(got[0].Headers) != 1 || got[0].Headers[0].Key != "h" || got[0].Headers[0].Value != nil {
		t.Fatalf("records %+v", got)
	}
}
