package kafka_test

import (
	"bytes"
	"context"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaBatch is a valid uncompressed v2 batch of n records built with
// kmsg, with its length and CRC set.
func kafkaBatch(n int) kmsg.RecordBatch {
	b := kmsg.NewRecordBatch()
	b.Magic, b.ProducerID, b.ProducerEpoch, b.FirstSequence = 2, -1, -1, -1
	b.FirstTimestamp, b.MaxTimestamp = time.Now().UnixMilli(), time.Now().UnixMilli()
	var recs []byte
	for i := range n {
		r := kmsg.NewRecord()
		r.OffsetDelta = int32(i)
		r.Value = []byte("v")
		r.Length = int32(len(r.AppendTo(nil)) - 1) // the body after a 1-byte varint 0
		recs = r.AppendTo(recs)
	}
	b.Records, b.NumRecords, b.LastOffsetDelta = recs, int32(n), int32(n-1)
	return b
}

// encode sets b's length and CRC and encodes it.
func encode(b kmsg.RecordBatch) []byte {
	raw := b.AppendTo(nil)
	b.Length = int32(len(raw) - 12)
	raw = b.AppendTo(nil)
	b.CRC = int32(crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b.AppendTo(nil)
}

// TestProduceRefusesBadBatches: a wrong CRC, two batches, a v1 message
// set, a batch that does not parse, and a produce to an internal topic
// are each answered with Kafka's code for the partition, and nothing is
// stored.
func TestProduceRefusesBadBatches(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 60*time.Second)
	cl := newClient(t, s.Node.KafkaAddr())
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	good := encode(kafkaBatch(3))
	badCRC := append([]byte(nil), good...)
	badCRC[len(badCRC)-1] ^= 1
	v1 := append([]byte(nil), good...)
	v1[16] = 1 // magic
	truncated := good[:len(good)-3]
	for name, c := range map[string]struct {
		topic   string
		records []byte
		want    *kerr.Error
	}{
		"wrong CRC":      {"t", badCRC, kerr.CorruptMessage},
		"two batches":    {"t", append(append([]byte(nil), good...), good...), kerr.InvalidRecord},
		"magic 1":        {"t", v1, kerr.InvalidRecord},
		"truncated":      {"t", truncated, kerr.CorruptMessage},
		"internal topic": {"__consumer_offsets", good, kerr.InvalidTopicException},
	} {
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = c.topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = c.records
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(1))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); got != c.want {
			t.Errorf("%s: answered %v, want %v", name, got, c.want)
		}
	}
	offs, err := adm.ListEndOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := offs.Lookup("t", 0); o.Offset != 0 {
		t.Fatalf("end offset %d after refused batches", o.Offset)
	}
}

// TestEveryCodecRoundTrips: franz-go produces with each codec; the
// records come back the same over the Kafka door. The stored batches are
// compressed as sent (decision 67): a gRPC fetch sees the codec and the
// compressed records, and a Kafka fetch answers batches in the codec the
// producer used.
func TestEveryCodecRoundTrips(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 60*time.Second)
	addr := s.Node.KafkaAddr()
	adm := kadm.NewClient(newClient(t, addr))
	for name, codec := range map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()} {
		topic := "codec-" + name
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		prod := newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec))
		var recs []*kgo.Record
		for i := range 500 {
			recs = append(recs, kgo.StringRecord(name+" record "+string(rune('a'+i%26))))
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cons := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := 0
		for got < len(recs) {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("%s: %d of %d", name, got, len(recs))
			}
			fs.EachRecord(func(r *kgo.Record) {
				if string(r.Value) != string(recs[got].Value) || r.Offset != int64(got) {
					t.Fatalf("%s: record %d = %q at %d", name, got, r.Value, r.Offset)
				}
				got++
			})
		}
		want := map[string]int8{"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[name]
		// gRPC: the batch as stored.
		pd := s.Fetch(topic, 0, 0, 0)
		if len(pd.Batches) == 0 {
			t.Fatalf("%s: gRPC fetch: no batch", name)
		}
		for _, b := range pd.Batches {
			if int8(b.Attributes&7) != want || (want != 0) != (len(b.CompressedRecords) > 0) || (want != 0) == (len(b.Records) > 0) {
				t.Fatalf("%s: gRPC fetch: attributes %x, %d records, %d compressed bytes", name, b.Attributes, len(b.Records), len(b.CompressedRecords))
			}
		}
		// Kafka: a Fetch answers the batches in their codec.
		for _, h := range kafkaFetchBatches(t, ctx, prod, topic) {
			if int8(h.Attributes&7) != want {
				t.Fatalf("%s: Kafka fetch answered a batch with attributes %x", name, h.Attributes)
			}
		}
	}
}

// kafkaFetchBatches fetches partition 0 of topic from offset 0 with a
// bare Fetch request and returns its batches' headers.
func kafkaFetchBatches(t *testing.T, ctx context.Context, cl *kgo.Client, topic string) []kmsg.RecordBatch {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxWaitMillis, req.MaxBytes = 12, 100, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 1<<20, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	pr := resp.Topics[0].Partitions[0]
	if pr.ErrorCode != 0 {
		t.Fatalf("fetch %s: %v", topic, kerr.ErrorForCode(pr.ErrorCode))
	}
	var out []kmsg.RecordBatch
	for b := pr.RecordBatches; len(b) > 0; {
		var h kmsg.RecordBatch
		if err := h.ReadFrom(b); err != nil {
			t.Fatalf("fetch %s: %v", topic, err)
		}
		if crc := int32(crc32.Checksum(b[21:12+h.Length], crc32.MakeTable(crc32.Castagnoli))); crc != h.CRC {
			t.Fatalf("fetch %s: batch CRC %08x, computed %08x", topic, h.CRC, crc)
		}
		out = append(out, h)
		b = b[12+h.Length:]
	}
	if len(out) == 0 {
		t.Fatalf("fetch %s: no batch", topic)
	}
	return out
}

// TestSmallZstdBatchOfLargeRecords: Kafka applies max.message.bytes to
// the compressed batch (franz-go's TestConsumeMaxDecompressBatchBytes):
// 3 MiB of one value in a few KiB of zstd go into a topic of 1 MiB
// max.message.bytes and come back over both doors.
func TestSmallZstdBatchOfLargeRecords(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 60*time.Second)
	addr := s.Node.KafkaAddr()
	adm := kadm.NewClient(newClient(t, addr))
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kmsg.StringPtr("1048576")}, "big"); err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("z"), 3<<20)
	prod := newClient(t, addr, kgo.DefaultProduceTopic("big"), kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.ProducerBatchMaxBytes(4<<20))
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
		t.Fatalf("3 MiB in zstd under a 1 MiB max.message.bytes: %v", err)
	}
	cons := newClient(t, addr, kgo.ConsumeTopics("big"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(1<<20))
	for {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("the 3 MiB record was not consumed")
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
		if recs := fs.Records(); len(recs) > 0 {
			if !bytes.Equal(recs[0].Value, value) {
				t.Fatalf("consumed %d bytes", len(recs[0].Value))
			}
			break
		}
	}
	pd := s.Fetch("big", 0, 0, 0)
	if len(pd.Batches) != 1 || len(pd.Batches[0].CompressedRecords) > 8<<10 || pd.Batches[0].Attributes&7 != 4 {
		t.Fatalf("stored %d batches", len(pd.Batches))
	}
}

// TestCompressionTypeConverts: a topic with compression.type=lz4 stores
// what franz-go sends as zstd in lz4, and a Kafka consumer gets lz4.
func TestCompressionTypeConverts(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 60*time.Second)
	addr := s.Node.KafkaAddr()
	adm := kadm.NewClient(newClient(t, addr))
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"compression.type": kmsg.StringPtr("lz4")}, "conv"); err != nil {
		t.Fatal(err)
	}
	prod := newClient(t, addr, kgo.DefaultProduceTopic("conv"), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	if err := prod.ProduceSync(ctx, kgo.StringRecord("one"), kgo.StringRecord("two")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, h := range kafkaFetchBatches(t, ctx, prod, "conv") {
		if h.Attributes&7 != 3 || h.NumRecords != 2 {
			t.Fatalf("batch attributes %x, %d records: want lz4", h.Attributes, h.NumRecords)
		}
	}
	if pd := s.Fetch("conv", 0, 0, 0); len(pd.Batches) != 1 || pd.Batches[0].Attributes&7 != 3 {
		t.Fatalf("gRPC fetch: %v", pd.Batches)
	}
}
