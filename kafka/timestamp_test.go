package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// message.timestamp.type=LogAppendTime through the Kafka door, with
// franz-go: the produce answer carries the broker's append time (franz-go
// sets it as the record's timestamp), and a consumer reads every record
// with that timestamp and the log-append-time type, whatever timestamp
// the producer gave; a CreateTime topic keeps the producer's.
func TestKafkaLogAppendTime(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 60*time.Second)
	addr := s.Node.KafkaAddr()
	adm := kadm.NewClient(newClient(t, addr))
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")}, "lat"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "ct"); err != nil {
		t.Fatal(err)
	}
	old := time.UnixMilli(1_000_000)
	cl := newClient(t, addr)
	before := time.Now().Add(-time.Second)
	for _, topic := range []string{"lat", "ct"} {
		for i := range 3 {
			r := &kgo.Record{Topic: topic, Value: []byte{byte('a' + i)}, Timestamp: old}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The produce answer's log_append_time (franz-go does not read it):
	// the append time for lat, -1 for ct.
	for topic, stamped := range map[string]bool{"lat": true, "ct": false} {
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rt.Partitions = []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: bigBatch(1, 10)}}
		req.Topics = []kmsg.ProduceRequestTopic{rt}
		resp, err := req.RequestWith(ctx, cl.Broker(1))
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		at := time.UnixMilli(p.LogAppendTime)
		if p.ErrorCode != 0 || stamped != (p.LogAppendTime >= 0) || stamped && (at.Before(before) || at.After(time.Now().Add(time.Second))) {
			t.Errorf("produce to %s: error %d, log append time %d", topic, p.ErrorCode, p.LogAppendTime)
		}
	}
	after := time.Now().Add(time.Second)
	cons := newClient(t, addr, kgo.ConsumeTopics("lat", "ct"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]int{}
	for got["lat"]+got["ct"] < 8 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Topic]++
			switch r.Topic {
			case "lat":
				if r.Attrs.TimestampType() != 1 || r.Timestamp.Before(before) || r.Timestamp.After(after) {
					t.Errorf("lat record %d: timestamp %v, type %d; want the append time, type 1", r.Offset, r.Timestamp, r.Attrs.TimestampType())
				}
			case "ct":
				if r.Attrs.TimestampType() != 0 || r.Offset < 3 && !r.Timestamp.Equal(old) {
					t.Errorf("ct record %d: timestamp %v, type %d; want the producer's %v, type 0", r.Offset, r.Timestamp, r.Attrs.TimestampType(), old)
				}
			}
		})
	}
}
