package cluster

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Compressed batches on append (decision 67): the records are checked
// here, once, whichever door the batch came through; compacted topics'
// key rule and compression.type apply to them too.

// compressedBatch is a producer's batch of values (key "k"+i, or none
// when keyless) compressed with codec.
func compressedBatch(t *testing.T, codec kafkarecords.Codec, keyless bool, values ...[]byte) []byte {
	t.Helper()
	var b batch.Builder
	b.Reset(1000)
	for i, v := range values {
		var key []byte
		if !keyless {
			key = []byte{'k', byte('0' + i)}
		}
		b.Add(1000+int64(i), key, v, nil)
	}
	out, err := batch.SetCodec(b.Finish(batch.PlainProducer, 0), nil, codec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// storedBatches reads every batch of p's log.
func storedBatches(t *testing.T, p *Replica) [][]byte {
	t.Helper()
	res, err := p.log.Read(0, 64<<20, p.log.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	return res.Batches
}

// newCompressionTopics starts a manager with one-partition topics whose
// configs are given.
func newCompressionTopics(t *testing.T, configs map[string]map[string]string) *ReplicaManager {
	t.Helper()
	m := newManager(t, t.TempDir(), 1)
	b := newImage(t, "c1")
	for name, cfg := range configs {
		b.apply(createTopic(name, "id-"+name, []int32{1}))
		for k, v := range cfg {
			b.apply(controller.ConfigChange{Topic: name, Key: k, Value: v})
		}
	}
	applyImage(t, m, b.snapshot(), time.Unix(5000, 0))
	return m
}

// A compressed batch is stored as sent, its max_timestamp computed; one
// whose records break a rule is refused with its code and nothing is
// stored.
func TestAppendChecksCompressedBatches(t *testing.T) {
	now := time.Unix(5000, 0)
	m := newCompressionTopics(t, map[string]map[string]string{"c": nil})
	good := compressedBatch(t, kafkarecords.Zstd, false, []byte("a"), []byte("b"), []byte("c"))
	comp, _ := batch.CompressedRecords(good)
	sent := bytes.Clone(good)
	batch.SetMaxTimestamp(sent, 0) // a client need not fill it
	res, err := m.Append("c", 0, sent, now)
	if err != nil || res.BaseOffset != 0 || res.LastOffset != 2 || res.MaxTimestamp != 1002 {
		t.Fatalf("append: %+v, %v", res, err)
	}
	p, _ := m.Replica("c", 0)
	stored := storedBatches(t, p)
	h, err := batch.Verify(stored[0])
	if got, _ := batch.CompressedRecords(stored[0]); err != nil || h.Codec() != kafkarecords.Zstd || h.MaxTimestamp != 1002 || !bytes.Equal(got, comp) {
		t.Fatalf("stored %+v, %v: not the compressed bytes as sent", h, err)
	}

	badCount := bytes.Clone(good)
	bh, _ := batch.ParseHeader(badCount)
	bh.RecordCount, bh.LastOffsetDelta, bh.CRC = 4, 3, 0
	batch.PutHeader(badCount, bh)
	garbage := compressedBatch(t, kafkarecords.Gzip, false, []byte("x"))
	garbage[len(garbage)-3] ^= 0xff // inside the gzip trailer
	batch.PutHeader(garbage, func() batch.Header { h, _ := batch.ParseHeader(garbage); h.CRC = 0; return h }())
	// 65 MiB of zeros in a few KiB of zstd.
	zeros, err := kafkarecords.Compress(nil, make([]byte, kafkarecords.MaxUncompressedBytes+1<<20), kafkarecords.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	bomb := make([]byte, batch.HeaderSize)
	batch.PutHeader(bomb, batch.Header{Attributes: uint32(kafkarecords.Zstd), BaseTimestamp: 1000, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, RecordCount: 1})
	bomb = batch.AppendCompressedRecords(bomb, zeros)
	for name, c := range map[string]struct {
		in       []byte
		code     sluicev1.ErrorCode
		sentinel error
	}{
		"record_count wrong":      {badCount, sluicev1.ErrorCode_INVALID_RECORD, kafkarecords.ErrRecordCount},
		"does not decompress":     {garbage, sluicev1.ErrorCode_CORRUPT_RECORD, kafkarecords.ErrDecompress},
		"decompresses past 64MiB": {bomb, sluicev1.ErrorCode_MESSAGE_TOO_LARGE, kafkarecords.ErrDecompressedTooLarge},
	} {
		_, err := m.Append("c", 0, c.in, now)
		wantCode(t, name, err, c.code)
		if !errors.Is(err, c.sentinel) {
			t.Errorf("%s: %v, want %v", name, err, c.sentinel)
		}
	}
	if end := p.LogEndOffset(); end != 3 {
		t.Fatalf("refused batches were stored: log end %d", end)
	}
}

// max.message.bytes bounds the stored, compressed size, as Kafka's: a
// few KiB of zstd holding a 3 MiB record go into a topic of 1 MiB
// max.message.bytes; converted to uncompressed (compression.type) the
// same batch is too large.
func TestMaxMessageBytesIsTheCompressedSize(t *testing.T) {
	now := time.Unix(5000, 0)
	m := newCompressionTopics(t, map[string]map[string]string{
		"kept":  {"max.message.bytes": "1048576"},
		"plain": {"max.message.bytes": "1048576", "compression.type": "uncompressed"},
	})
	big := compressedBatch(t, kafkarecords.Zstd, false, bytes.Repeat([]byte("x"), 3<<20))
	if len(big) > 4<<10 {
		t.Fatalf("batch of %d bytes", len(big))
	}
	if _, err := m.Append("kept", 0, bytes.Clone(big), now); err != nil {
		t.Fatalf("3 MiB in %d bytes of zstd under a 1 MiB max.message.bytes: %v", len(big), err)
	}
	p, _ := m.Replica("kept", 0)
	var got []byte
	if err := batch.ForEachRecord(storedBatches(t, p)[0], func(r batch.Record) error { got = r.Value; return nil }); err != nil || len(got) != 3<<20 {
		t.Fatalf("read back %d bytes: %v", len(got), err)
	}
	_, err := m.Append("plain", 0, bytes.Clone(big), now)
	wantCode(t, "converted past max.message.bytes", err, sluicev1.ErrorCode_MESSAGE_TOO_LARGE)
}

// A compacted topic takes only keyed records, compressed or not.
func TestCompactedTopicChecksCompressedKeys(t *testing.T) {
	now := time.Unix(5000, 0)
	m := newCompressionTopics(t, map[string]map[string]string{"k": {"cleanup.policy": "compact"}})
	for _, codec := range []kafkarecords.Codec{kafkarecords.None, kafkarecords.LZ4} {
		if _, err := m.Append("k", 0, compressedBatch(t, codec, false, []byte("v")), now); err != nil {
			t.Fatalf("%v keyed: %v", codec, err)
		}
		_, err := m.Append("k", 0, compressedBatch(t, codec, true, []byte("v")), now)
		wantCode(t, codec.String()+" keyless", err, sluicev1.ErrorCode_INVALID_RECORD)
	}
	if p, _ := m.Replica("k", 0); p.LogEndOffset() != 2 {
		t.Fatalf("log end %d, want the two keyed batches", p.LogEndOffset())
	}
}

// compression.type other than producer converts every produced batch to
// its codec on append (Kafka's broker recompresses); producer keeps
// each batch's own.
func TestCompressionTypeConvertsOnAppend(t *testing.T) {
	now := time.Unix(5000, 0)
	m := newCompressionTopics(t, map[string]map[string]string{
		"producer": nil,
		"lz4":      {"compression.type": "lz4"},
		"plain":    {"compression.type": "uncompressed"},
	})
	values := [][]byte{[]byte("one"), bytes.Repeat([]byte("two"), 100), nil}
	inputs := map[string][]byte{}
	for _, codec := range []kafkarecords.Codec{kafkarecords.None, kafkarecords.Gzip, kafkarecords.Zstd, kafkarecords.LZ4} {
		inputs[codec.String()] = compressedBatch(t, codec, false, values...)
	}
	for topic, want := range map[string]func(sent kafkarecords.Codec) kafkarecords.Codec{
		"producer": func(sent kafkarecords.Codec) kafkarecords.Codec { return sent },
		"lz4":      func(kafkarecords.Codec) kafkarecords.Codec { return kafkarecords.LZ4 },
		"plain":    func(kafkarecords.Codec) kafkarecords.Codec { return kafkarecords.None },
	} {
		p, _ := m.Replica(topic, 0)
		for name, in := range inputs {
			sent, _ := kafkarecords.ParseCodec(name)
			off := p.LogEndOffset()
			if _, err := m.Append(topic, 0, bytes.Clone(in), now); err != nil {
				t.Fatalf("%s <- %s: %v", topic, name, err)
			}
			res, err := p.log.Read(off, 1<<20, p.log.EndOffset())
			if err != nil {
				t.Fatal(err)
			}
			h, err := batch.Verify(res.Batches[0])
			if err != nil || h.Codec() != want(sent) || h.MaxTimestamp != 1002 || h.RecordCount != 3 {
				t.Fatalf("%s <- %s: stored %+v (%v), want codec %v", topic, name, h, err, want(sent))
			}
			i := 0
			err = batch.ForEachRecord(res.Batches[0], func(r batch.Record) error {
				if r.Offset != off+int64(i) || !bytes.Equal(r.Value, values[i]) {
					t.Errorf("%s <- %s: record %d = %+v", topic, name, i, r)
				}
				i++
				return nil
			})
			if err != nil || i != 3 {
				t.Fatalf("%s <- %s: %d records, %v", topic, name, i, err)
			}
		}
	}
}

// message.timestamp.type=LogAppendTime: the leader stamps each produced
// batch, compressed or not, with its clock at the append (the
// timestamp-type attribute, the max timestamp, a valid CRC), every
// record reads that timestamp, and the append answers it (the produce
// answer's log_append_time); a CreateTime topic keeps the producer's
// timestamps and answers -1. A change of the config applies to the next
// append.
func TestLogAppendTimeStampsBatches(t *testing.T) {
	now := time.Unix(5000, 0)
	m := newCompressionTopics(t, map[string]map[string]string{
		"create": nil,
		"append": {"message.timestamp.type": "LogAppendTime"},
	})
	for _, codec := range []kafkarecords.Codec{kafkarecords.None, kafkarecords.Zstd} {
		for topic, wantTS := range map[string]int64{"create": -1, "append": now.UnixMilli()} {
			p, _ := m.Replica(topic, 0)
			off := p.LogEndOffset()
			res, err := m.Append(topic, 0, compressedBatch(t, codec, false, []byte("a"), []byte("b")), now)
			if err != nil {
				t.Fatalf("%s (%s): %v", topic, codec, err)
			}
			if res.LogAppendTime != wantTS {
				t.Errorf("%s (%s): log append time %d, want %d", topic, codec, res.LogAppendTime, wantTS)
			}
			read, err := p.log.Read(off, 1<<20, p.log.EndOffset())
			if err != nil {
				t.Fatal(err)
			}
			h, err := batch.Verify(read.Batches[0])
			if err != nil {
				t.Fatalf("%s (%s): stored batch: %v", topic, codec, err)
			}
			stamped := h.Attributes&batch.AttrLogAppendTime != 0
			if stamped != (wantTS >= 0) || (stamped && h.MaxTimestamp != wantTS) {
				t.Errorf("%s (%s): attributes %#x, max timestamp %d", topic, codec, h.Attributes, h.MaxTimestamp)
			}
			err = batch.ForEachRecord(read.Batches[0], func(r batch.Record) error {
				if stamped && r.Timestamp != wantTS || !stamped && r.Timestamp == now.UnixMilli() {
					t.Errorf("%s (%s): record %d has timestamp %d", topic, codec, r.Offset, r.Timestamp)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}
