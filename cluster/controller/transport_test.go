package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/cluster/faultnet/faultnettest"
	"github.com/sluice-io/sluice/internal/wait"
)

// With a dial map, every Raft connection from one voter to another goes
// through the map's target (here a forwarder per directed pair): the
// quorum elects a leader and commits through the forwarders, the leader
// has dialed each follower through its own forwarder, and the Raft
// configuration still holds the real addresses.
func TestQuorumDialsThroughDialMap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	voters := []Voter{{ID: 1, Address: freeAddr(t)}, {ID: 2, Address: freeAddr(t)}, {ID: 3, Address: freeAddr(t)}}
	fwd := map[[2]int32]*faultnettest.Forwarder{} // {from, to} → forwarder
	nodes := map[int32]*Controller{}
	for _, from := range voters {
		dm := faultnet.DialMap{}
		for _, to := range voters {
			if to.ID != from.ID {
				f := faultnettest.New(t, to.Address, false)
				fwd[[2]int32{from.ID, to.ID}] = f
				dm[to.Address] = f.Addr()
			}
		}
		nodes[from.ID] = startController(t, Config{NodeID: from.ID, DataDir: t.TempDir(), RaftBind: from.Address,
			Voters: voters, DialMap: dm, Logger: testLogger()})
	}

	var leader *Controller
	wait.For(t, 15*time.Second, "a sole leader", func() (err error) { leader, err = soleLeader(nodes); return err })
	lid := leader.cfg.NodeID
	epoch, err := leader.RegisterBroker(ctx, RegisterBroker{BrokerID: 7, Address: "127.0.0.1:9407", Rack: "", IncarnationID: "inc-7"})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "broker 7 registered on every node", func() error {
		for id, c := range nodes {
			if b := c.Image().Brokers[7]; b == nil || b.Epoch != epoch {
				return fmt.Errorf("node %d does not have broker 7 at epoch %d", id, epoch)
			}
		}
		return nil
	})
	for _, v := range voters {
		if v.ID == lid {
			continue
		}
		if n := fwd[[2]int32{lid, v.ID}].Conns(); n == 0 {
			t.Errorf("leader %d reached follower %d without its forwarder", lid, v.ID)
		}
	}
	if _, addr := nodes[lid].Leader(); addr != voters[lid-1].Address {
		t.Errorf("leader address %q, want the real address %q", addr, voters[lid-1].Address)
	}
	real := map[raft.ServerID]raft.ServerAddress{}
	for _, v := range voters {
		real[serverID(v.ID)] = raft.ServerAddress(v.Address)
	}
	f := leader.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Configuration().Servers {
		if s.Address != real[s.ID] {
			t.Errorf("raft configuration has voter %s at %s, want the real address %s", s.ID, s.Address, real[s.ID])
		}
	}
}
