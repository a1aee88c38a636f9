package kafka_test

import (
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
// records come back the same over the Kafka door.
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
	}
}
