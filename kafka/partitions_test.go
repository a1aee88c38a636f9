package kafka_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// TestFranzGoCreatePartitions: kadm adds partitions to a topic
// (validate-only first, which adds none); a producer writes to a new
// partition and the gRPC door reads it back. A count not above the
// current one, an unknown topic, an internal topic and a manual
// assignment get Kafka's codes.
func TestFranzGoCreatePartitions(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 60*time.Second)
	cl := newClient(t, s.Node.KafkaAddr())
	adm := kadm.NewClient(cl)
	const topic = "grow"
	if res, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	partitions := func() int {
		t.Helper()
		td, err := adm.ListTopics(ctx, topic)
		if err != nil || td[topic].Err != nil {
			t.Fatalf("list: %v %v", err, td[topic].Err)
		}
		return len(td[topic].Partitions)
	}

	rs, err := adm.ValidateCreatePartitions(ctx, 2, topic)
	if err != nil || rs.Error() != nil {
		t.Fatalf("validate: %v %v", err, rs.Error())
	}
	if n := partitions(); n != 1 {
		t.Fatalf("%d partitions after validate-only, want 1", n)
	}
	rs, err = adm.CreatePartitions(ctx, 2, topic)
	if err != nil || rs.Error() != nil {
		t.Fatalf("create partitions: %v %v", err, rs.Error())
	}
	if n := partitions(); n != 3 {
		t.Fatalf("%d partitions, want 3", n)
	}
	md, err := s.Admin.Metadata(ctx, &sluicev1.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics[0].Partitions) != 3 {
		t.Fatalf("gRPC Metadata: %v %v", md.GetTopics(), err)
	}

	// A producer writes to the new partition 2; both doors read it.
	prod := newClient(t, s.Node.KafkaAddr(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	r := &kgo.Record{Topic: topic, Partition: 2, Value: []byte("on the new partition")}
	if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatalf("produce to partition 2: %v", err)
	}
	if r.Partition != 2 || r.Offset != 0 {
		t.Fatalf("produced at %d/%d", r.Partition, r.Offset)
	}
	cons := newClient(t, s.Node.KafkaAddr(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {2: kgo.NewOffset().AtStart()}}))
	fs := cons.PollFetches(ctx)
	if err := fs.Err(); err != nil || fs.NumRecords() != 1 || string(fs.Records()[0].Value) != "on the new partition" {
		t.Fatalf("consume partition 2: %v, %d records", err, fs.NumRecords())
	}
	if pd := s.Fetch(topic, 2, 0, 0); len(pd.Batches) != 1 || string(pd.Batches[0].Records[0].Value) != "on the new partition" {
		t.Fatalf("gRPC fetch of partition 2: %v", pd)
	}

	for _, c := range []struct {
		name  string
		topic string
		set   int
		want  error
	}{
		{"the current count", topic, 3, kerr.InvalidPartitions},
		{"fewer", topic, 2, kerr.InvalidPartitions},
		{"an unknown topic", "nope", 4, kerr.UnknownTopicOrPartition},
		{"an internal topic", "__transaction_state", 60, kerr.InvalidRequest},
	} {
		rs, err := adm.UpdatePartitions(ctx, c.set, c.topic)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r, _ := rs.On(c.topic, nil); !errors.Is(r.Err, c.want) || r.ErrMessage == "" {
			t.Errorf("%s: %v (%s), want %v", c.name, r.Err, r.ErrMessage, c.want)
		}
	}
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, 4
	rt.Assignment = []kmsg.CreatePartitionsRequestTopicAssignment{{Replicas: []int32{1}}}
	req.Topics = append(req.Topics, rt)
	kr, err := cl.Request(ctx, req)
	if err != nil || kr.(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("a manual assignment: %+v %v, want INVALID_REQUEST", kr, err)
	}
	if n := partitions(); n != 3 {
		t.Errorf("%d partitions after the refusals, want 3", n)
	}
}

// TestFranzGoDescribeProducers: after an idempotent produce, kadm's
// DescribeProducers shows the producer on the partition its leader
// holds it, with its epoch and last sequence; a partition that does not
// exist is UNKNOWN_TOPIC_OR_PARTITION.
func TestFranzGoDescribeProducers(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 60*time.Second)
	cl := newClient(t, s.Node.KafkaAddr())
	adm := kadm.NewClient(cl)
	const topic = "prod"
	if res, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	prod := newClient(t, s.Node.KafkaAddr(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
	var recs []*kgo.Record
	for range 5 {
		recs = append(recs, &kgo.Record{Partition: 1, Value: []byte("v")})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pid, epoch := recs[0].ProducerID, recs[0].ProducerEpoch
	if pid <= 0 {
		t.Fatalf("producer id %d: not idempotent", pid)
	}

	dts, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	parts := dts[topic].Partitions
	if p := parts[0]; p.Err != nil || len(p.ActiveProducers) != 0 {
		t.Errorf("partition 0: %+v", p)
	}
	p := parts[1]
	if p.Err != nil || len(p.ActiveProducers) != 1 {
		t.Fatalf("partition 1: %+v", p)
	}
	dp := p.ActiveProducers[pid]
	if dp.ProducerID != pid || dp.ProducerEpoch != epoch || dp.LastSequence != 4 || dp.CurrentTxnStartOffset != -1 ||
		dp.CoordinatorEpoch != -1 || dp.LastTimestamp != recs[4].Timestamp.UnixMilli() {
		t.Errorf("producer %+v, want id %d epoch %d last sequence 4 at %d", dp, pid, epoch, recs[4].Timestamp.UnixMilli())
	}
	// kadm does not send a partition the metadata lacks: raw, to the
	// broker.
	req := kmsg.NewPtrDescribeProducersRequest()
	req.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: topic, Partitions: []int32{7}}}
	kr, err := cl.Broker(int(p.Leader)).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if rp := kr.(*kmsg.DescribeProducersResponse).Topics[0].Partitions[0]; rp.Partition != 7 || rp.ErrorCode != kerr.UnknownTopicOrPartition.Code || rp.ErrorMessage == nil {
		t.Errorf("partition 7: %+v", rp)
	}
}
