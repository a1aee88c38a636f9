package api_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// reassignCluster is a 3-node combined cluster with topic "m": one
// partition, RF 2, so one broker holds no replica of it.
func reassignCluster(t *testing.T) *testCluster {
	t.Helper()
	tc := newTestCluster(t, []int32{1, 2, 3}, true, nil)
	tc.StartAll()
	admin := sluicev1.NewAdminClient(tc.Dial(1))
	r, err := admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "m", NumPartitions: 1, ReplicationFactor: 2}}})
	if err != nil || r.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create: %v %v", err, r)
	}
	tc.WaitTopic("m", 1)
	return tc
}

// produceM sends count batches of 10 records ("<prefix><i>-<j>") to m-0
// on node with acks, failing the test unless every batch is accepted.
func produceM(t *testing.T, n *node.Node, acks sluicev1.Acks, prefix string, count int) {
	t.Helper()
	cc := nodetest.Dial(t, n.Addr())
	for i := 0; i < count; i++ {
		req := &internalv1.ProduceRequestView{Acks: acks, TimeoutMs: 5000, Topics: []*internalv1.TopicProduceDataView{{Name: "m",
			Partitions: []*internalv1.PartitionProduceDataView{{Partition: 0, Batch: makeBatch(fmt.Sprintf("%s%d", prefix, i), 10, 1000)}}}}}
		resp := &sluicev1.ProduceResponse{}
		if err := cc.Invoke(ctx(t), "/sluice.v1.Log/Produce", req, resp); err != nil {
			t.Fatal(err)
		}
		if r := resp.Topics[0].Partitions[0]; r.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Fatalf("produce %s%d to node %d: %v %s", prefix, i, n.Replicas().NodeID(), r.ErrorCode, r.ErrorMessage)
		}
	}
}

// mLogBytes is every batch of m-0 below hw on node, concatenated.
func mLogBytes(t *testing.T, n *node.Node, hw int64) []byte {
	t.Helper()
	p, err := n.Replicas().Replica("m", 0)
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

// reassign sends AlterPartitionReassignments for m-0 through node.
func (tc *testCluster) reassign(t *testing.T, node int32, partition int32, replicas ...int32) *sluicev1.AlterPartitionReassignmentsResponse {
	t.Helper()
	resp, err := sluicev1.NewAdminClient(tc.Dial(node)).AlterPartitionReassignments(ctx(t),
		&sluicev1.AlterPartitionReassignmentsRequest{Topic: "m", Partition: partition, Replicas: replicas})
	if err != nil {
		t.Fatalf("reassign m-%d to %v: %v", partition, replicas, err)
	}
	return resp
}

// waitReassigned waits until every node's metadata shows m-0 with
// replicas target, the ISR equal to target as a set and no reassignment
// running, and returns that partition.
func (tc *testCluster) waitReassigned(t *testing.T, target []int32) *sluicev1.PartitionMetadata {
	t.Helper()
	var last *sluicev1.PartitionMetadata
	// One connection per node for the whole wait (a new one per check
	// had reached the listener's 1,000 connections per IP within 10 s).
	admins := map[int32]sluicev1.AdminClient{}
	for id, n := range tc.Nodes() {
		cc, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		admins[id] = sluicev1.NewAdminClient(cc)
	}
	wait.Until(t, 30*time.Second, fmt.Sprintf("m-0 reassigned to %v", target), func() bool {
		for _, admin := range admins {
			md, err := admin.Metadata(ctx(t), &sluicev1.MetadataRequest{Topics: []string{"m"}})
			if err != nil {
				return false
			}
			last = md.Topics[0].Partitions[0]
			if !slices.Equal(last.Replicas, target) || !sameIDs(last.Isr, target) || len(last.AddingReplicas)+len(last.RemovingReplicas) > 0 {
				return false
			}
		}
		return true
	})
	return last
}

func sameIDs(a, b []int32) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// otherThan returns the broker of 1..3 in neither of a's ids.
func otherThan(ids ...int32) int32 {
	for id := int32(1); id <= 3; id++ {
		if !slices.Contains(ids, id) {
			return id
		}
	}
	return -1
}

// checkMoved checks the rules a completed reassignment of m-0 from
// removed to pm leaves on the nodes: the removed broker hosts nothing and
// its log directory is gone; every replica holds the leader's batches
// below the high watermark byte for byte, and at least want records.
func (tc *testCluster) checkMoved(t *testing.T, pm *sluicev1.PartitionMetadata, removed int32, want int64) {
	t.Helper()
	wait.Until(t, 10*time.Second, "removed replica's log deleted", func() bool {
		_, err := tc.Node(removed).Replicas().Replica("m", 0)
		_, statErr := os.Stat(filepath.Join(tc.Config(removed).DataDir, "logs", "m-0"))
		return err != nil && errors.Is(statErr, os.ErrNotExist)
	})
	leader := tc.Node(pm.LeaderId)
	lp, err := leader.Replicas().Replica("m", 0)
	if err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, "leader HW covers the records", func() bool { return lp.HighWatermark() >= want })
	hw := lp.HighWatermark()
	ref := mLogBytes(t, leader, hw)
	for _, id := range pm.Replicas {
		p, err := tc.Node(id).Replicas().Replica("m", 0)
		if err != nil {
			t.Fatalf("replica %d: %v", id, err)
		}
		wait.Until(t, 10*time.Second, fmt.Sprintf("replica %d caught up to %d", id, hw), func() bool { return p.LogEndOffset() >= hw })
		if got := mLogBytes(t, tc.Node(id), hw); !bytes.Equal(got, ref) {
			t.Errorf("replica %d: %d bytes below HW %d differ from the leader's %d", id, len(got), hw, len(ref))
		}
	}
}

// KIP-455 end to end: the new replica is added and catches up, and only
// then is the old one dropped (its log deleted); a target without the
// current leader moves leadership to a target replica under a new leader
// epoch; no acknowledged record is lost either way.
func TestReassignmentMovesReplicasAndLeadership(t *testing.T) {
	tc := reassignCluster(t)
	pm := tc.partition(t, "m", 0)
	leader := pm.LeaderId
	follower := pm.Replicas[0]
	if follower == leader {
		follower = pm.Replicas[1]
	}
	spare := otherThan(pm.Replicas...)
	produceM(t, tc.Node(leader), sluicev1.Acks_ACKS_ALL, "a", 10) // 100 records

	// 1. Swap the follower for the spare broker, through the spare broker.
	target := []int32{leader, spare}
	resp := tc.reassign(t, spare, 0, target...)
	if resp.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("reassign: %v %s", resp.ErrorCode, resp.ErrorMessage)
	}
	// Either still running (target first, then the removed replica) or
	// already completed by the time the answer was written.
	running := slices.Equal(resp.Replicas, []int32{leader, spare, follower}) && slices.Equal(resp.AddingReplicas, []int32{spare}) &&
		slices.Equal(resp.RemovingReplicas, []int32{follower})
	if !running && !slices.Equal(resp.Replicas, target) {
		t.Fatalf("reassign answer %v", resp)
	}
	got := tc.waitReassigned(t, target)
	if got.LeaderId != leader || got.LeaderEpoch != pm.LeaderEpoch {
		t.Errorf("leader %d epoch %d after a move that kept it, want %d epoch %d", got.LeaderId, got.LeaderEpoch, leader, pm.LeaderEpoch)
	}
	tc.checkMoved(t, got, follower, 100)
	produceM(t, tc.Node(leader), sluicev1.Acks_ACKS_ALL, "b", 5) // acks=all still works: 150

	// 2. Move away from the leader: the follower that was removed comes
	// back, the leader goes.
	target = []int32{follower, spare}
	if resp := tc.reassign(t, leader, 0, target...); resp.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("reassign: %v %s", resp.ErrorCode, resp.ErrorMessage)
	}
	got = tc.waitReassigned(t, target)
	if !slices.Contains(target, got.LeaderId) || got.LeaderEpoch <= pm.LeaderEpoch {
		t.Fatalf("leader %d epoch %d after moving away from %d (epoch %d)", got.LeaderId, got.LeaderEpoch, leader, pm.LeaderEpoch)
	}
	tc.checkMoved(t, got, leader, 150)
	produceM(t, tc.Node(got.LeaderId), sluicev1.Acks_ACKS_ALL, "c", 5) // 200

	// Every acknowledged record is there, in order, on the new leader.
	tn := &testNode{t: t, conn: tc.Dial(got.LeaderId)}
	tn.log = sluicev1.NewLogClient(tn.conn)
	var vals []string
	for off := int64(0); off < 200; {
		pd := tn.fetch("m", 0, off, 0)
		if pd.ErrorCode != sluicev1.ErrorCode_NONE || len(pd.Batches) == 0 {
			t.Fatalf("fetch at %d from the new leader: %v %s", off, pd.ErrorCode, pd.ErrorMessage)
		}
		vals = append(vals, values(pd, off)...)
		off = pd.NextFetchOffset
	}
	for i := 0; i < 200; i++ {
		prefix, batch := "a", i/10
		switch {
		case i >= 150:
			prefix, batch = "c", (i-150)/10
		case i >= 100:
			prefix, batch = "b", (i-100)/10
		}
		if want := fmt.Sprintf("%s%d-%d", prefix, batch, i%10); vals[i] != want {
			t.Fatalf("offset %d = %q, want %q", i, vals[i], want)
		}
	}
}

// Bad requests are refused with a clear code and change nothing; a
// second target while a reassignment runs is REASSIGNMENT_IN_PROGRESS;
// a running reassignment shows in Metadata and ListPartitionReassignments
// and completes once the new replica can catch up.
func TestReassignmentRefusalsAndProgress(t *testing.T) {
	tc := reassignCluster(t)
	pm := tc.partition(t, "m", 0)
	image := func() any { return tc.Node(1).Metadata().Image().Partition("m", 0).Clone() }
	before := image()
	admin := sluicev1.NewAdminClient(tc.Dial(1))
	cases := []struct {
		name      string
		partition int32
		topic     string
		replicas  []int32
		code      sluicev1.ErrorCode
	}{
		{"unknown broker", 0, "m", []int32{pm.Replicas[0], 9}, sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{"duplicate broker", 0, "m", []int32{pm.Replicas[0], pm.Replicas[0]}, sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{"empty list", 0, "m", nil, sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{"unknown partition", 3, "m", []int32{1, 2}, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{"unknown topic", 0, "nope", []int32{1, 2}, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
	}
	for _, c := range cases {
		resp, err := admin.AlterPartitionReassignments(ctx(t), &sluicev1.AlterPartitionReassignmentsRequest{Topic: c.topic, Partition: c.partition, Replicas: c.replicas})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if resp.ErrorCode != c.code || resp.ErrorMessage == "" {
			t.Errorf("%s: %v %q, want %v with a message", c.name, resp.ErrorCode, resp.ErrorMessage, c.code)
		}
	}
	_, err := admin.AlterPartitionReassignments(ctx(t), &sluicev1.AlterPartitionReassignmentsRequest{Topic: "m", Replicas: []int32{1}, TimeoutMs: -1})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("negative timeout: %v, want InvalidArgument", err)
	}
	if after := image(); !reflect.DeepEqual(after, before) {
		t.Fatalf("refused requests changed m-0: %+v -> %+v", before, after)
	}
	// The current assignment again is a no-op.
	if resp := tc.reassign(t, 1, 0, pm.Replicas...); resp.ErrorCode != sluicev1.ErrorCode_NONE || !slices.Equal(resp.Replicas, pm.Replicas) {
		t.Fatalf("same assignment: %v", resp)
	}
	if after := image(); !reflect.DeepEqual(after, before) {
		t.Fatalf("a no-op reassignment changed m-0: %+v -> %+v", before, after)
	}

	// The spare broker cannot fetch: the reassignment stays running.
	leader := pm.LeaderId
	follower := pm.Replicas[0]
	if follower == leader {
		follower = pm.Replicas[1]
	}
	spare := otherThan(pm.Replicas...)
	produceM(t, tc.Node(leader), sluicev1.Acks_ACKS_ALL, "a", 3)
	tc.Node(spare).Replicas().SetFetchPaused(true)
	target := []int32{spare, leader}
	resp := tc.reassign(t, 2, 0, target...)
	if resp.ErrorCode != sluicev1.ErrorCode_NONE || !slices.Equal(resp.Replicas, []int32{spare, leader, follower}) ||
		!slices.Equal(resp.AddingReplicas, []int32{spare}) || !slices.Equal(resp.RemovingReplicas, []int32{follower}) {
		t.Fatalf("start: %v", resp)
	}
	if resp := tc.reassign(t, 3, 0, follower, spare); resp.ErrorCode != sluicev1.ErrorCode_REASSIGNMENT_IN_PROGRESS {
		t.Errorf("another target while one runs: %v %s, want REASSIGNMENT_IN_PROGRESS", resp.ErrorCode, resp.ErrorMessage)
	}
	if resp := tc.reassign(t, 3, 0, target...); resp.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Errorf("the running target again: %v %s, want NONE", resp.ErrorCode, resp.ErrorMessage)
	}
	// Every broker shows it (the request waited for broker 2's cache;
	// the others follow).
	for id, n := range tc.Nodes() {
		wait.Until(t, 5*time.Second, fmt.Sprintf("node %d lists the reassignment", id), func() bool {
			lr, err := sluicev1.NewAdminClient(nodetest.Dial(t, n.Addr())).ListPartitionReassignments(ctx(t), &sluicev1.ListPartitionReassignmentsRequest{})
			return err == nil && len(lr.Reassignments) == 1 && lr.Reassignments[0].Topic == "m" &&
				slices.Equal(lr.Reassignments[0].AddingReplicas, []int32{spare}) && slices.Equal(lr.Reassignments[0].RemovingReplicas, []int32{follower})
		})
	}
	mp := tc.partition(t, "m", 0)
	if !slices.Equal(mp.AddingReplicas, []int32{spare}) || !slices.Equal(mp.RemovingReplicas, []int32{follower}) || slices.Contains(mp.Isr, spare) {
		t.Errorf("metadata while running: %v", mp)
	}
	// The new replica exists on the spare broker but is not in sync; the
	// removing follower still hosts its log.
	if _, err := tc.Node(spare).Replicas().Replica("m", 0); err != nil {
		t.Errorf("spare broker does not host the new replica: %v", err)
	}
	if _, err := tc.Node(follower).Replicas().Replica("m", 0); err != nil {
		t.Errorf("removing follower dropped its log before the end: %v", err)
	}
	// Produce goes on meanwhile.
	produceM(t, tc.Node(leader), sluicev1.Acks_ACKS_ALL, "b", 2)

	tc.Node(spare).Replicas().SetFetchPaused(false)
	got := tc.waitReassigned(t, target)
	// The leader was not the first target replica but stays in the
	// target: no election (the preferred leader changes, the leader does
	// not).
	if got.LeaderId != leader || got.LeaderEpoch != pm.LeaderEpoch {
		t.Errorf("leader %d epoch %d, want %d epoch %d", got.LeaderId, got.LeaderEpoch, leader, pm.LeaderEpoch)
	}
	tc.checkMoved(t, got, follower, 50)
	lr, err := admin.ListPartitionReassignments(ctx(t), &sluicev1.ListPartitionReassignmentsRequest{Topics: []string{"m"}})
	if err != nil || len(lr.Reassignments) != 0 {
		t.Errorf("reassignments after completion: %v %v", lr, err)
	}
}
