package api_test

import (
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/cluster/faultnet/faultnettest"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A node's FaultDialMap reaches all three of its inter-node links: two
// combined nodes, each with every other node's gRPC, Raft and gossip
// address mapped to a forwarder of its own (one per direction and link, as
// the chaos harness does), form a cluster, replicate a topic, and every
// kind of link carried traffic through its forwarders.
func TestClusterDialsThroughFaultDialMap(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2}, true, nil)
	type link struct {
		from, to int32
		kind     string
	}
	fwd := map[link]*faultnettest.Forwarder{}
	tc.ConfigureAll(func(_ int32, cfg *node.Config) {
		// The gRPC addresses must be known before the peers start.
		cfg.Listen, cfg.InternalListen = nodetest.FreeAddr(t), nodetest.FreeAddr(t)
	})
	for _, from := range tc.IDs() {
		dm := faultnet.DialMap{}
		for _, to := range tc.IDs() {
			if to == from {
				continue
			}
			peer := tc.Config(to)
			// Forwarders stand before the client listeners too: no node
			// should dial them (decision 41).
			for kind, addr := range map[string]string{"grpc": peer.InternalListen, "client": peer.Listen, "raft": peer.RaftListen, "gossip": peer.GossipListen} {
				f := faultnettest.New(t, addr, kind == "gossip")
				fwd[link{from, to, kind}] = f
				dm[addr] = f.Addr()
			}
		}
		tc.Configure(from, func(cfg *node.Config) { cfg.FaultDialMap = dm })
	}
	tc.StartAll()

	admin := sluicev1.NewAdminClient(tc.Dial(1))
	cr, err := admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "r", NumPartitions: 1, ReplicationFactor: 2}}})
	if err != nil || cr.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create: %v %v", err, cr)
	}
	tc.WaitTopic("r", 1)
	p := tc.partition(t, "r", 0)
	// The leader may not have applied the new topic yet ("becoming the
	// leader", retriable): retry that, nothing else.
	var r *sluicev1.PartitionProduceResponse
	wait.Until(t, 10*time.Second, "the leader takes produce", func() bool {
		r = produceTo(t, tc.Node(p.LeaderId), sluicev1.Acks_ACKS_ALL, "x", 1)[0]
		return r.ErrorCode != sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER
	})
	if r.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("acks=all produce (needs the follower's fetch): %v", r)
	}
	follower := 3 - p.LeaderId
	ctl := tc.Leader()

	// Advertised addresses are the real ones.
	md, err := admin.Metadata(ctx(t), &sluicev1.MetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range md.Brokers {
		if want := tc.Config(b.NodeId).Listen; b.Address != want {
			t.Errorf("broker %d advertised as %s, want the real address %s", b.NodeId, b.Address, want)
		}
	}

	for _, c := range []struct {
		what string
		f    *faultnettest.Forwarder
	}{
		{"gRPC replica fetch, follower to the leader's internal listener", fwd[link{follower, p.LeaderId, "grpc"}]},
		{"Raft, controller leader to follower", fwd[link{ctl, 3 - ctl, "raft"}]},
	} {
		if c.f.Conns() == 0 {
			t.Errorf("%s: no connection through the forwarder", c.what)
		}
	}
	for l, f := range fwd {
		if l.kind == "client" && f.Conns() > 0 {
			t.Errorf("node %d dialled the client listener of node %d %d times; nodes dial the internal one", l.from, l.to, f.Conns())
		}
	}
	wait.Until(t, 10*time.Second, "gossip packets both ways", func() bool {
		return fwd[link{1, 2, "gossip"}].Packets() > 0 && fwd[link{2, 1, "gossip"}].Packets() > 0
	})
}
