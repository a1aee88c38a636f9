package api_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// replCluster is a 3-node combined cluster with one topic "r" (one
// partition, RF 3, min.insync.replicas 2).
func replCluster(t *testing.T, lag time.Duration) (*testCluster, *sluicev1.PartitionMetadata) {
	t.Helper()
	tc := newTestCluster(t, []int32{1, 2, 3}, true, nil)
	tc.ConfigureAll(func(_ int32, cfg *node.Config) { cfg.ReplicaLagTimeMax = lag })
	tc.StartAll()
	admin := sluicev1.NewAdminClient(tc.Dial(1))
	r, err := admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "r", NumPartitions: 1, ReplicationFactor: 3,
		Configs: map[string]string{"min.insync.replicas": "2"}}}})
	if err != nil || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %v", err, r)
	}
	tc.WaitTopic("r", 1)
	return tc, tc.partition(t, "r", 0)
}

// partition is the metadata of topic/p as the first live node sees it,
// once that node has the topic with partition p: a topic created through
// another node reaches this one a moment later.
func (tc *testCluster) partition(t *testing.T, topic string, p int32) *sluicev1.PartitionMetadata {
	t.Helper()
	for id, n := range tc.Nodes() {
		// Closed on return: callers check in loops, and a connection
		// kept per call reached the listener's limit per IP.
		cc, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		admin := sluicev1.NewAdminClient(cc)
		var pm *sluicev1.PartitionMetadata
		wait.For(t, 10*time.Second, fmt.Sprintf("node %d has %s-%d", id, topic, p), func() error {
			md, err := admin.Metadata(ctx(t), &sluicev1.MetadataRequest{Topics: []string{topic}})
			if err != nil {
				t.Fatal(err)
			}
			if tm := md.Topics[0]; tm.ErrorCode != sluicev1.ErrorCode_NONE || int(p) >= len(tm.Partitions) {
				return fmt.Errorf("%v %s, %d partitions", tm.ErrorCode, tm.ErrorMessage, len(tm.Partitions))
			}
			pm = md.Topics[0].Partitions[p]
			return nil
		})
		return pm
	}
	t.Fatal("no live node")
	return nil
}

// produceTo sends n batches of 10 records to node with acks, returning
// the per-batch results.
func produceTo(t *testing.T, n *node.Node, acks sluicev1.Acks, prefix string, count int) []*sluicev1.PartitionProduceResponse {
	t.Helper()
	cc := nodetest.Dial(t, n.Addr())
	var out []*sluicev1.PartitionProduceResponse
	for i := 0; i < count; i++ {
		req := &internalv1.ProduceRequestView{Acks: acks, TimeoutMs: 5000, Topics: []*internalv1.TopicProduceDataView{{Name: "r",
			Partitions: []*internalv1.PartitionProduceDataView{{Partition: 0, Batch: makeBatch(fmt.Sprintf("%s%d", prefix, i), 10, 1000)}}}}}
		resp := &sluicev1.ProduceResponse{}
		if err := cc.Invoke(ctx(t), "/sluice.v1.Log/Produce", req, resp); err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.Topics[0].Partitions[0])
	}
	return out
}

// logBytes is every batch of r-0 below hw on node, concatenated.
func logBytes(t *testing.T, n *node.Node, hw int64) []byte {
	t.Helper()
	p, err := n.Replicas().Replica("r", 0)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for off := p.LogStartOffset(); off < hw; {
		res, err := p.Read(off, 1<<20, hw)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Batches) == 0 {
			break
		}
		for _, b := range res.Batches {
			buf.Write(b)
		}
		off = res.NextOffset
	}
	return buf.Bytes()
}

func hostedLog(t *testing.T, n *node.Node) *cluster.Replica {
	t.Helper()
	p, err := n.Replicas().Replica("r", 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReplicationAcksAllSurvivesLeaderCrash(t *testing.T) {
	tc, pm := replCluster(t, 30*time.Second)
	leader := pm.LeaderId
	for i, r := range produceTo(t, tc.Node(leader), sluicev1.Acks_ACKS_ALL, "a", 50) {
		if r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != int64(i*10) {
			t.Fatalf("acks=all batch %d: %v", i, r)
		}
	}
	// acks=all returned, so every ISR member has the records: each
	// follower's log end is at least 500 right now, with no waiting.
	for id, n := range tc.Nodes() {
		if got := hostedLog(t, n).LogEndOffset(); got < 500 {
			t.Errorf("node %d log end %d after acks=all, want >= 500", id, got)
		}
	}
	tc.Abort(leader)
	var newLeader int32
	wait.Until(t, 15*time.Second, "a new leader", func() bool {
		p := tc.partition(t, "r", 0)
		newLeader = p.LeaderId
		return newLeader != leader && newLeader >= 0
	})
	wait.Until(t, 10*time.Second, "new leader's HW covers the acknowledged records", func() bool {
		return hostedLog(t, tc.Node(newLeader)).HighWatermark() >= 500
	})
	tn := &testNode{t: t, conn: tc.Dial(newLeader)}
	tn.log = sluicev1.NewLogClient(tn.conn)
	var got []string
	for off := int64(0); off < 500; {
		pd := tn.fetch("r", 0, off, 0)
		if pd.ErrorCode != sluicev1.ErrorCode_NONE || len(pd.Batches) == 0 {
			t.Fatalf("fetch at %d from the new leader: %v %s", off, pd.ErrorCode, pd.ErrorMessage)
		}
		got = append(got, values(pd, off)...)
		off = pd.NextFetchOffset
	}
	for i := 0; i < 500; i++ {
		if want := fmt.Sprintf("a%d-%d", i/10, i%10); got[i] != want {
			t.Fatalf("offset %d = %q, want %q", i, got[i], want)
		}
	}
	// Produce continues with two of three; the crashed node comes back,
	// catches up and rejoins the ISR; all three logs are byte-identical.
	for _, r := range produceTo(t, tc.Node(newLeader), sluicev1.Acks_ACKS_ALL, "b", 10) {
		if r.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Fatalf("acks=all with 2 of 3: %v", r)
		}
	}
	tc.Start(leader)
	tc.WaitReady(leader)
	wait.Until(t, 20*time.Second, "the restarted replica rejoins the ISR", func() bool {
		return len(tc.partition(t, "r", 0).Isr) == 3
	})
	hw := hostedLog(t, tc.Node(newLeader)).HighWatermark()
	want := logBytes(t, tc.Node(newLeader), hw)
	for id, n := range tc.Nodes() {
		wait.Until(t, 10*time.Second, "replica caught up", func() bool { return hostedLog(t, n).LogEndOffset() >= hw })
		if got := logBytes(t, n, hw); !bytes.Equal(got, want) {
			t.Errorf("node %d: %d bytes below HW %d differ from the leader's %d", id, len(got), hw, len(want))
		}
	}
}

func TestReplicationNotEnoughReplicasAndISRShrink(t *testing.T) {
	tc, pm := replCluster(t, time.Second)
	leader := pm.LeaderId
	var followers []int32
	for _, r := range pm.Replicas {
		if r != leader {
			followers = append(followers, r)
		}
	}
	produceTo(t, tc.Node(leader), sluicev1.Acks_ACKS_ALL, "a", 5)

	// One follower stops fetching (heartbeats go on): after
	// replica.lag.time.max the leader drops it from the ISR; produce goes on.
	tc.Node(followers[0]).Replicas().SetFetchPaused(true)
	produceTo(t, tc.Node(leader), sluicev1.Acks_ACKS_LEADER, "b", 1)
	wait.Until(t, 10*time.Second, "ISR shrinks to 2", func() bool { return len(tc.partition(t, "r", 0).Isr) == 2 })
	for _, r := range produceTo(t, tc.Node(leader), sluicev1.Acks_ACKS_ALL, "c", 5) {
		if r.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Fatalf("acks=all with ISR 2: %v", r)
		}
	}
	// It resumes, catches up and rejoins.
	tc.Node(followers[0]).Replicas().SetFetchPaused(false)
	wait.Until(t, 10*time.Second, "ISR expands to 3", func() bool { return len(tc.partition(t, "r", 0).Isr) == 3 })

	// Both followers stop: the ISR shrinks to the leader alone, and
	// acks=all is refused before anything is appended.
	tc.Node(followers[0]).Replicas().SetFetchPaused(true)
	tc.Node(followers[1]).Replicas().SetFetchPaused(true)
	produceTo(t, tc.Node(leader), sluicev1.Acks_ACKS_LEADER, "d", 1)
	wait.Until(t, 10*time.Second, "ISR shrinks to the leader", func() bool { return len(tc.partition(t, "r", 0).Isr) == 1 })
	end := hostedLog(t, tc.Node(leader)).LogEndOffset()
	r := produceTo(t, tc.Node(leader), sluicev1.Acks_ACKS_ALL, "e", 1)[0]
	if r.ErrorCode != sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS {
		t.Fatalf("acks=all with ISR 1 < min.insync 2: %v", r)
	}
	if got := hostedLog(t, tc.Node(leader)).LogEndOffset(); got != end {
		t.Errorf("refused produce appended: log end %d -> %d", end, got)
	}
	if r := produceTo(t, tc.Node(leader), sluicev1.Acks_ACKS_LEADER, "f", 1)[0]; r.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Errorf("acks=1 with ISR 1: %v", r)
	}
}

func TestReplicationDivergentTailTruncated(t *testing.T) {
	tc, pm := replCluster(t, 30*time.Second)
	old := pm.LeaderId
	produceTo(t, tc.Node(old), sluicev1.Acks_ACKS_ALL, "a", 5) // 50 committed records
	// The followers stop fetching; the leader writes a tail nobody has.
	for _, r := range pm.Replicas {
		if r != old {
			tc.Node(r).Replicas().SetFetchPaused(true)
		}
	}
	for _, r := range produceTo(t, tc.Node(old), sluicev1.Acks_ACKS_LEADER, "tail", 3) {
		if r.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Fatal(r)
		}
	}
	if end := hostedLog(t, tc.Node(old)).LogEndOffset(); end != 80 {
		t.Fatalf("old leader log end %d, want 80", end)
	}
	tc.Abort(old)
	for _, n := range tc.Nodes() {
		n.Replicas().SetFetchPaused(false)
	}
	var leader int32
	wait.Until(t, 15*time.Second, "a new leader that knows it leads", func() bool {
		leader = tc.partition(t, "r", 0).LeaderId
		if leader == old || leader < 0 {
			return false
		}
		// The metadata answering may be ahead of the new leader's own.
		p, err := tc.Node(leader).Replicas().Replica("r", 0)
		if err != nil {
			return false
		}
		l, _ := p.Leadership()
		return l == leader
	})
	// A fetch already in flight when the followers paused may have carried
	// the first tail batch to the new leader; the divergence point is its
	// log end at election.
	diverge := hostedLog(t, tc.Node(leader)).LogEndOffset()
	if diverge < 50 || diverge >= 80 {
		t.Fatalf("new leader log end %d, want within [50, 80)", diverge)
	}
	// The new leader writes different records at the same offsets.
	for _, r := range produceTo(t, tc.Node(leader), sluicev1.Acks_ACKS_ALL, "new", 4) {
		if r.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Fatal(r)
		}
	}
	// The old leader returns: it truncates its tail to the divergence
	// point and copies the new leader's records.
	tc.Start(old)
	tc.WaitReady(old)
	wait.Until(t, 20*time.Second, "old leader back in the ISR", func() bool { return len(tc.partition(t, "r", 0).Isr) == 3 })
	hw := hostedLog(t, tc.Node(leader)).HighWatermark()
	if hw != diverge+40 {
		t.Fatalf("HW %d, want %d", hw, diverge+40)
	}
	want := logBytes(t, tc.Node(leader), hw)
	for id, n := range tc.Nodes() {
		if got := logBytes(t, n, hw); !bytes.Equal(got, want) {
			t.Errorf("node %d differs from the leader below the HW", id)
		}
	}
	p := hostedLog(t, tc.Node(old))
	if end := p.LogEndOffset(); end != hw {
		t.Errorf("old leader log end %d, want %d", end, hw)
	}
	entries := p.EpochEntries()
	if len(entries) != 2 || entries[1].StartOffset != diverge {
		t.Errorf("old leader epoch entries %+v, want the second epoch to start at %d", entries, diverge)
	}
}
