package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// publicRequest is a produce request of one public RecordBatch, as a
// client generated from the .proto in any language builds it.
func publicRequest(t *testing.T, acks sluicev1.Acks, topic string, partition int32, prefix string, n int) *sluicev1.ProduceRequest {
	t.Helper()
	var rb sluicev1.RecordBatch
	if err := proto.Unmarshal(makeBatch(prefix, n, 1000), &rb); err != nil {
		t.Fatal(err)
	}
	return &sluicev1.ProduceRequest{Acks: acks, TimeoutMs: 20_000, Topics: []*sluicev1.TopicProduceData{{Name: topic,
		Partitions: []*sluicev1.PartitionProduceData{{Partition: partition, Batch: &rb}}}}}
}

// ProduceStream answers each request once, by correlation id, with
// Produce's rules: offsets in arrival order, partition errors per
// partition, a request refused as a whole answered with its code while the
// stream goes on; the stream ends cleanly after the client's end.
func TestProduceStream(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("s", 2, nil)
	st, err := tn.log.ProduceStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	bad := publicRequest(t, sluicev1.Acks_ACKS_ALL, "s", 0, "bad", 1)
	bad.Acks = 9
	reqs := map[int64]*sluicev1.ProduceRequest{
		10: publicRequest(t, sluicev1.Acks_ACKS_ALL, "s", 0, "a", 3),
		11: publicRequest(t, sluicev1.Acks_ACKS_LEADER, "s", 1, "b", 2),
		12: bad,
		13: publicRequest(t, sluicev1.Acks_ACKS_ALL, "s", 0, "c", 4),
		14: publicRequest(t, sluicev1.Acks_ACKS_ALL, "nope", 0, "d", 1),
		15: publicRequest(t, sluicev1.Acks_ACKS_NONE, "s", 1, "e", 1),
	}
	for _, id := range []int64{10, 11, 12, 13, 14, 15} {
		if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: id, Request: reqs[id]}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[int64]*sluicev1.ProduceStreamResponse{}
	for len(got) < len(reqs) {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d answers: %v", len(got), err)
		}
		if got[r.CorrelationId] != nil || reqs[r.CorrelationId] == nil {
			t.Fatalf("answer for correlation id %d: duplicate or unknown", r.CorrelationId)
		}
		got[r.CorrelationId] = r
	}
	part := func(id int64) *sluicev1.PartitionProduceResponse {
		t.Helper()
		r := got[id]
		if r.ErrorCode != sluicev1.ErrorCode_NONE || len(r.GetResponse().GetTopics()) != 1 {
			t.Fatalf("request %d: %v", id, r)
		}
		return r.Response.Topics[0].Partitions[0]
	}
	for id, want := range map[int64]int64{10: 0, 11: 0, 13: 3} {
		if p := part(id); p.ErrorCode != sluicev1.ErrorCode_NONE || p.BaseOffset != want {
			t.Errorf("request %d: %v, want base offset %d", id, p, want)
		}
	}
	if p := part(14); p.ErrorCode != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
		t.Errorf("unknown topic: %v", p)
	}
	if p := part(15); p.ErrorCode != sluicev1.ErrorCode_NONE || p.BaseOffset != -1 {
		t.Errorf("acks=0: %v, want no error and no offset", p)
	}
	if r := got[12]; r.ErrorCode != sluicev1.ErrorCode_INVALID_REQUIRED_ACKS || r.Response != nil || r.ErrorMessage == "" {
		t.Errorf("bad acks: %v", r)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the client's end: %v, want io.EOF", err)
	}
	if v := values(tn.fetch("s", 0, 0, 0), 0); len(v) != 7 || v[0] != "a-0" || v[3] != "c-0" {
		t.Errorf("s-0 holds %v", v)
	}
	if v := values(tn.fetch("s", 1, 0, 0), 0); len(v) != 3 {
		t.Errorf("s-1 holds %v", v)
	}
}

// At most api.MaxProduceStreamInFlight requests of a stream wait for
// their answers: while acks=all cannot complete (both followers stopped
// fetching) the broker appends that many and reads no further; once the
// followers fetch again every request is answered, in full.
func TestProduceStreamBoundsRequestsInFlight(t *testing.T) {
	tc, pm := replCluster(t, time.Minute)
	leader := tc.Node(pm.LeaderId)
	for _, r := range pm.Replicas {
		if r != pm.LeaderId {
			tc.Node(r).Replicas().SetFetchPaused(true)
		}
	}
	st, err := sluicev1.NewLogClient(nodetest.Dial(t, leader.Addr())).ProduceStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	const extra = 6
	total := api.MaxProduceStreamInFlight + extra
	for i := 0; i < total; i++ {
		if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: int64(i), Request: publicRequest(t, sluicev1.Acks_ACKS_ALL, "r", 0, fmt.Sprint(i), 10)}); err != nil {
			t.Fatal(err)
		}
	}
	log := hostedLog(t, leader)
	limit := int64(api.MaxProduceStreamInFlight * 10)
	wait.Until(t, 10*time.Second, "the first requests appended", func() bool { return log.LogEndOffset() == limit })
	// Not a timing assertion of speed: the requests beyond the bound are
	// on the wire, so within this window an unbounded broker would append
	// them (the append of 64 took far less). Every change of the log is
	// looked at.
	window := time.NewTimer(300 * time.Millisecond)
	defer window.Stop()
	for watching := true; watching; {
		changed := log.Changed()
		if end := log.LogEndOffset(); end != limit {
			t.Fatalf("log end %d with %d requests waiting: the stream was read past its bound", end, api.MaxProduceStreamInFlight)
		}
		select {
		case <-changed:
		case <-window.C:
			watching = false
		}
	}
	for _, r := range pm.Replicas {
		tc.Node(r).Replicas().SetFetchPaused(false)
	}
	seen := map[int64]bool{}
	for len(seen) < total {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d answers: %v", len(seen), err)
		}
		p := r.GetResponse().GetTopics()[0].Partitions[0]
		if p.ErrorCode != sluicev1.ErrorCode_NONE || p.BaseOffset != r.CorrelationId*10 {
			t.Fatalf("request %d: %v", r.CorrelationId, p)
		}
		seen[r.CorrelationId] = true
	}
	if end := log.LogEndOffset(); end != int64(total*10) {
		t.Errorf("log end %d, want %d", end, total*10)
	}
}

// Shutdown ends the streams clients keep open (a ProduceStream, a
// follower's ReplicaFetchStream) with UNAVAILABLE "node is shutting down"
// instead of waiting for them: grpc's graceful stop waits for every open
// RPC, and these never end on their own. (Before, a stopping controller
// leader kept its Raft leadership for the whole ShutdownTimeout and fenced
// every broker whose heartbeats it no longer served.)
func TestShutdownEndsOpenStreams(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) { c.ShutdownTimeout = time.Minute })
	tn.createTopic("s", 1, nil)
	ps, err := tn.log.ProduceStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Send(&sluicev1.ProduceStreamRequest{CorrelationId: 1, Request: publicRequest(t, sluicev1.Acks_ACKS_ALL, "s", 0, "a", 1)}); err != nil {
		t.Fatal(err)
	}
	if r, err := ps.Recv(); err != nil || r.CorrelationId != 1 {
		t.Fatalf("first answer: %v %v", r, err)
	}
	rs, err := internalv1.NewReplicaClient(tn.internal).ReplicaFetchStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&internalv1.ReplicaFetchRequest{ReplicaId: 1, BrokerEpoch: tn.node.BrokerEpoch(), MaxWaitMs: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Recv(); err != nil {
		t.Fatalf("replica fetch answer: %v", err)
	}
	// Both streams are open and idle now.
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tn.node.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if sctx.Err() != nil {
		t.Fatalf("shutdown ran into its deadline: %v", sctx.Err())
	}
	for name, recv := range map[string]func() error{
		"ProduceStream":      func() error { _, err := ps.Recv(); return err },
		"ReplicaFetchStream": func() error { _, err := rs.Recv(); return err },
	} {
		if err := recv(); status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "node is shutting down" {
			t.Errorf("%s after shutdown: %v, want UNAVAILABLE node is shutting down", name, err)
		}
	}
}

// An acks=all request of a stream costs no goroutine while it waits: the
// waits end where the high watermark moves, and the stream's one sender
// answers them. Pipelined requests are each answered exactly once, in
// full, and the stream ends cleanly after the client's end.
func TestProduceStreamAcksAllWaitsWithoutGoroutinePerRequest(t *testing.T) {
	tc, pm := replCluster(t, time.Minute)
	leader := tc.Node(pm.LeaderId)
	log := hostedLog(t, leader)
	st, err := sluicev1.NewLogClient(nodetest.Dial(t, leader.Addr())).ProduceStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	// One request answered first: the stream's own goroutines exist.
	if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: -1, Request: publicRequest(t, sluicev1.Acks_ACKS_ALL, "r", 0, "warm", 10)}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Recv(); err != nil || r.CorrelationId != -1 || r.GetResponse().GetTopics()[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("first answer: %v %v", r, err)
	}
	for _, r := range pm.Replicas {
		if r != pm.LeaderId {
			tc.Node(r).Replicas().SetFetchPaused(true)
		}
	}
	before := runtime.NumGoroutine()
	const total = api.MaxProduceStreamInFlight
	for i := range total {
		if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: int64(i), Request: publicRequest(t, sluicev1.Acks_ACKS_ALL, "r", 0, fmt.Sprint(i), 10)}); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(t, 10*time.Second, "every request appended and waiting", func() bool { return log.CommitWaits() == total })
	// A goroutine per waiting request would add total; the cluster's own
	// (fetchers, timers, gRPC) come and go by a few.
	if after := runtime.NumGoroutine(); after-before >= total/2 {
		t.Fatalf("%d goroutines with %d requests waiting, %d before", after, total, before)
	}
	for _, r := range pm.Replicas {
		tc.Node(r).Replicas().SetFetchPaused(false)
	}
	seen := map[int64]bool{}
	for len(seen) < total {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d answers: %v", len(seen), err)
		}
		if seen[r.CorrelationId] || r.CorrelationId < 0 || r.CorrelationId >= total {
			t.Fatalf("answer for correlation id %d: duplicate or unknown", r.CorrelationId)
		}
		seen[r.CorrelationId] = true
		p := r.GetResponse().GetTopics()[0].Partitions[0]
		if p.ErrorCode != sluicev1.ErrorCode_NONE || p.BaseOffset != 10+r.CorrelationId*10 {
			t.Fatalf("request %d: %v", r.CorrelationId, p)
		}
		if hw := log.HighWatermark(); hw < p.BaseOffset+10 {
			t.Fatalf("request %d answered with HW %d, before its batch %d-%d committed", r.CorrelationId, hw, p.BaseOffset, p.BaseOffset+9)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the client's end: %v %v, want io.EOF (no answer twice)", r, err)
	}
	if n := log.CommitWaits(); n != 0 {
		t.Errorf("%d waits left on the leader", n)
	}
}

// A stream request with several partitions is answered once, when the
// wait of every one of its partitions has ended: here r-0 waits for its
// paused followers while the other partition (replication factor 1)
// commits at once; a later request needing no wait is answered first.
func TestProduceStreamAnswersAfterEveryPartition(t *testing.T) {
	tc, pm := replCluster(t, time.Minute)
	leader := tc.Node(pm.LeaderId)
	admin := sluicev1.NewAdminClient(tc.Dial(pm.LeaderId))
	// One partition per broker (leaders go round-robin): one is led by
	// r-0's leader.
	if r, err := admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "one", NumPartitions: 3, ReplicationFactor: 1}}}); err != nil || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %v", err, r)
	}
	tc.WaitTopic("one", 3)
	var local int32 = -1
	for i := range int32(3) {
		if pm1 := tc.partition(t, "one", i); pm1.LeaderId == pm.LeaderId {
			local = i
		}
	}
	if local < 0 {
		t.Fatalf("no partition of topic one led by node %d", pm.LeaderId)
	}
	wait.Until(t, 10*time.Second, "node leads its partition of one", func() bool {
		p, err := leader.Replicas().Replica("one", local)
		return err == nil && p.IsLeader(-1)
	})
	for _, r := range pm.Replicas {
		if r != pm.LeaderId {
			tc.Node(r).Replicas().SetFetchPaused(true)
		}
	}
	st, err := sluicev1.NewLogClient(nodetest.Dial(t, leader.Addr())).ProduceStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	both := publicRequest(t, sluicev1.Acks_ACKS_ALL, "r", 0, "r", 10)
	both.Topics = append(both.Topics, publicRequest(t, sluicev1.Acks_ACKS_ALL, "one", local, "one", 5).Topics...)
	if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: 1, Request: both}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: 2, Request: publicRequest(t, sluicev1.Acks_ACKS_LEADER, "one", local, "later", 1)}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Recv(); err != nil || r.CorrelationId != 2 {
		t.Fatalf("first answer: %v %v; want request 2's (request 1 still waits for r-0)", r, err)
	}
	for _, r := range pm.Replicas {
		tc.Node(r).Replicas().SetFetchPaused(false)
	}
	r, err := st.Recv()
	if err != nil || r.CorrelationId != 1 || len(r.GetResponse().GetTopics()) != 2 {
		t.Fatalf("second answer: %v %v; want request 1's, both topics", r, err)
	}
	for _, tr := range r.Response.Topics {
		if p := tr.Partitions[0]; p.ErrorCode != sluicev1.ErrorCode_NONE || p.BaseOffset != 0 {
			t.Errorf("%s: %v, want committed at offset 0", tr.Name, p)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the client's end: %v %v, want io.EOF", r, err)
	}
}

// An acks=all batch not replicated within the request's timeout answers
// REQUEST_TIMED_OUT with its offset (it is in the leader's log and may
// still commit), on the unary Produce and on a stream alike; the wait is
// gone from the partition.
func TestProduceAcksAllTimesOut(t *testing.T) {
	tc, pm := replCluster(t, time.Minute)
	leader := tc.Node(pm.LeaderId)
	log := hostedLog(t, leader)
	for _, r := range pm.Replicas {
		if r != pm.LeaderId {
			tc.Node(r).Replicas().SetFetchPaused(true)
		}
	}
	lc := sluicev1.NewLogClient(nodetest.Dial(t, leader.Addr()))
	for i, tt := range []struct {
		name    string
		produce func(req *sluicev1.ProduceRequest) *sluicev1.ProduceResponse
	}{
		{"unary", func(req *sluicev1.ProduceRequest) *sluicev1.ProduceResponse {
			resp, err := lc.Produce(ctx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}},
		{"stream", func(req *sluicev1.ProduceRequest) *sluicev1.ProduceResponse {
			st, err := lc.ProduceStream(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: 7, Request: req}); err != nil {
				t.Fatal(err)
			}
			a, err := st.Recv()
			if err != nil || a.CorrelationId != 7 {
				t.Fatalf("answer %v %v", a, err)
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("after the client's end: %v, want io.EOF", err)
			}
			return a.Response
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := publicRequest(t, sluicev1.Acks_ACKS_ALL, "r", 0, tt.name, 10)
			req.TimeoutMs = 50
			p := tt.produce(req).GetTopics()[0].Partitions[0]
			if p.ErrorCode != sluicev1.ErrorCode_REQUEST_TIMED_OUT || p.BaseOffset != int64(i*10) {
				t.Fatalf("%v, want REQUEST_TIMED_OUT at offset %d", p, i*10)
			}
			if n := log.CommitWaits(); n != 0 {
				t.Errorf("%d waits left", n)
			}
		})
	}
}
