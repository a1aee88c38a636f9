package kafka_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// bigBatch is a v2 batch of n records of size bytes each.
func bigBatch(n, size int) []byte {
	b := kafkaBatch(n)
	var recs []byte
	for i := range n {
		r := kmsg.NewRecord()
		r.OffsetDelta = int32(i)
		r.Value = bytes.Repeat([]byte{'x'}, size)
		r.Length = int32(len(r.AppendTo(nil)) - 1) // the body after a 1-byte varint 0
		recs = r.AppendTo(recs)
	}
	b.Records = recs
	return encode(b)
}

// TestKafkaDoorQuotas: a client id over its producer_byte_rate is
// throttled through the Kafka door — the answer carries
// throttle_time_ms and is held — as on the gRPC door (one rule, one debt
// per caller); another client id is not; a fetch over consumer_byte_rate
// is throttled too.
func TestKafkaDoorQuotas(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 60*time.Second)
	addr := s.Node.KafkaAddr()
	if _, err := kadm.NewClient(newClient(t, addr)).CreateTopic(ctx, 1, 1, nil, "q"); err != nil {
		t.Fatal(err)
	}
	res, err := s.Admin.AlterClientQuotas(ctx, &sluicev1.AlterClientQuotasRequest{Entries: []*sluicev1.ClientQuotaAlteration{{
		Entity: &sluicev1.QuotaEntity{ClientId: &sluicev1.QuotaEntityName{Name: "kflood"}},
		Ops:    []*sluicev1.QuotaOp{{Key: "producer_byte_rate", Value: 64 * 1024}, {Key: "consumer_byte_rate", Value: 64 * 1024}},
	}}})
	if err != nil || res.Results[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("AlterClientQuotas: %v %v", res, err)
	}
	batch := bigBatch(128, 1000) // 128 KB: twice the quota's one-second credit
	// Three requests back to back, ignoring throttle_time_ms: the first
	// answer says how long, and the connection is not read for that long,
	// so the three take at least the first throttle.
	produce := func(clientID string) (first int32, took time.Duration) {
		cl := newClient(t, addr, kgo.ClientID(clientID))
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "q"
		rt.Partitions = []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: batch}}
		req.Topics = []kmsg.ProduceRequestTopic{rt}
		start := time.Now()
		for i := range 3 {
			resp, err := req.RequestWith(ctx, cl.Broker(1))
			if err != nil {
				t.Fatal(err)
			}
			if c := resp.Topics[0].Partitions[0].ErrorCode; c != 0 {
				t.Fatalf("%s: produce error %d", clientID, c)
			}
			if i == 0 {
				first = resp.ThrottleMillis
			}
		}
		return first, time.Since(start)
	}
	if th, _ := produce("kquiet"); th != 0 {
		t.Fatalf("a client id without a quota was throttled %d ms", th)
	}
	th, took := produce("kflood")
	if th <= 0 {
		t.Fatal("a client id over its producer_byte_rate was not throttled")
	}
	if took < time.Duration(th)*time.Millisecond {
		t.Fatalf("throttled %d ms but the next requests were answered within %v: not muted", th, took)
	}

	cons := newClient(t, addr, kgo.ClientID("kflood"))
	freq := kmsg.NewPtrFetchRequest()
	freq.Version, freq.MaxBytes = 11, 50<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "q"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 100 << 10 // one 128 KB batch: twice the credit
	ft.Partitions = []kmsg.FetchRequestTopicPartition{fp}
	freq.Topics = []kmsg.FetchRequestTopic{ft}
	fresp, err := freq.RequestWith(ctx, cons.Broker(1))
	if err != nil {
		t.Fatal(err)
	}
	if fresp.ThrottleMillis <= 0 {
		t.Fatal("a fetch over consumer_byte_rate was not throttled")
	}
}

// The request quota (request_percentage) charges the requests the door
// answers from memory, as the gRPC door charges the same ones: a client
// id with a tiny request quota flooding Metadata gets throttle_time_ms
// and its connection is muted for that long; another client id is not
// throttled.
func TestKafkaDoorRequestQuota(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 60*time.Second)
	addr := s.Node.KafkaAddr()
	res, err := s.Admin.AlterClientQuotas(ctx, &sluicev1.AlterClientQuotasRequest{Entries: []*sluicev1.ClientQuotaAlteration{{
		Entity: &sluicev1.QuotaEntity{ClientId: &sluicev1.QuotaEntityName{Name: "kmeta"}},
		Ops:    []*sluicev1.QuotaOp{{Key: "request_percentage", Value: 0.01}}, // 100 µs of handling per second
	}}})
	if err != nil || res.Results[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("AlterClientQuotas: %v %v", res, err)
	}
	flood := func(clientID string, n int) (throttled int32, took time.Duration) {
		cl := newClient(t, addr, kgo.ClientID(clientID))
		req := kmsg.NewPtrMetadataRequest() // every topic
		start := time.Now()
		for range n {
			resp, err := req.RequestWith(ctx, cl.Broker(1))
			if err != nil {
				t.Fatal(err)
			}
			if resp.ThrottleMillis > 0 {
				return resp.ThrottleMillis, time.Since(start)
			}
		}
		return 0, time.Since(start)
	}
	if th, _ := flood("kquiet", 200); th != 0 {
		t.Fatalf("a client id without a quota was throttled %d ms", th)
	}
	th, _ := flood("kmeta", 2000)
	if th <= 0 {
		t.Fatal("2,000 Metadata requests of a client id with request_percentage 0.01 were not throttled")
	}
	// The connection is muted: the next request is answered after the
	// throttle (franz-go also waits it out itself, KIP-219).
	cl := newClient(t, addr, kgo.ClientID("kmeta"))
	start := time.Now()
	for range 2 {
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl.Broker(1)); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < time.Duration(th)*time.Millisecond/2 {
		t.Errorf("throttled %d ms, yet two more requests were answered in %v", th, took)
	}
}
