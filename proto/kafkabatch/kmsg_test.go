package kafkabatch_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/kafkabatch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// kmsgBatches are Kafka batches as franz-go's kmsg encodes them, covering
// what the conversion must keep: nulls and empties, headers, negative
// and 64-bit timestamp deltas, LogAppendTime, producer fields,
// transactions and control markers.
func kmsgBatches() map[string]kbatch {
	empty := []byte{}
	idem := plainHeader()
	idem.ProducerID, idem.ProducerEpoch, idem.FirstSequence = 1000, 3, 42
	txn := idem
	txn.Attributes = int16(kafkabatch.AttrTransactional)
	lat := plainHeader()
	lat.Attributes = int16(kafkabatch.AttrLogAppendTime)
	marker := func(t batch.ControlType, coordinatorEpoch int32) kbatch {
		h := plainHeader()
		h.ProducerID, h.ProducerEpoch, h.FirstSequence = 1000, 4, -1
		h.Attributes = int16(kafkabatch.AttrTransactional | kafkabatch.AttrControl)
		return kbatch{h, []kmsg.Record{rec(0, 0, batch.ControlRecordKey(t), batch.MarkerValue(coordinatorEpoch))}}
	}
	leader := plainHeader()
	leader.FirstOffset, leader.PartitionLeaderEpoch = 1234567, 9
	var many []kmsg.Record
	for i := range 300 {
		many = append(many, rec(i, int64(i%7)-3, []byte(fmt.Sprintf("key-%d", i)), bytes.Repeat([]byte{byte(i)}, i%40)))
	}
	return map[string]kbatch{
		"plain": {plainHeader(), []kmsg.Record{
			rec(0, 0, []byte("k0"), []byte("hello")),
			rec(1, 5, []byte("k1"), []byte("world")),
		}},
		"nulls-and-empties": {plainHeader(), []kmsg.Record{
			rec(0, 0, nil, []byte("null key")),
			rec(1, 1, []byte("null value"), nil),
			rec(2, 2, empty, []byte("empty key")),
			rec(3, 3, []byte("empty value"), empty),
			rec(4, 4, nil, nil),
			rec(5, 5, empty, empty),
		}},
		"headers": {plainHeader(), []kmsg.Record{
			rec(0, 0, []byte("k"), []byte("v"),
				kmsg.Header{Key: "trace", Value: []byte("t-1")},
				kmsg.Header{Key: "null", Value: nil},
				kmsg.Header{Key: "empty", Value: empty},
				kmsg.Header{Key: "", Value: []byte("empty key")},
				kmsg.Header{Key: "trace", Value: []byte("repeated")},
				kmsg.Header{Key: "ünïcödé", Value: []byte{0, 0xff}}),
			rec(1, 0, nil, nil, kmsg.Header{Key: "", Value: nil}),
		}},
		"negative-timestamp-deltas": {plainHeader(), []kmsg.Record{
			rec(0, 0, nil, []byte("a")),
			rec(1, -5, nil, []byte("b")),
			rec(2, -1<<40, nil, []byte("c")),
			rec(3, 1<<40, nil, []byte("d")),
		}},
		"log-append-time": {lat, []kmsg.Record{rec(0, 0, nil, []byte("x")), rec(1, 2, nil, []byte("y"))}},
		"idempotent":      {idem, []kmsg.Record{rec(0, 0, []byte("k"), []byte("v")), rec(1, 0, []byte("k"), []byte("w"))}},
		"transactional":   {txn, []kmsg.Record{rec(0, 0, []byte("k"), []byte("v"))}},
		"commit-marker":   marker(batch.ControlCommit, 7),
		"abort-marker":    marker(batch.ControlAbort, 0),
		"leader-set":      {leader, []kmsg.Record{rec(0, 0, []byte("k"), []byte("v"))}},
		"many-records":    {plainHeader(), many},
		"large-values": {plainHeader(), []kmsg.Record{
			rec(0, 0, []byte("big"), bytes.Repeat([]byte("0123456789abcdef"), 20000)),
			rec(1, 1, []byte(strings.Repeat("k", 300)), bytes.Repeat([]byte{7}, 70000),
				kmsg.Header{Key: strings.Repeat("h", 200), Value: bytes.Repeat([]byte{9}, 200)}),
		}},
	}
}

// Uncompressed Kafka bytes survive FromKafka then AppendKafka byte for
// byte, CRC included; the canonical batch is what batch.Canonicalize
// stores (it returns it unchanged) and batch.Verify accepts, and its
// records, decoded by proto/batch and by generated code, are kmsg's.
func TestKafkaBytesRoundTripExactly(t *testing.T) {
	for name, kb := range kmsgBatches() {
		t.Run(name, func(t *testing.T) {
			in := kb.build(t, kafkabatch.None)
			canonical, info := fromKafka(t, in)
			if info.Codec != kafkabatch.None {
				t.Errorf("codec %v", info.Codec)
			}
			checkCanonical(t, canonical, info, kb)
			out := toKafka(t, canonical, kafkabatch.None)
			if !bytes.Equal(out, in) {
				t.Fatalf("AppendKafka(FromKafka(x)) != x\n got %x\nwant %x", out, in)
			}
			// Appending after other bytes leaves them alone.
			prefix := []byte("fetch answer so far")
			got, err := kafkabatch.AppendKafka(bytes.Clone(prefix), canonical, kafkabatch.None)
			if err != nil || !bytes.Equal(got, append(prefix, in...)) {
				t.Fatalf("AppendKafka after a prefix = %x, %v", got, err)
			}
		})
	}
}

// checkCanonical checks the canonical batch made from kb.
func checkCanonical(t *testing.T, canonical []byte, info kafkabatch.Info, kb kbatch) {
	t.Helper()
	if again, h, err := batch.Canonicalize(bytes.Clone(canonical)); err != nil || !bytes.Equal(again, canonical) || h != info.Header {
		t.Fatalf("batch.Canonicalize changes the canonical batch: %v\n got %x\nwant %x", err, again, canonical)
	}
	h, err := batch.Verify(canonical)
	if err != nil || h != info.Header {
		t.Fatalf("batch.Verify = %+v, %v; FromKafka said %+v", h, err, info.Header)
	}
	want := kb.hdr
	if want.ProducerID <= 0 {
		want.ProducerID, want.ProducerEpoch, want.FirstSequence = -1, -1, -1
	}
	if h.BaseOffset != want.FirstOffset || h.PartitionLeaderEpoch != want.PartitionLeaderEpoch ||
		h.Attributes != uint32(want.Attributes&^7) || h.BaseTimestamp != want.FirstTimestamp ||
		h.ProducerID != want.ProducerID || h.ProducerEpoch != int32(want.ProducerEpoch) || h.BaseSequence != want.FirstSequence ||
		int(h.RecordCount) != len(kb.records) || int(h.LastOffsetDelta) != len(kb.records)-1 {
		t.Errorf("canonical header %+v from Kafka header %+v", h, want)
	}
	recs := canonicalRecords(t, canonical)
	var msg sluicev1.RecordBatch
	if err := proto.Unmarshal(canonical, &msg); err != nil {
		t.Fatalf("generated code cannot decode the canonical batch: %v", err)
	}
	if len(recs) != len(kb.records) || len(msg.Records) != len(kb.records) {
		t.Fatalf("%d records (%d by generated code), want %d", len(recs), len(msg.Records), len(kb.records))
	}
	for i, k := range kb.records {
		r := recs[i]
		wantTime := h.BaseTimestamp + k.TimestampDelta64
		if h.Attributes&batch.AttrLogAppendTime != 0 {
			wantTime = h.MaxTimestamp // every record's, as Kafka reads a LogAppendTime batch
		}
		if r.Offset != h.BaseOffset+int64(i) || r.Timestamp != wantTime {
			t.Errorf("record %d at offset %d time %d, want %d", i, r.Offset, r.Timestamp, wantTime)
		}
		// proto/batch keeps presence: nil is null, empty is empty.
		if !sameNullable(r.Key, k.Key) || !sameNullable(r.Value, k.Value) {
			t.Errorf("record %d key %q value %q, want %q %q (nil %v %v, want %v %v)", i, r.Key, r.Value, k.Key, k.Value, r.Key == nil, r.Value == nil, k.Key == nil, k.Value == nil)
		}
		if len(r.Headers) != len(k.Headers) {
			t.Fatalf("record %d has %d headers, want %d", i, len(r.Headers), len(k.Headers))
		}
		for j, kh := range k.Headers {
			if r.Headers[j].Key != kh.Key || !sameNullable(r.Headers[j].Value, kh.Value) {
				t.Errorf("record %d header %d = %q:%q, want %q:%q", i, j, r.Headers[j].Key, r.Headers[j].Value, kh.Key, kh.Value)
			}
		}
		// Generated code sees the same bytes (it cannot tell an empty
		// field from an absent one).
		m := msg.Records[i]
		if !bytes.Equal(m.Key, k.Key) || !bytes.Equal(m.Value, k.Value) || len(m.Headers) != len(k.Headers) || m.TimestampDelta != k.TimestampDelta64 || m.OffsetDelta != int32(i) {
			t.Errorf("generated code reads record %d as %v", i, m)
		}
	}
}

// sameNullable: equal bytes, and both nil or both not.
func sameNullable(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }

// A compressed batch is stored compressed (decision 67): its
// compressed_records are the producer's bytes as sent, its records are
// the uncompressed batch's, AppendKafka gives back the producer's batch
// byte for byte (no recompression), and the uncompressed batch sent by
// AppendKafka with any codec reads back to the same records.
func TestCompressedBatchesKeepTheProducersBytes(t *testing.T) {
	codecs := []kafkabatch.Codec{kafkabatch.Gzip, kafkabatch.Snappy, kafkabatch.LZ4, kafkabatch.Zstd}
	for name, kb := range kmsgBatches() {
		plain := kb.build(t, kafkabatch.None)
		want, _ := fromKafka(t, plain)
		for _, codec := range codecs {
			t.Run(name+"/"+codec.String(), func(t *testing.T) {
				in := kb.build(t, codec)
				canonical, info := fromKafka(t, in)
				if info.Codec != codec || info.Header.Codec() != codec {
					t.Errorf("Info.Codec = %v, header codec %v", info.Codec, info.Header.Codec())
				}
				comp, err := batch.CompressedRecords(canonical)
				if err != nil || !bytes.Equal(comp, in[kafkabatch.HeaderSize:]) {
					t.Fatalf("compressed_records are not the producer's bytes: %v", err)
				}
				if len(canonical) != batch.CompressedSize(len(comp)) {
					t.Fatalf("canonical batch of %d bytes for %d compressed", len(canonical), len(comp))
				}
				h, err := batch.Verify(canonical)
				if err != nil || h != info.Header {
					t.Fatalf("Verify: %+v, %v; want %+v", h, err, info.Header)
				}
				wh, _ := batch.ParseHeader(want)
				if h.MaxTimestamp != wh.MaxTimestamp || h.RecordCount != wh.RecordCount || h.LastOffsetDelta != wh.LastOffsetDelta {
					t.Fatalf("header %+v, the uncompressed batch's %+v", h, wh)
				}
				if !bytes.Equal(uncompressed(t, canonical), want) {
					t.Fatalf("the %v batch uncompressed is not the uncompressed batch's canonical form", codec)
				}
				if !equalRecords(canonicalRecords(t, canonical), canonicalRecords(t, want)) {
					t.Fatal("ForEachRecord reads other records from the compressed batch")
				}
				if out := toKafka(t, canonical, kafkabatch.None); !bytes.Equal(out, in) {
					t.Fatalf("AppendKafka(FromKafka(%v batch)) is not the producer's batch", codec)
				}
				for _, to := range codecs {
					out := toKafka(t, want, to)
					h, err := kafkabatch.ParseHeader(out)
					if err != nil || h.Codec() != to {
						t.Fatalf("AppendKafka(%v) header %+v, %v", to, h, err)
					}
					if back, _ := fromKafka(t, out); !bytes.Equal(uncompressed(t, back), want) {
						t.Fatalf("AppendKafka(%v) does not read back to the canonical batch", to)
					}
				}
			})
		}
	}
}

// equalRecords compares decoded records, nulls and empties apart.
func equalRecords(a, b []batch.Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Offset != y.Offset || x.Timestamp != y.Timestamp || !sameNullable(x.Key, y.Key) || !sameNullable(x.Value, y.Value) || len(x.Headers) != len(y.Headers) {
			return false
		}
		for j := range x.Headers {
			if x.Headers[j].Key != y.Headers[j].Key || !sameNullable(x.Headers[j].Value, y.Headers[j].Value) {
				return false
			}
		}
	}
	return true
}

// What AppendKafka writes, kmsg reads back to the records it was built
// from: nulls stay null, empties empty.
func TestAppendKafkaReadsBackWithKmsg(t *testing.T) {
	for name, kb := range kmsgBatches() {
		canonical, _ := fromKafka(t, kb.build(t, kafkabatch.None))
		h, recs := kafkaRecords(t, toKafka(t, canonical, kafkabatch.None))
		if h.NumRecords != int32(len(kb.records)) || len(recs) != len(kb.records) {
			t.Fatalf("%s: %d records (header says %d), want %d", name, len(recs), h.NumRecords, len(kb.records))
		}
		for i, r := range recs {
			k := kb.records[i]
			if !sameNullable(r.Key, k.Key) || !sameNullable(r.Value, k.Value) || r.TimestampDelta64 != k.TimestampDelta64 || r.OffsetDelta != k.OffsetDelta {
				t.Errorf("%s: record %d = %+v, want %+v", name, i, r, k)
			}
			for j, kh := range k.Headers {
				if r.Headers[j].Key != kh.Key || !sameNullable(r.Headers[j].Value, kh.Value) {
					t.Errorf("%s: record %d header %d = %+v, want %+v", name, i, j, r.Headers[j], kh)
				}
			}
		}
	}
}

// Markers are Kafka's layout in both forms: the marker batch the broker
// builds (batch.MarkerBatch) is, in Kafka's format, the control batch a
// Kafka broker writes, and a Kafka marker reads as a Sluice marker.
func TestTransactionMarkersConvertBothWays(t *testing.T) {
	for _, c := range []struct {
		typ   batch.ControlType
		epoch int32
	}{{batch.ControlCommit, 7}, {batch.ControlAbort, 0}, {batch.ControlCommit, 1<<31 - 1}} {
		sluice := batch.MarkerBatch(batch.Producer{ID: 1000, Epoch: 4}, c.typ, c.epoch, baseTS)
		h := plainHeader()
		h.ProducerID, h.ProducerEpoch, h.FirstSequence = 1000, 4, -1
		h.Attributes = int16(kafkabatch.AttrTransactional | kafkabatch.AttrControl)
		h.PartitionLeaderEpoch = 0 // MarkerBatch leaves it to the leader
		kafka := kbatch{h, []kmsg.Record{rec(0, 0, batch.ControlRecordKey(c.typ), batch.MarkerValue(c.epoch))}}.build(t, kafkabatch.None)
		if got := toKafka(t, sluice, kafkabatch.None); !bytes.Equal(got, kafka) {
			t.Errorf("%v marker: AppendKafka = %x, want %x", c.typ, got, kafka)
		}
		canonical, info := fromKafka(t, kafka)
		if !bytes.Equal(canonical, sluice) {
			t.Errorf("%v marker: FromKafka = %x, want %x", c.typ, canonical, sluice)
		}
		if !info.Header.IsControl() || !info.Header.IsTransactional() {
			t.Errorf("%v marker: header %+v", c.typ, info.Header)
		}
		r := canonicalRecords(t, canonical)[0]
		if typ, epoch, err := batch.ParseMarker(r.Key, r.Value); err != nil || typ != c.typ || epoch != c.epoch {
			t.Errorf("ParseMarker = %v %d %v", typ, epoch, err)
		}
	}
}

// A batch the Go client builds (proto/batch.Builder: empty means none)
// reaches a Kafka consumer with null keys and values where it had none.
func TestBuilderBatchesHaveNullsInKafka(t *testing.T) {
	var b batch.Builder
	b.Reset(baseTS)
	b.Add(baseTS, nil, []byte("v"), []batch.RecordHeader{{Key: "h", Value: nil}})
	b.Add(baseTS+1, []byte("k"), nil, nil)
	canonical := b.Finish(batch.PlainProducer, 0)
	_, recs := kafkaRecords(t, toKafka(t, canonical, kafkabatch.None))
	if recs[0].Key != nil || recs[0].Headers[0].Value != nil || recs[1].Value != nil {
		t.Fatalf("records %+v: want null key, header value and value", recs)
	}
	if back, _ := fromKafka(t, toKafka(t, canonical, kafkabatch.None)); !bytes.Equal(back, canonical) {
		t.Fatal("a Builder batch does not survive the round trip")
	}
}

// A stored batch the log cleaner compacted (gaps in its offset deltas,
// or no records left) is a valid Kafka batch: Kafka's cleaner writes the
// same.
func TestCompactedBatchesConvert(t *testing.T) {
	kb := kmsgBatches()["nulls-and-empties"]
	for _, codec := range []kafkabatch.Codec{kafkabatch.None, kafkabatch.Zstd} {
		canonical, _ := fromKafka(t, kb.build(t, codec))
		checkCompactedConvert(t, kb, canonical, codec)
	}
}

// checkCompactedConvert compacts canonical, holding kb's records with
// codec, and checks what AppendKafka sends for it: a compressed batch
// keeps its codec (Filter recompresses) unless no record is left.
func checkCompactedConvert(t *testing.T, kb kbatch, canonical []byte, codec kafkabatch.Codec) {
	for _, keep := range []func(batch.Record) bool{
		func(r batch.Record) bool { return r.Offset%2 == 1 },
		func(batch.Record) bool { return false },
	} {
		compacted, kept, err := batch.Filter(nil, canonical, keep)
		if err != nil {
			t.Fatal(err)
		}
		out := toKafka(t, compacted, kafkabatch.None)
		h, recs := kafkaRecords(t, out)
		if int(h.NumRecords) != kept || len(recs) != kept || h.LastOffsetDelta != int32(len(kb.records)-1) {
			t.Fatalf("compacted %v batch: %d records of %d, last offset delta %d", codec, len(recs), h.NumRecords, h.LastOffsetDelta)
		}
		if want := map[bool]kafkabatch.Codec{true: kafkabatch.None, false: codec}[kept == 0]; kafkabatch.Codec(h.Attributes&7) != want {
			t.Fatalf("compacted %v batch of %d records sent as %v", codec, kept, kafkabatch.Codec(h.Attributes&7))
		}
		for i, r := range recs {
			if want := kb.records[2*i+1]; r.OffsetDelta != want.OffsetDelta || !sameNullable(r.Key, want.Key) || !sameNullable(r.Value, want.Value) {
				t.Errorf("kept record %d = %+v, want %+v", i, r, want)
			}
		}
	}
}

// A stored record is any protobuf encoding of Record that Canonicalize
// accepted (fields in any order, repeated, with overlong tags and
// lengths, long values): AppendKafka reads it as protobuf does, the last
// of a repeated field winning, and as proto/batch does.
func TestAppendKafkaReadsAnyRecordEncoding(t *testing.T) {
	overlong := func(b []byte, v uint64) []byte { // v as a 3-byte varint
		return append(b, byte(v)|0x80, byte(v>>7)|0x80, byte(v>>14))
	}
	bytesField := func(b []byte, num protowire.Number, v []byte) []byte {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, v)
	}
	header := func(k, v string) []byte {
		h := bytesField(nil, 2, []byte(v)) // value first
		return bytesField(h, 1, []byte(k))
	}
	var r0, r1, r2 []byte
	r0 = bytesField(r0, 5, header("h1", "v1"))
	r0 = bytesField(r0, 4, []byte("value"))
	r0 = bytesField(r0, 3, []byte("first key"))
	r0 = bytesField(r0, 3, []byte("key")) // the last one wins
	r0 = protowire.AppendTag(r0, 1, protowire.VarintType)
	r0 = protowire.AppendVarint(r0, protowire.EncodeZigZag(-7))
	r0 = bytesField(r0, 5, header("h2", ""))
	// Record 1: overlong tags and lengths, a value of 300 bytes.
	r1 = overlong(r1, uint64(2<<3|protowire.VarintType))
	r1 = protowire.AppendVarint(r1, protowire.EncodeZigZag(1))
	r1 = overlong(r1, uint64(4<<3|protowire.BytesType))
	r1 = overlong(r1, 300)
	r1 = append(r1, bytes.Repeat([]byte("x"), 300)...)
	r1 = protowire.AppendTag(r1, 3, protowire.BytesType)
	r1 = overlong(r1, 0) // an empty key
	// Record 2: offset delta 2 after everything else, a 64-bit timestamp delta.
	r2 = bytesField(r2, 5, nil)
	r2 = protowire.AppendTag(r2, 1, protowire.VarintType)
	r2 = protowire.AppendVarint(r2, protowire.EncodeZigZag(1<<50))
	r2 = protowire.AppendTag(r2, 2, protowire.VarintType)
	r2 = protowire.AppendVarint(r2, protowire.EncodeZigZag(2))
	var msg []byte
	msg = protowire.AppendTag(msg, 6, protowire.Fixed64Type)
	msg = protowire.AppendFixed64(msg, baseTS)
	msg = protowire.AppendTag(msg, 5, protowire.Fixed32Type)
	msg = protowire.AppendFixed32(msg, 2)
	msg = protowire.AppendTag(msg, 11, protowire.Fixed32Type)
	msg = protowire.AppendFixed32(msg, 3)
	for _, r := range [][]byte{r0, r1, r2} {
		msg = bytesField(msg, 12, r)
	}
	canonical, _, err := batch.Canonicalize(msg)
	if err != nil {
		t.Fatal(err)
	}
	_, got := kafkaRecords(t, toKafka(t, canonical, kafkabatch.None))
	var pm sluicev1.RecordBatch
	if err := proto.Unmarshal(canonical, &pm); err != nil {
		t.Fatal(err)
	}
	want := canonicalRecords(t, canonical)
	if len(got) != 3 || len(want) != 3 {
		t.Fatalf("%d records, proto/batch reads %d", len(got), len(want))
	}
	for i, k := range got {
		w, m := want[i], pm.Records[i]
		if int64(k.OffsetDelta) != w.Offset || k.TimestampDelta64 != m.TimestampDelta ||
			!sameNullable(k.Key, w.Key) || !sameNullable(k.Value, w.Value) || !bytes.Equal(k.Key, m.Key) || !bytes.Equal(k.Value, m.Value) ||
			len(k.Headers) != len(m.Headers) {
			t.Fatalf("record %d: Kafka %+v, proto/batch %+v, generated code %v", i, k, w, m)
		}
		for j, h := range m.Headers {
			if k.Headers[j].Key != h.Key || !bytes.Equal(k.Headers[j].Value, h.Value) || !sameNullable(k.Headers[j].Value, w.Headers[j].Value) {
				t.Errorf("record %d header %d: %+v, generated code %v", i, j, k.Headers[j], h)
			}
		}
	}
	if string(got[0].Key) != "key" || got[1].Key == nil || len(got[1].Key) != 0 || got[2].Value != nil || got[2].Headers[0].Key != "" || got[2].Headers[0].Value != nil {
		t.Fatalf("records %+v", got)
	}
}
