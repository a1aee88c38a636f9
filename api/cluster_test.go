package api_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/cluster/loopback"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// freeAddr returns a loopback address whose TCP and UDP ports were free a
// moment ago (gossip needs both). Raft and gossip addresses of a static
// quorum must be known before the nodes start, so port 0 will not do.
func freeAddr(t *testing.T) string {
	t.Helper()
	addrs, err := loopback.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// testCluster is an in-process cluster on loopback.
type testCluster struct {
	t      *testing.T
	voters []controller.Voter
	seeds  []string
	cfgs   map[int32]api.Config
	nodes  map[int32]*api.Node
}

// newTestCluster prepares controllers (combined controller+broker nodes,
// or controller-only when brokersOnly is non-empty... see roles) and
// brokers. ids in controllers are voters; brokerOnly ids are broker-only.
func newTestCluster(t *testing.T, voters []int32, combined bool, brokerOnly []int32) *testCluster {
	tc := &testCluster{t: t, cfgs: map[int32]api.Config{}, nodes: map[int32]*api.Node{}}
	all := append(slices.Clone(voters), brokerOnly...)
	gossip := map[int32]string{}
	for _, id := range all {
		gossip[id] = freeAddr(t)
		tc.seeds = append(tc.seeds, gossip[id])
	}
	for _, id := range voters {
		tc.voters = append(tc.voters, controller.Voter{ID: id, Address: freeAddr(t)})
	}
	for _, id := range all {
		cfg := api.DefaultConfig()
		cfg.NodeID = id
		cfg.DataDir = t.TempDir()
		// gRPC addresses travel by registration and gossip, so the kernel
		// may choose them: fewer pre-picked ports to collide with other
		// tests. Raft and gossip ports must be known up front.
		cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", ""
		cfg.GossipListen = gossip[id]
		cfg.Join = tc.seeds
		cfg.ControllerVoters = tc.voters
		cfg.ShutdownTimeout = 5 * time.Second
		// The last voters to stop have no quorum left to confirm a
		// controlled shutdown; do not make every test wait long for it.
		cfg.ControlledShutdownTimeout = time.Second
		isVoter := slices.Contains(voters, id)
		switch {
		case isVoter && combined:
			cfg.Roles = []string{api.RoleController, api.RoleBroker}
		case isVoter:
			cfg.Roles = []string{api.RoleController}
		default:
			cfg.Roles = []string{api.RoleBroker}
		}
		if isVoter {
			for _, v := range tc.voters {
				if v.ID == id {
					cfg.RaftListen = v.Address
				}
			}
		} else {
			cfg.RaftListen = ""
		}
		tc.cfgs[id] = cfg
	}
	t.Cleanup(tc.stopAll)
	return tc
}

func (tc *testCluster) start(id int32) *api.Node {
	tc.t.Helper()
	n, err := api.StartNode(tc.cfgs[id])
	if err != nil {
		tc.t.Fatalf("start node %d: %v", id, err)
	}
	tc.nodes[id] = n
	return n
}

func (tc *testCluster) startAll() {
	tc.t.Helper()
	ids := make([]int32, 0, len(tc.cfgs))
	for id := range tc.cfgs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		tc.start(id)
	}
	tc.waitReady(ids...)
}

func (tc *testCluster) waitReady(ids ...int32) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range ids {
		if err := tc.nodes[id].WaitReady(ctx); err != nil {
			tc.t.Fatal(err)
		}
	}
}

func (tc *testCluster) stopAll() {
	var wg sync.WaitGroup
	for id, n := range tc.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = n.Shutdown(ctx)
		}()
		delete(tc.nodes, id)
	}
	wg.Wait()
}

// leader returns the id of the active controller, waiting for one.
func (tc *testCluster) leader() int32 {
	tc.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for id, n := range tc.nodes {
			if c := n.Controller(); c != nil && c.IsLeader() {
				return id
			}
		}
		time.Sleep(20 * time.Millisecond) // poll interval, bounded by the deadline
	}
	tc.t.Fatal("no controller leader within 20s")
	return 0
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond) // poll interval, bounded by the deadline
	}
}

func TestClusterMetadataRoutingAndEpochs(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3}, true, []int32{4})
	tc.startAll()

	// A topic created through the broker-only node (forwarded to the
	// active controller) is visible in every broker's Metadata at once.
	admin4 := sluicev1.NewAdminClient(dial(t, tc.nodes[4].Addr()))
	cr, err := admin4.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "t", NumPartitions: 8, ReplicationFactor: 3}}})
	if err != nil || cr.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create via broker-only node: %v %v", err, cr)
	}
	var first *sluicev1.TopicMetadata
	for id := int32(1); id <= 4; id++ {
		md, err := sluicev1.NewAdminClient(dial(t, tc.nodes[id].Addr())).Metadata(ctx(t), &sluicev1.MetadataRequest{Topics: []string{"t"}})
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
		tn := &testNode{t: t, conn: dial(t, tc.nodes[node].Addr())}
		return tn.produceRaw("t", 0, makeBatch("r", 2, 1000))
	}
	pr := produce(follower)
	if pr.ErrorCode != sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER || pr.CurrentLeader.GetLeaderId() != p0.LeaderId ||
		pr.CurrentLeader.GetAddress() != tc.nodes[p0.LeaderId].Addr() {
		t.Errorf("produce to follower %d: %v, want NOT_LEADER_OR_FOLLOWER naming %d at %s", follower, pr, p0.LeaderId, tc.nodes[p0.LeaderId].Addr())
	}
	if pr := produce(p0.LeaderId); pr.ErrorCode != sluicev1.ErrorCode_NONE || pr.BaseOffset != 0 {
		t.Errorf("produce to leader: %v", pr)
	}

	// Inter-node requests with a stale broker epoch are rejected.
	ctlID := tc.leader()
	ctl := internalv1.NewControllerClient(dial(t, tc.nodes[ctlID].Addr()))
	epoch := tc.nodes[2].BrokerEpoch()
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
	_, err = internalv1.NewControllerClient(dial(t, tc.nodes[other].Addr())).AllocateProducerIds(ctx(t), &internalv1.AllocateProducerIdsRequest{BrokerId: 2, BrokerEpoch: epoch})
	e, md := errs.FromStatus(err)
	if errs.Code(e) != sluicev1.ErrorCode_NOT_CONTROLLER || md["leader_id"] != strconv.Itoa(int(ctlID)) || md["leader_address"] != tc.nodes[ctlID].Addr() {
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
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tc.nodes[victim].Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	delete(tc.nodes, victim)
	im := tc.nodes[ctlID].Metadata().Image()
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
	tc.startAll()
	admin := sluicev1.NewAdminClient(dial(t, tc.nodes[1].Addr()))
	if r, err := admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "t", NumPartitions: 6, ReplicationFactor: 3}}}); err != nil || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %v", err, r)
	}
	ctlID := tc.leader()
	victim := ctlID%3 + 1 // a broker that is not the controller
	before := tc.nodes[ctlID].Metadata().Image().Topics["t"].Clone()
	start := time.Now()
	tc.nodes[victim].Abort()
	delete(tc.nodes, victim)
	eventually(t, 15*time.Second, "partitions led by live brokers", func() bool {
		im := tc.nodes[ctlID].Metadata().Image()
		for _, p := range im.Topics["t"].Partitions {
			if p.Leader == victim || p.Leader == controller.NoLeader {
				return false
			}
		}
		return im.Brokers[victim].Fenced
	})
	t.Logf("leadership moved %v after the crash of broker %d", time.Since(start).Round(time.Millisecond), victim)
	after := tc.nodes[ctlID].Metadata().Image().Topics["t"]
	for i, p := range after.Partitions {
		if !slices.Equal(p.Replicas, before.Partitions[i].Replicas) {
			t.Errorf("partition %d replicas changed: %v -> %v", i, before.Partitions[i].Replicas, p.Replicas)
		}
		if before.Partitions[i].Leader == victim && p.LeaderEpoch != before.Partitions[i].LeaderEpoch+1 {
			t.Errorf("partition %d leader epoch %d -> %d, want +1", i, before.Partitions[i].LeaderEpoch, p.LeaderEpoch)
		}
	}

	// The crashed broker restarts on the same data dir: new epoch, unfenced.
	oldEpoch := tc.nodes[ctlID].Metadata().Image().Brokers[victim].Epoch
	tc.start(victim)
	tc.waitReady(victim)
	b := tc.nodes[ctlID].Metadata().Image().Brokers[victim]
	if b.Fenced || b.Epoch <= oldEpoch {
		t.Errorf("restarted broker: %+v, old epoch %d", b, oldEpoch)
	}
}

// TestProducerIDsUniqueAcrossControllerFailover: three brokers each take
// 5,000 producer ids while the active controller crashes; no id is handed
// out twice.
func TestProducerIDsUniqueAcrossControllerFailover(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3}, false, []int32{4, 5, 6})
	tc.startAll()
	const perBroker = 5000
	got := map[int32][]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	halfway := make(chan struct{}, 3)
	errc := make(chan error, 3)
	for _, id := range []int32{4, 5, 6} {
		node := tc.nodes[id]
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
	killed := tc.leader()
	tc.nodes[killed].Abort()
	delete(tc.nodes, killed)
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
	newLeader := tc.leader()
	if newLeader == killed {
		t.Fatalf("leader %d still reported after its crash", killed)
	}
	t.Logf("%d unique ids; controller %d crashed, %d took over; next block start %d", len(seen), killed, newLeader,
		tc.nodes[newLeader].Controller().Image().NextProducerIDBlockStart)
}

func TestNodeConfigValidate(t *testing.T) {
	base := api.DefaultConfig()
	voters := []controller.Voter{{ID: 1, Address: "127.0.0.1:1"}, {ID: 2, Address: "127.0.0.1:2"}}
	cases := []struct {
		name string
		mod  func(c *api.Config)
		want string // substring of the error; "" = valid
	}{
		{"default", func(c *api.Config) {}, ""},
		{"unknown role", func(c *api.Config) { c.Roles = []string{"router"} }, "unknown role"},
		{"no roles", func(c *api.Config) { c.Roles = nil }, "roles"},
		{"controller not a voter", func(c *api.Config) { c.NodeID = 3; c.ControllerVoters = voters }, "not in the controller voters"},
		{"voter without the role", func(c *api.Config) {
			c.Roles = []string{api.RoleBroker}
			c.ControllerVoters = voters
			c.Join = []string{"127.0.0.1:9"}
		}, "lacks the controller role"},
		{"broker-only without join", func(c *api.Config) { c.NodeID = 3; c.Roles = []string{api.RoleBroker}; c.ControllerVoters = voters }, "--join"},
		{"broker-only without voters", func(c *api.Config) { c.Roles = []string{api.RoleBroker}; c.Join = []string{"127.0.0.1:9"} }, "controller-voters"},
		{"voter listed twice", func(c *api.Config) { c.ControllerVoters = append(voters, voters[0]) }, "twice"},
		{"bad join", func(c *api.Config) { c.Join = []string{"nohost"} }, "join address"},
		{"controller without raft listen", func(c *api.Config) { c.RaftListen = "" }, "raft listen"},
		{"fault injection", func(c *api.Config) { c.FaultInjection = true }, ""},
		{"fault injection without http", func(c *api.Config) { c.FaultInjection, c.HTTPListen = true, "" }, "fault injection needs an http listen address"},
		{"dial map", func(c *api.Config) { c.FaultDialMap = faultnet.DialMap{"127.0.0.1:1": "127.0.0.1:2"} }, ""},
		{"bad dial map", func(c *api.Config) { c.FaultDialMap = faultnet.DialMap{"127.0.0.1:1": "nowhere"} }, "fault dial map: to address for 127.0.0.1:1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if _, err := api.ParseVoters("1@a:1,2@b:2"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"1@a", "x@a:1", "@a:1", "1a:1"} {
		if _, err := api.ParseVoters(bad); err == nil {
			t.Errorf("ParseVoters(%q) accepted", bad)
		}
	}
}
