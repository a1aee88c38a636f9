package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/batch"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// testNode is a client of one node: a single node started by startNode,
// or a cluster node a test dials (node and dir unset).
type testNode struct {
	t    *testing.T
	dir  string
	node *node.Node
	conn *grpc.ClientConn
	// internal is a connection to the node's internal listener (a single
	// node's only; nil for a cluster node).
	internal *grpc.ClientConn
	log      sluicev1.LogClient
	admin    sluicev1.AdminClient
	stop     func() // graceful shutdown (nodetest.Single.Stop)
}

func startNode(t *testing.T, dir string) *testNode {
	t.Helper()
	return startNodeWith(t, dir, nil)
}

// startNodeWith starts a single node (nodetest.StartSingle) like
// startNode, with edit (if not nil) applied to its config.
func startNodeWith(t *testing.T, dir string, edit func(*node.Config)) *testNode {
	t.Helper()
	s := nodetest.StartSingle(t, dir, edit)
	return &testNode{t: t, dir: dir, node: s.Node, conn: s.Conn, internal: s.Internal, log: s.Log, admin: s.Admin, stop: s.Stop}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func (tn *testNode) createTopic(name string, partitions int32, configs map[string]string) {
	tn.t.Helper()
	resp, err := tn.admin.CreateTopics(ctx(tn.t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: name, NumPartitions: partitions, ReplicationFactor: 1, Configs: configs}}})
	if err != nil {
		tn.t.Fatal(err)
	}
	if c := resp.Topics[0].ErrorCode; c != sluicev1.ErrorCode_NONE {
		tn.t.Fatalf("create %s: %v %s", name, c, resp.Topics[0].ErrorMessage)
	}
}

// makeBatch builds a canonical batch of n records "prefix-i".
func makeBatch(prefix string, n int, ts int64) []byte { return nodetest.Batch(prefix, n, ts) }

// produceRaw sends batch bytes through the server view, exactly as given.
func (tn *testNode) produceRaw(topic string, partition int32, raw []byte) *sluicev1.PartitionProduceResponse {
	tn.t.Helper()
	req := &internalv1.ProduceRequestView{Acks: sluicev1.Acks_ACKS_ALL, Topics: []*internalv1.TopicProduceDataView{{Name: topic, Partitions: []*internalv1.PartitionProduceDataView{{Partition: partition, Batch: raw}}}}}
	resp := &sluicev1.ProduceResponse{}
	if err := tn.conn.Invoke(ctx(tn.t), "/sluice.v1.Log/Produce", req, resp); err != nil {
		tn.t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}

// producePublic sends a batch as a public sluice.v1.RecordBatch message,
// as a client generated from the .proto in any language would.
func (tn *testNode) producePublic(topic string, partition int32, raw []byte) *sluicev1.PartitionProduceResponse {
	tn.t.Helper()
	var rb sluicev1.RecordBatch
	if err := proto.Unmarshal(raw, &rb); err != nil {
		tn.t.Fatal(err)
	}
	resp, err := tn.log.Produce(ctx(tn.t), &sluicev1.ProduceRequest{Acks: sluicev1.Acks_ACKS_ALL, Topics: []*sluicev1.TopicProduceData{{Name: topic, Partitions: []*sluicev1.PartitionProduceData{{Partition: partition, Batch: &rb}}}}})
	if err != nil {
		tn.t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}

func (tn *testNode) fetch(topic string, partition int32, offset int64, maxWait time.Duration) *sluicev1.PartitionData {
	tn.t.Helper()
	resp, err := tn.log.Fetch(ctx(tn.t), &sluicev1.FetchRequest{
		MaxWaitMs: int32(maxWait / time.Millisecond),
		Topics:    []*sluicev1.FetchTopic{{Name: topic, Partitions: []*sluicev1.FetchPartition{{Partition: partition, FetchOffset: offset, CurrentLeaderEpoch: -1}}}},
	})
	if err != nil {
		tn.t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}

// values returns offset -> value for records at or above from.
func values(pd *sluicev1.PartitionData, from int64) []string { return nodetest.Values(pd, from) }

func TestProduceFetchRoundTrip(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("orders", 2, nil)
	r := tn.producePublic("orders", 0, makeBatch("a", 3, 1000))
	if r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 0 {
		t.Fatalf("first produce: %v", r)
	}
	r = tn.produceRaw("orders", 0, makeBatch("b", 2, 2000))
	if r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 3 {
		t.Fatalf("second produce: %v", r)
	}
	pd := tn.fetch("orders", 0, 0, 0)
	want := []string{"a-0", "a-1", "a-2", "b-0", "b-1"}
	if got := values(pd, 0); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("fetched %v, want %v", got, want)
	}
	if pd.HighWatermark != 5 || pd.NextFetchOffset != 5 || pd.LogStartOffset != 0 {
		t.Fatalf("hw %d next %d lso %d", pd.HighWatermark, pd.NextFetchOffset, pd.LogStartOffset)
	}
	for _, b := range pd.Batches {
		if b.Crc == 0 || b.ProducerId != -1 || b.RecordCount != uint32(len(b.Records)) {
			t.Fatalf("bad header in fetched batch: %+v", b)
		}
	}
	// A fetch from the middle of a batch returns that whole batch.
	pd = tn.fetch("orders", 0, 4, 0)
	if got := values(pd, 4); fmt.Sprint(got) != "[b-1]" || pd.Batches[0].BaseOffset != 3 {
		t.Fatalf("mid-batch fetch: %v (base %d)", got, pd.Batches[0].BaseOffset)
	}
	// Partition 1 is independent.
	if pd := tn.fetch("orders", 1, 0, 0); len(pd.Batches) != 0 || pd.HighWatermark != 0 {
		t.Fatalf("partition 1 not empty: %v", pd)
	}
}

func TestBadProduceStoresNothing(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("t", 1, map[string]string{"max.message.bytes": "2048"})
	if r := tn.produceRaw("t", 0, makeBatch("ok", 1, 1)); r.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatal(r)
	}
	good := makeBatch("x", 5, 10)
	crcBad := append([]byte(nil), good...)
	crcBad[len(crcBad)-1] ^= 0xff
	compressed := makeBatch("c", 2, 10)
	compressed[batch.CRCStart+1] |= 1 // attributes: gzip
	withPID := func() []byte {
		var b batch.Builder
		b.Reset(1)
		b.Add(1, nil, []byte("v"), nil)
		return b.Finish(batch.Producer{ID: 5000, Epoch: 40000, BaseSequence: 0}, 0)
	}()
	control := func() []byte {
		var b batch.Builder
		b.Reset(1)
		b.Add(1, nil, []byte("v"), nil)
		return b.Finish(batch.PlainProducer, batch.AttrControl)
	}()
	cases := []struct {
		name      string
		topic     string
		partition int32
		raw       []byte
		want      sluicev1.ErrorCode
	}{
		{"unknown topic", "nope", 0, good, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{"unknown partition", "t", 7, good, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{"negative partition", "t", -1, good, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{"over max.message.bytes", "t", 0, makeBatch("big", 200, 10), sluicev1.ErrorCode_MESSAGE_TOO_LARGE},
		{"crc mismatch", "t", 0, crcBad, sluicev1.ErrorCode_CORRUPT_RECORD},
		{"garbage", "t", 0, []byte{0xff, 0xff, 0xff, 0x01, 0x02}, sluicev1.ErrorCode_CORRUPT_RECORD},
		{"truncated", "t", 0, good[:len(good)-3], sluicev1.ErrorCode_CORRUPT_RECORD},
		{"empty batch", "t", 0, nil, sluicev1.ErrorCode_INVALID_RECORD},
		{"compressed", "t", 0, compressed, sluicev1.ErrorCode_CORRUPT_RECORD},
		{"producer epoch beyond int16", "t", 0, withPID, sluicev1.ErrorCode_INVALID_RECORD},
		{"control batch from a producer", "t", 0, control, sluicev1.ErrorCode_INVALID_RECORD},
	}
	part, err := tn.node.Replicas().Replica("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, size := part.LogEndOffset(), part.Size()
			r := tn.produceRaw(c.topic, c.partition, append([]byte(nil), c.raw...))
			if r.ErrorCode != c.want {
				t.Fatalf("got %v (%s), want %v", r.ErrorCode, r.ErrorMessage, c.want)
			}
			if r.ErrorMessage == "" || r.BaseOffset != -1 {
				t.Fatalf("error response lacks a message or has an offset: %v", r)
			}
			if part.LogEndOffset() != before || part.Size() != size {
				t.Fatalf("log changed: end %d->%d size %d->%d", before, part.LogEndOffset(), size, part.Size())
			}
		})
	}
	// A correctly CRC'd batch with a codec's bits but records in field
	// 12 is invalid; with an unknown codec, unsupported (decision 67:
	// a compressed batch carries compressed_records).
	for codec, want := range map[uint32]sluicev1.ErrorCode{1: sluicev1.ErrorCode_INVALID_RECORD, 6: sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE} {
		b := makeBatch("c", 2, 10)
		if codec == 6 {
			b, _ = batch.SetCodec(b, nil, kafkarecords.Zstd)
		}
		h, _ := batch.ParseHeader(b)
		h.CRC, h.Attributes = 0, h.Attributes&^batch.AttrCompressionMask|codec
		batch.PutHeader(b, h)
		if r := tn.produceRaw("t", 0, b); r.ErrorCode != want {
			t.Fatalf("codec %d: %v, want %v", codec, r, want)
		}
	}
	// The log still holds exactly the one good record.
	if got := values(tn.fetch("t", 0, 0, 0), 0); fmt.Sprint(got) != "[ok-0]" {
		t.Fatalf("log holds %v", got)
	}
}

func errorReason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.Reason
		}
	}
	return ""
}

func TestBadRequestValues(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("t", 1, nil)
	c := ctx(t)
	_, err := tn.log.Produce(c, &sluicev1.ProduceRequest{Acks: 42})
	if status.Code(err) != codes.InvalidArgument || errorReason(err) != "INVALID_REQUIRED_ACKS" {
		t.Fatalf("bad acks: %v (%s)", err, errorReason(err))
	}
	_, err = tn.log.Produce(c, &sluicev1.ProduceRequest{TimeoutMs: -5})
	if status.Code(err) != codes.InvalidArgument || errorReason(err) != "INVALID_REQUEST" {
		t.Fatalf("negative timeout: %v", err)
	}
	_, err = tn.log.Fetch(c, &sluicev1.FetchRequest{MaxWaitMs: -1})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative max wait: %v", err)
	}
	// One fetch each: a request lists a partition once (limits.go).
	want := []sluicev1.ErrorCode{sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE, sluicev1.ErrorCode_INVALID_FETCH_SIZE, sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH}
	for i, fp := range []*sluicev1.FetchPartition{
		{Partition: 0, FetchOffset: -3, CurrentLeaderEpoch: -1},
		{Partition: 0, FetchOffset: 1 << 40, CurrentLeaderEpoch: -1},
		{Partition: 0, FetchOffset: 0, PartitionMaxBytes: -1, CurrentLeaderEpoch: -1},
		{Partition: 0, FetchOffset: 0, CurrentLeaderEpoch: 9},
	} {
		resp, err := tn.log.Fetch(c, &sluicev1.FetchRequest{Topics: []*sluicev1.FetchTopic{{Name: "t", Partitions: []*sluicev1.FetchPartition{fp}}}})
		if err != nil {
			t.Fatal(err)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != want[i] {
			t.Errorf("fetch case %d: %v (%s), want %v", i, p.ErrorCode, p.ErrorMessage, want[i])
		}
	}
	for _, lp := range []*sluicev1.ListOffsetsPartition{{Partition: 0}, {Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, Timestamp: -7}} {
		lo, err := tn.log.ListOffsets(c, &sluicev1.ListOffsetsRequest{Topics: []*sluicev1.ListOffsetsTopic{{Name: "t", Partitions: []*sluicev1.ListOffsetsPartition{lp}}}})
		if err != nil {
			t.Fatal(err)
		}
		if p := lo.Topics[0].Partitions[0]; p.ErrorCode != sluicev1.ErrorCode_INVALID_REQUEST {
			t.Errorf("list offsets: %v", p)
		}
	}
}

func TestCreateTopicValidation(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("exists", 1, nil)
	cases := []struct {
		topic *sluicev1.CreatableTopic
		want  sluicev1.ErrorCode
	}{
		{&sluicev1.CreatableTopic{Name: "bad name", NumPartitions: 1, ReplicationFactor: 1}, sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION},
		{&sluicev1.CreatableTopic{Name: "", NumPartitions: 1, ReplicationFactor: 1}, sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION},
		{&sluicev1.CreatableTopic{Name: "..", NumPartitions: 1, ReplicationFactor: 1}, sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION},
		{&sluicev1.CreatableTopic{Name: "__internal", NumPartitions: 1, ReplicationFactor: 1}, sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION},
		{&sluicev1.CreatableTopic{Name: "p0", NumPartitions: 0, ReplicationFactor: 1}, sluicev1.ErrorCode_INVALID_PARTITIONS},
		{&sluicev1.CreatableTopic{Name: "pbig", NumPartitions: 1000000, ReplicationFactor: 1}, sluicev1.ErrorCode_INVALID_PARTITIONS},
		{&sluicev1.CreatableTopic{Name: "rf-2", NumPartitions: 1, ReplicationFactor: -2}, sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR}, // 0 and -1: the default
		{&sluicev1.CreatableTopic{Name: "rf3", NumPartitions: 1, ReplicationFactor: 3}, sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR},
		{&sluicev1.CreatableTopic{Name: "cfg", NumPartitions: 1, ReplicationFactor: 1, Configs: map[string]string{"no.such.config": "1"}}, sluicev1.ErrorCode_INVALID_CONFIG},
		{&sluicev1.CreatableTopic{Name: "cfg2", NumPartitions: 1, ReplicationFactor: 1, Configs: map[string]string{"retention.ms": "soon"}}, sluicev1.ErrorCode_INVALID_CONFIG},
		{&sluicev1.CreatableTopic{Name: "exists", NumPartitions: 1, ReplicationFactor: 1}, sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS},
	}
	for _, c := range cases {
		resp, err := tn.admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{c.topic}})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Topics[0]; got.ErrorCode != c.want || got.ErrorMessage == "" {
			t.Errorf("%q: got %v %q, want %v", c.topic.Name, got.ErrorCode, got.ErrorMessage, c.want)
		}
	}
	// A name longer than any topic's refuses the request (limits.go).
	_, err := tn.admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: string(make([]byte, 250)), NumPartitions: 1, ReplicationFactor: 1}}})
	if status.Code(err) != codes.InvalidArgument || errorReason(err) != "INVALID_REQUEST" {
		t.Errorf("250-byte name: %v, want InvalidArgument INVALID_REQUEST", err)
	}
	md, err := tn.admin.Metadata(ctx(t), &sluicev1.MetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Name != "exists" {
		t.Fatalf("failed creations left topics behind: %v", md.Topics)
	}
	// validate_only creates nothing.
	resp, err := tn.admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{ValidateOnly: true, Topics: []*sluicev1.CreatableTopic{{Name: "dry", NumPartitions: 3, ReplicationFactor: 1}}})
	if err != nil || resp.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("validate only: %v %v", err, resp)
	}
	md, _ = tn.admin.Metadata(ctx(t), &sluicev1.MetadataRequest{Topics: []string{"dry"}})
	if md.Topics[0].ErrorCode != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
		t.Fatalf("validate_only created the topic: %v", md.Topics[0])
	}
}

func TestMetadataAndDelete(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("a", 3, map[string]string{"retention.ms": "1000"})
	md, err := tn.admin.Metadata(ctx(t), &sluicev1.MetadataRequest{Topics: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].Address != tn.node.Addr() || md.ClusterId == "" {
		t.Fatalf("brokers: %v cluster %q", md.Brokers, md.ClusterId)
	}
	tm := md.Topics[0]
	if len(tm.Partitions) != 3 || tm.Partitions[2].LeaderId != 1 || tm.Configs["retention.ms"] != "1000" || tm.Configs["segment.bytes"] == "" {
		t.Fatalf("topic metadata: %v", tm)
	}
	tn.produceRaw("a", 1, makeBatch("v", 2, 1))
	del, err := tn.admin.DeleteTopics(ctx(t), &sluicev1.DeleteTopicsRequest{Names: []string{"a", "ghost"}})
	if err != nil {
		t.Fatal(err)
	}
	if del.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE || del.Topics[1].ErrorCode != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
		t.Fatalf("delete: %v", del.Topics)
	}
	if r := tn.produceRaw("a", 1, makeBatch("v", 1, 1)); r.ErrorCode != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
		t.Fatalf("produce after delete: %v", r)
	}
	// Re-creating the name starts from an empty log.
	tn.createTopic("a", 3, nil)
	if pd := tn.fetch("a", 1, 0, 0); len(pd.Batches) != 0 || pd.HighWatermark != 0 {
		t.Fatalf("re-created topic has old data: %v", pd)
	}
}

func TestFetchLongPollWakesOnAppend(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("t", 1, nil)
	done := make(chan *sluicev1.PartitionData, 1)
	go func() {
		resp, err := tn.log.Fetch(context.Background(), &sluicev1.FetchRequest{MaxWaitMs: 20000, Topics: []*sluicev1.FetchTopic{{Name: "t", Partitions: []*sluicev1.FetchPartition{{Partition: 0, FetchOffset: 0, CurrentLeaderEpoch: -1}}}}})
		if err != nil {
			done <- nil
			return
		}
		done <- resp.Topics[0].Partitions[0]
	}()
	// The fetch is parked; an append must complete it with the data.
	select {
	case pd := <-done:
		t.Fatalf("fetch returned before any append: %v", pd)
	case <-time.After(200 * time.Millisecond):
	}
	tn.produceRaw("t", 0, makeBatch("late", 1, 1))
	select {
	case pd := <-done:
		if pd == nil || fmt.Sprint(values(pd, 0)) != "[late-0]" {
			t.Fatalf("long poll returned %v", pd)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("long-polled fetch was not woken by the append")
	}
	// With no data it answers empty once max_wait passes.
	if pd := tn.fetch("t", 0, 1, 50*time.Millisecond); len(pd.Batches) != 0 || pd.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("empty long poll: %v", pd)
	}
}

func TestListOffsets(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("t", 1, nil)
	tn.produceRaw("t", 0, makeBatch("a", 3, 1000)) // offsets 0-2, ts 1000-1002
	tn.produceRaw("t", 0, makeBatch("b", 3, 5000)) // offsets 3-5, ts 5000-5002
	cases := []struct {
		spec   sluicev1.OffsetSpec
		ts     int64
		offset int64
	}{
		{sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST, 0, 0},
		{sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0, 6},
		{sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, 0, 0},
		{sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, 1001, 1},
		{sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, 1003, 3},
		{sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, 5002, 5},
		{sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, 9999, -1},
		{sluicev1.OffsetSpec_OFFSET_SPEC_MAX_TIMESTAMP, 0, 5},
	}
	for _, c := range cases {
		resp, err := tn.log.ListOffsets(ctx(t), &sluicev1.ListOffsetsRequest{Topics: []*sluicev1.ListOffsetsTopic{{Name: "t", Partitions: []*sluicev1.ListOffsetsPartition{{Partition: 0, Spec: c.spec, Timestamp: c.ts}}}}})
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != sluicev1.ErrorCode_NONE || p.Offset != c.offset {
			t.Errorf("%v ts %d: offset %d (%v), want %d", c.spec, c.ts, p.Offset, p.ErrorCode, c.offset)
		}
	}
}

func TestHealthAndReflection(t *testing.T) {
	tn := startNode(t, t.TempDir())
	hc, err := healthpb.NewHealthClient(tn.conn).Check(ctx(t), &healthpb.HealthCheckRequest{})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hc, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(tn.conn).ServerReflectionInfo(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		found[s.Name] = true
	}
	for _, want := range []string{"sluice.v1.Log", "sluice.v1.Admin", "grpc.health.v1.Health"} {
		if !found[want] {
			t.Errorf("reflection does not list %s (got %v)", want, found)
		}
	}
	// The public descriptor of the hand-registered Log service resolves.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "sluice.v1.Log"}}); err != nil {
		t.Fatal(err)
	}
	fr, err := stream.Recv()
	if err != nil || len(fr.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("file containing sluice.v1.Log: %v %v", fr, err)
	}
	stream.CloseSend()
	for {
		if _, err := stream.Recv(); err != nil {
			if !errors.Is(err, io.EOF) && status.Code(err) != codes.Canceled {
				t.Logf("reflection stream ended: %v", err)
			}
			break
		}
	}
}

func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	tn := startNode(t, dir)
	tn.createTopic("t", 2, nil)
	for i := 0; i < 10; i++ {
		tn.produceRaw("t", int32(i%2), makeBatch(fmt.Sprintf("r%d", i), 2, int64(i)))
	}
	tn.stop()
	tn2 := startNode(t, dir)
	pd := tn2.fetch("t", 1, 0, 0)
	if got := values(pd, 0); len(got) != 10 || got[0] != "r1-0" || got[9] != "r9-1" {
		t.Fatalf("after restart: %v (%v %s hw %d)", got, pd.ErrorCode, pd.ErrorMessage, pd.HighWatermark)
	}
	if r := tn2.produceRaw("t", 1, makeBatch("z", 1, 1)); r.BaseOffset != 10 {
		t.Fatalf("append after restart at %d, want 10", r.BaseOffset)
	}
}
