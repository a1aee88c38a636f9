package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Only the leader, once it has applied every committed record, may hand a
// broker its image (CaughtUpLeader): a follower's, or a restarted voter's,
// image may be an old prefix. The chaos harness found a restarted broker
// that took such an image from its own restarting voter, followed a
// partition leader of epoch 1 (the current epoch was 10) and truncated
// records that another replica kept: the replicas diverged.
func TestOnlyACaughtUpLeaderServesTheImage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	voters := []Voter{{ID: 1, Address: freeAddr(t)}, {ID: 2, Address: freeAddr(t)}, {ID: 3, Address: freeAddr(t)}}
	cfgs := map[int32]Config{}
	nodes := map[int32]*Controller{}
	for _, v := range voters {
		cfgs[v.ID] = Config{NodeID: v.ID, DataDir: t.TempDir(), RaftBind: v.Address, Voters: voters, Logger: testLogger()}
	}
	for _, v := range voters {
		nodes[v.ID] = startController(t, cfgs[v.ID])
	}
	var leader *Controller
	wait.For(t, 15*time.Second, "a sole leader", func() (err error) { leader, err = soleLeader(nodes); return err })
	wait.For(t, 10*time.Second, "leader caught up", func() error {
		if !leader.CaughtUpLeader() {
			return fmt.Errorf("leader %d not caught up yet", leader.cfg.NodeID)
		}
		return nil
	})
	for id, c := range nodes {
		if c == leader {
			continue
		}
		if c.CaughtUpLeader() {
			t.Fatalf("follower %d reports itself a caught-up leader", id)
		}
		err := c.NotCaughtUpError()
		if errs.Code(err) != sluicev1.ErrorCode_NOT_CONTROLLER || !strings.Contains(errs.Message(err), fmt.Sprintf("leader is node %d", leader.cfg.NodeID)) {
			t.Fatalf("follower %d: %v, want NOT_CONTROLLER naming node %d", id, err, leader.cfg.NodeID)
		}
	}

	// Commit records, then crash the leader: the next leader is caught up
	// only once its image holds all of them.
	if _, err := leader.RegisterBroker(ctx, RegisterBroker{BrokerID: 1, Address: "127.0.0.1:9401", Rack: "", IncarnationID: "inc-1"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, _, err := leader.AllocateProducerIDs(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	committed, nextBlock := leader.Image().Offset, leader.Image().NextProducerIDBlockStart
	old := leader.cfg.NodeID
	if err := leader.shutdown(false); err != nil {
		t.Fatal(err)
	}
	delete(nodes, old)
	var next *Controller
	wait.For(t, 15*time.Second, "a caught-up leader among the survivors", func() (err error) {
		for _, c := range nodes {
			if c.CaughtUpLeader() {
				next = c
				return nil
			}
		}
		return fmt.Errorf("no caught-up leader yet")
	})
	if got := next.Image().Offset; got < committed {
		t.Fatalf("node %d caught up at image offset %d, below the %d committed before the crash", next.cfg.NodeID, got, committed)
	}
	if got := next.Image().NextProducerIDBlockStart; got != nextBlock {
		t.Fatalf("caught-up leader's next producer-id block starts at %d, want %d", got, nextBlock)
	}

	// The old leader restarts as a follower: never a source of images.
	restarted := startController(t, cfgs[old])
	nodes[old] = restarted
	if restarted.CaughtUpLeader() {
		t.Fatal("a voter that just restarted reports itself a caught-up leader")
	}
	wait.For(t, 15*time.Second, "restarted voter sees the new leader", func() error {
		if got, _ := restarted.Leader(); got != next.cfg.NodeID {
			return fmt.Errorf("restarted voter sees leader %d", got)
		}
		return nil
	})
	if restarted.CaughtUpLeader() {
		t.Fatal("a follower reports itself a caught-up leader")
	}
}
