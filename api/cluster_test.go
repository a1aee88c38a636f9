package api_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// testCluster is the in-process cluster of nodetest, with this package's
// helpers as methods.
type testCluster struct {
	*nodetest.Cluster
}

// newTestCluster prepares a cluster (nodetest.NewCluster): voters are the
// controller quorum, combined controller+broker nodes if combined;
// brokerOnly ids are broker-only.
func newTestCluster(t *testing.T, voters []int32, combined bool, brokerOnly []int32) *testCluster {
	return &testCluster{nodetest.NewCluster(t, voters, combined, brokerOnly)}
}

func TestClusterMetadataRoutingAndEpochs(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3}, true, []int32{4})
	tc.StartAll()

	// A topic created through the broker-only node (forwarded to the
	// active controller) is visible in every broker's Metadata, the same
	// everywhere, once each has applied it (node 4 had when CreateTopics
	// answered; the others follow a moment later).
	admin4 := sluicev1.NewAdminClient(tc.Dial(4))
	cr, err := admin4.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "t", NumPartitions: 8, ReplicationFactor: 3}}})
	if err != nil || cr.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create via broker-only node: %v %v", err, cr)
	}
	tc.WaitTopic("t", 8)
	var first *sluicev1.TopicMetadata
	for id := int32(1); id <= 4; id++ {
		md, err := sluicev1.NewAdminClient(tc.Dial(id)).Metadata(ctx(t), &sluicev1.MetadataRequest{Topics: []string{"t"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(md.Brokers) != 4 || md.ClusterId == "" {
			t.Errorf("node %d: %d brokers, cluster id %q", id, len(md.Brokers), md.ClusterId)
		}
		tm := md.Topics[0]
		if tm.ErrorCode != sluicev1.ErrorCode_NONE || len(tm.Partitions) != 8 {
			t.Fatalf("node %d: topic metadata %v", id, tm)
		}
		if first == nil {
			first = tm
			continue
		}
		for i, p := range tm.Partitions {
			q := first.Partitions[i]
			if p.LeaderId != q.LeaderId || !slices.Equal(p.Replicas, q.Replicas) || !slices.Equal(p.Isr, q.Isr) {
				t.Errorf("node %d partition %d = %v, node 1 says %v", id, i, p, q)
			}
		}
	}
	// Every partition has 3 distinct replicas and a leader among them;
	// leaders are spread over the four brokers.
	leaders := map[int32]int{}
	for _, p := range first.Partitions {
		r := slices.Clone(p.Replicas)
		slices.Sort(r)
		if len(slices.Compact(r)) != 3 || !slices.Contains(p.Replicas, p.LeaderId) {
			t.Errorf("partition %d: replicas %v leader %d", p.Partition, p.Replicas, p.LeaderId)
		}
		leaders[p.LeaderId]++
	}
	if len(leaders) != 4 {
		t.Errorf("leaders spread over %d brokers, want 4: %v", len(leaders), leaders)
	}

	// Produce to a follower: NOT_LEADER_OR_FOLLOWER naming the leader;
	// produce to the leader: accepted.
	p0 := first.Partitions[0]
	var follower int32
	for _, r := range p0.Replicas {
		if r != p0.LeaderId {
			follower = r
			break
		}
	}
	produce := func(node int32) *sluicev1.PartitionProduceResponse {
		tn := &testNode{t: t, conn: tc.Dial(node)}
		return tn.produceRaw("t", 0, makeBatch("r", 2, 1000))
	}
	pr := produce(follower)
	if pr.ErrorCode != sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER || pr.CurrentLeader.GetLeaderId() != p0.LeaderId ||
		pr.CurrentLeader.GetAddress() != tc.Node(p0.LeaderId).Addr() {
		t.Errorf("produce to follower %d: %v, want NOT_LEADER_OR_FOLLOWER naming %d at %s", follower, pr, p0.LeaderId, tc.Node(p0.LeaderId).Addr())
	}
	if pr := produce(p0.LeaderId); pr.ErrorCode != sluicev1.ErrorCode_NONE || pr.BaseOffset != 0 {
		t.Errorf("produce to leader: %v", pr)
	}

	// Inter-node requests with a stale broker epoch are rejected.
	ctlID := tc.Leader()
	ctl := internalv1.NewControllerClient(tc.DialInternal(ctlID))
	epoch := tc.Node(2).BrokerEpoch()
	_, err = ctl.BrokerHeartbeat(ctx(t), &internalv1.BrokerHeartbeatRequest{BrokerId: 2, BrokerEpoch: epoch - 1})
	if e, _ := errs.FromStatus(err); errs.Code(e) != sluicev1.ErrorCode_STALE_BROKER_EPOCH {
		t.Errorf("heartbeat with a stale epoch: %v, want STALE_BROKER_EPOCH", err)
	}
	_, err = ctl.AllocateProducerIds(ctx(t), &internalv1.AllocateProducerIdsRequest{BrokerId: 2, BrokerEpoch: epoch + 100})
	if e, _ := errs.FromStatus(err); errs.Code(e) != sluicev1.ErrorCode_STALE_BROKER_EPOCH {
		t.Errorf("allocate with a wrong epoch: %v, want STALE_BROKER_EPOCH", err)
	}
	// A follower voter answers writes with NOT_CONTROLLER naming the leader.
	other := int32(1)
	if other == ctlID {
		other = 2
	}
	_, err = internalv1.NewControllerClient(tc.DialInternal(other)).AllocateProducerIds(ctx(t), &internalv1.AllocateProducerIdsRequest{BrokerId: 2, BrokerEpoch: epoch})
	e, md := errs.FromStatus(err)
	if errs.Code(e) != sluicev1.ErrorCode_NOT_CONTROLLER || md["leader_id"] != strconv.Itoa(int(ctlID)) || md["leader_address"] != tc.Node(ctlID).InternalAddr() {
		t.Errorf("write to follower voter: %v %v, want NOT_CONTROLLER naming %d", err, md, ctlID)
	}

	// DescribeCluster: the leader, three voters, four unfenced brokers.
	dc, err := admin4.DescribeCluster(ctx(t), &sluicev1.DescribeClusterRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if dc.ControllerLeader != ctlID || len(dc.Voters) != 3 || len(dc.Brokers) != 4 || dc.OfflinePartitions != 0 {
		t.Errorf("describe cluster: %v", dc)
	}
	for _, b := range dc.Brokers {
		if b.Fenced || b.Epoch <= 0 {
			t.Errorf("broker %v", b)
		}
	}

	// Controlled shutdown of a broker moves its leaderships away before it
	// stops; the others see it fenced.
	victim := p0.LeaderId
	if victim == ctlID {
		victim = follower
	}
	if err := tc.Stop(victim); err != nil {
		t.Fatal(err)
	}
	tc.SyncMetadata()
	im := tc.Node(ctlID).Metadata().Image()
	if !im.Brokers[victim].Fenced {
		t.Errorf("broker %d not fenced after controlled shutdown", victim)
	}
	for _, name := range im.TopicNames() {
		for i, p := range im.Topics[name].Partitions {
			if p.Leader == victim || slices.Contains(p.ISR, victim) {
				t.Errorf("%s-%d still has broker %d: leader %d isr %v", name, i, victim, p.Leader, p.ISR)
			}
		}
	}
}

func TestClusterBrokerCrashMovesLeadership(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3}, true, nil)
	tc.StartAll()
	admin := sluicev1.NewAdminClient(tc.Dial(1))
	if r, err := admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "t", NumPartitions: 6, ReplicationFactor: 3}}}); err != nil || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %v", err, r)
	}
	tc.WaitTopic("t", 6)
	ctlID := tc.Leader()
	victim := ctlID%3 + 1 // a broker that is not the controller
	before := tc.Node(ctlID).Metadata().Image().Topics["t"].Clone()
	start := time.Now()
	tc.Abort(victim)
	wait.Until(t, 15*time.Second, "partitions led by live brokers", func() bool {
		im := tc.Node(ctlID).Metadata().Image()
		for _, p := range im.Topics["t"].Partitions {
			if p.Leader == victim || p.Leader == controller.NoLeader {
				return false
			}
		}
		return im.Brokers[victim].Fenced
	})
	t.Logf("leadership moved %v after the crash of broker %d", time.Since(start).Round(time.Millisecond), victim)
	after := tc.Node(ctlID).Metadata().Image().Topics["t"]
	for i, p := range after.Partitions {
		if !slices.Equal(p.Replicas, before.Partitions[i].Replicas) {
			t.Errorf("partition %d replicas changed: %v -> %v", i, before.Partitions[i].Replicas, p.Replicas)
		}
		if before.Partitions[i].Leader == victim && p.LeaderEpoch != before.Partitions[i].LeaderEpoch+1 {
			t.Errorf("partition %d leader epoch %d -> %d, want +1", i, before.Partitions[i].LeaderEpoch, p.LeaderEpoch)
		}
	}

	// The crashed broker restarts on the same data dir: new epoch, unfenced.
	oldEpoch := tc.Node(ctlID).Metadata().Image().Brokers[victim].Epoch
	tc.Start(victim)
	tc.WaitReady(victim)
	tc.SyncMetadata()
	b := tc.Node(ctlID).Metadata().Image().Brokers[victim]
	if b.Fenced || b.Epoch <= oldEpoch {
		t.Errorf("restarted broker: %+v, old epoch %d", b, oldEpoch)
	}
}

// TestProducerIDsUniqueAcrossControllerFailover: three brokers each take
// 5,000 producer ids while the active controller crashes; no id is handed
// out twice.
func TestProducerIDsUniqueAcrossControllerFailover(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3}, false, []int32{4, 5, 6})
	tc.StartAll()
	const perBroker = 5000
	got := map[int32][]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	halfway := make(chan struct{}, 3)
	errc := make(chan error, 3)
	for _, id := range []int32{4, 5, 6} {
		node := tc.Node(id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]int64, 0, perBroker)
			for i := 0; i < perBroker; i++ {
				if i == perBroker/2 {
					halfway <- struct{}{}
				}
				c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				pid, err := node.ProducerIDs().Next(c)
				cancel()
				if err != nil {
					errc <- fmt.Errorf("broker %d id %d: %w", id, i, err)
					return
				}
				ids = append(ids, pid)
				if i%500 == 0 {
					time.Sleep(10 * time.Millisecond) // spread the allocations over the failover
				}
			}
			mu.Lock()
			got[id] = ids
			mu.Unlock()
		}()
	}
	for range 3 {
		<-halfway
	}
	killed := tc.Leader()
	tc.Abort(killed)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	seen := map[int64]int32{}
	for id, ids := range got {
		if len(ids) != perBroker {
			t.Fatalf("broker %d got %d ids", id, len(ids))
		}
		for _, pid := range ids {
			if pid < controller.FirstProducerIDBlockStart {
				t.Fatalf("broker %d got id %d below the first block", id, pid)
			}
			if other, dup := seen[pid]; dup {
				t.Fatalf("producer id %d handed out to brokers %d and %d", pid, other, id)
			}
			seen[pid] = id
		}
	}
	newLeader := tc.Leader()
	if newLeader == killed {
		t.Fatalf("leader %d still reported after its crash", killed)
	}
	t.Logf("%d unique ids; controller %d crashed, %d took over; next block start %d", len(seen), killed, newLeader,
		tc.Node(newLeader).Controller().Image().NextProducerIDBlockStart)
}
