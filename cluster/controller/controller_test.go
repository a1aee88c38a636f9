package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/cluster/loopback"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	addrs, err := loopback.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

func testLogger() *slog.Logger {
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startController starts a controller and shuts it down when the test ends.
func startController(t *testing.T, cfg Config) *Controller {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Shutdown(); err != nil {
			t.Errorf("shutdown node %d: %v", cfg.NodeID, err)
		}
	})
	return c
}

// soleLeader returns the one node among nodes that leads and that every
// other running node follows.
func soleLeader(nodes map[int32]*Controller) (*Controller, error) {
	var leader *Controller
	var id int32
	for nid, c := range nodes {
		if c.IsLeader() {
			if leader != nil {
				return nil, fmt.Errorf("nodes %d and %d both lead", id, nid)
			}
			leader, id = c, nid
		}
	}
	if leader == nil {
		return nil, fmt.Errorf("no leader")
	}
	for nid, c := range nodes {
		if got, _ := c.Leader(); got != id {
			return nil, fmt.Errorf("node %d sees leader %d, want %d", nid, got, id)
		}
	}
	return leader, nil
}

func TestThreeNodeQuorum(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	voters := []Voter{{ID: 1, Address: freeAddr(t)}, {ID: 2, Address: freeAddr(t)}, {ID: 3, Address: freeAddr(t)}}
	cfgs := map[int32]Config{}
	nodes := map[int32]*Controller{}
	for _, v := range voters {
		cfgs[v.ID] = Config{NodeID: v.ID, DataDir: t.TempDir(), RaftBind: v.Address, Voters: voters, Logger: testLogger()}
	}
	begin := time.Now()
	for _, v := range voters {
		nodes[v.ID] = startController(t, cfgs[v.ID])
	}

	// A leader is elected and known to all.
	var leader *Controller
	wait.For(t, 15*time.Second, "a sole leader", func() (err error) { leader, err = soleLeader(nodes); return err })
	leaderID := leader.cfg.NodeID
	t.Logf("initial election: node %d leads after %v", leaderID, time.Since(begin))

	// Brokers register fenced and unfence with their epoch.
	for _, v := range voters {
		epoch, err := leader.RegisterBroker(ctx, RegisterBroker{BrokerID: v.ID, Address: fmt.Sprintf("127.0.0.1:%d", 9400+v.ID), Rack: "", IncarnationID: fmt.Sprintf("inc-%d", v.ID)})
		if err != nil {
			t.Fatal(err)
		}
		if err := leader.UnfenceBroker(ctx, v.ID, epoch); err != nil {
			t.Fatal(err)
		}
	}

	var follower *Controller
	for id, c := range nodes {
		if id != leaderID {
			follower = c
			break
		}
	}
	sub := follower.Subscribe(0)

	// CreateTopic on the leader is visible in all three images.
	created, err := leader.CreateTopic(ctx, "orders", 6, 3, map[string]string{"retention.ms": "60000"})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "topic orders on every node", func() error {
		want := leader.Image().Topics["orders"]
		for id, c := range nodes {
			got := c.Image().Topics["orders"]
			if got == nil || !reflect.DeepEqual(got, want) {
				return fmt.Errorf("node %d topic = %+v, want %+v", id, got, want)
			}
			if got.ID != created.TopicID || len(got.Partitions) != 6 {
				return fmt.Errorf("node %d topic = %+v", id, got)
			}
		}
		return nil
	})
	if _, err := leader.CreateTopic(ctx, "orders", 1, 1, nil); errs.Code(err) != sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS {
		t.Errorf("second CreateTopic err = %v", err)
	}
	if _, err := leader.CreateTopic(ctx, "wide", 1, 4, nil); errs.Code(err) != sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR {
		t.Errorf("rf 4 on 3 brokers err = %v", err)
	}

	// The follower's metadata stream carried the CreateTopic.
	wait.For(t, 5*time.Second, "CreateTopic on the follower's metadata stream", func() error {
		sctx, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer scancel()
		u, err := sub.Next(sctx)
		if err != nil {
			return err
		}
		for _, d := range u.Deltas {
			if ct, ok := d.Record.(CreateTopic); ok && ct.Name == "orders" {
				return nil
			}
		}
		return fmt.Errorf("no CreateTopic yet (at %d)", u.Offset)
	})

	// A fresh cluster's leader finalizes transaction.version=2.
	wait.For(t, 5*time.Second, "transaction version 2 on every node", func() error {
		for id, c := range nodes {
			if lvl, ok := c.Image().Features[FeatureTransactionVersion]; !ok || lvl != 2 {
				return fmt.Errorf("node %d features = %v", id, c.Image().Features)
			}
		}
		return nil
	})

	// A follower refuses proposals and names the leader.
	_, err = follower.Propose(ctx, DeleteTopic{Name: "orders"})
	if errs.Code(err) != sluicev1.ErrorCode_NOT_CONTROLLER {
		t.Fatalf("follower Propose err = %v, want NOT_CONTROLLER", err)
	}
	leaderAddr := cfgs[leaderID].RaftAdvertise
	if want := fmt.Sprintf("leader is node %d at %s", leaderID, leaderAddr); !strings.Contains(errs.Message(err), want) {
		t.Errorf("NOT_CONTROLLER message %q does not contain %q", errs.Message(err), want)
	}

	type block struct{ start, end int64 }
	var blocks []block
	allocate := func(c *Controller, broker int32) {
		t.Helper()
		s, e, err := c.AllocateProducerIDs(ctx, broker)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if s < b.end && b.start < e {
				t.Fatalf("block [%d,%d) overlaps [%d,%d)", s, e, b.start, b.end)
			}
		}
		if s <= 0 || e-s != ProducerIDBlockSize {
			t.Fatalf("block [%d,%d)", s, e)
		}
		blocks = append(blocks, block{s, e})
	}
	allocate(leader, 1)
	allocate(leader, 2)

	// The leader dies (no hand-off); the other two elect a new leader.
	stopped := time.Now()
	if err := leader.shutdown(false); err != nil {
		t.Fatal(err)
	}
	delete(nodes, leaderID)
	var newLeader *Controller
	wait.For(t, 15*time.Second, "a new sole leader after the crash", func() (err error) { newLeader, err = soleLeader(nodes); return err })
	t.Logf("after leader %d crashed: node %d leads after %v", leaderID, newLeader.cfg.NodeID, time.Since(stopped))

	allocate(newLeader, 3)
	allocate(newLeader, 1)

	// The old node restarts on its data dir and catches up.
	restarted := startController(t, cfgs[leaderID])
	nodes[leaderID] = restarted
	wait.For(t, 15*time.Second, "restarted node caught up with the leader", func() error {
		want, got := newLeader.Image(), restarted.Image()
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("restarted node at offset %d, leader at %d", got.Offset, want.Offset)
		}
		return nil
	})
	if got := restarted.Image().NextProducerIDBlockStart; got != blocks[len(blocks)-1].end {
		t.Errorf("restarted next block start = %d, want %d", got, blocks[len(blocks)-1].end)
	}
	if _, err := soleLeader(nodes); err != nil {
		t.Fatal(err)
	}

	// A graceful Shutdown of the leader hands leadership off.
	stopped = time.Now()
	nl := newLeader.cfg.NodeID
	if err := newLeader.Shutdown(); err != nil {
		t.Fatal(err)
	}
	delete(nodes, nl)
	var third *Controller
	wait.For(t, 15*time.Second, "a new sole leader after the graceful shutdown", func() (err error) { third, err = soleLeader(nodes); return err })
	t.Logf("after leader %d shut down gracefully: node %d leads after %v", nl, third.cfg.NodeID, time.Since(stopped))
	allocate(third, 2)
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"single node defaults", Config{NodeID: 1, DataDir: "d", RaftBind: "127.0.0.1:1"}, true},
		{"no data dir", Config{NodeID: 1, RaftBind: "127.0.0.1:1"}, false},
		{"no bind", Config{NodeID: 1, DataDir: "d"}, false},
		{"self not a voter", Config{NodeID: 1, DataDir: "d", RaftBind: "a:1", Voters: []Voter{{2, "b:1"}}}, false},
		{"duplicate voter", Config{NodeID: 1, DataDir: "d", RaftBind: "a:1", Voters: []Voter{{1, "a:1"}, {1, "b:1"}}}, false},
		{"dial map", Config{NodeID: 1, DataDir: "d", RaftBind: "127.0.0.1:1", DialMap: faultnet.DialMap{"127.0.0.1:2": "127.0.0.1:3"}}, true},
		{"bad dial map", Config{NodeID: 1, DataDir: "d", RaftBind: "127.0.0.1:1", DialMap: faultnet.DialMap{"127.0.0.1:2": "nowhere"}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			err := cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (cfg.ElectionTimeout != DefaultElectionTimeout || len(cfg.Voters) != 1 || cfg.RaftAdvertise != cfg.RaftBind) {
				t.Errorf("defaults not filled: %+v", cfg)
			}
		})
	}
}

// A single-node controller (the embedded default) elects itself and fences
// a broker's leaderships away.
func TestSingleNodeFenceMovesLeadership(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := startController(t, Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: freeAddr(t), Logger: testLogger()})
	wait.For(t, 10*time.Second, "single voter leads", func() error {
		if !c.IsLeader() {
			return fmt.Errorf("not leader yet")
		}
		return nil
	})
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		e, err := c.RegisterBroker(ctx, RegisterBroker{BrokerID: id, Address: fmt.Sprintf("h%d:1", id), Rack: "", IncarnationID: "i"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.UnfenceBroker(ctx, id, e); err != nil {
			t.Fatal(err)
		}
		epochs[id] = e
	}
	if _, err := c.CreateTopic(ctx, "t", 3, 3, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.FenceBroker(ctx, 1, epochs[1]-1); errs.Code(err) != sluicev1.ErrorCode_STALE_BROKER_EPOCH {
		t.Fatalf("stale fence err = %v", err)
	}
	if err := c.FenceBroker(ctx, 1, epochs[1]); err != nil {
		t.Fatal(err)
	}
	for i, p := range c.Image().Topics["t"].Partitions {
		if p.Leader == 1 || p.Leader == NoLeader || len(p.ISR) != 2 {
			t.Errorf("partition %d after fencing broker 1: %+v", i, p)
		}
	}
	s1, _, err := c.AllocateProducerIDs(ctx, 2)
	if err != nil || s1 != FirstProducerIDBlockStart {
		t.Fatalf("first block start %d, err %v", s1, err)
	}
}

// Fencing a broker that leads thousands of partitions moves them all
// (issue 31: the re-elections went one Raft round trip each and stopped
// at the session loop's ApplyTimeout, leaving hundreds led by a dead
// broker); and if the re-election after a fence never ran or stopped part
// way, the session loop's safety net finishes it.
func TestFenceReelectsEveryPartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, epochs := startWithBrokers(t, ctx, Config{SessionCheckInterval: 20 * time.Millisecond})
	if _, err := c.CreateTopic(ctx, "big", 3000, 3, nil); err != nil {
		t.Fatal(err)
	}
	involving := func(id int32) (led, inISR int) {
		for _, p := range c.Image().Topics["big"].Partitions {
			if p.Leader == id {
				led++
			}
			if slices.Contains(p.ISR, id) {
				inISR++
			}
		}
		return led, inISR
	}
	if led, _ := involving(1); led < 900 {
		t.Fatalf("broker 1 leads %d partitions, want about a third of 3000", led)
	}
	if err := c.FenceBroker(ctx, 1, epochs[1]); err != nil {
		t.Fatal(err)
	}
	if led, inISR := involving(1); led != 0 || inISR != 0 {
		t.Fatalf("after fencing broker 1 it still leads %d partitions and is in %d ISRs", led, inISR)
	}

	// The fence record alone (as if the re-election after it had
	// stopped): the session loop moves the leaderships.
	if _, err := c.Propose(ctx, FenceBroker{BrokerID: 2, BrokerEpoch: epochs[2]}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the session loop re-elects broker 2's partitions", func() error {
		if led, inISR := involving(2); led != 0 || inISR != 0 {
			return fmt.Errorf("broker 2 still leads %d partitions and is in %d ISRs", led, inISR)
		}
		return nil
	})
}

// Concurrent AlterPartition calls are applied in batches, each caller
// getting its own answer: a broker back from a restart rejoins every ISR
// at once (issue 31), and two changes of one partition computed from the
// same epochs cannot both apply.
func TestAlterPartitionBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, epochs := startWithBrokers(t, ctx, Config{})
	if _, err := c.CreateTopic(ctx, "t", 600, 3, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.FenceBroker(ctx, 3, epochs[3]); err != nil {
		t.Fatal(err)
	}
	if err := c.UnfenceBroker(ctx, 3, epochs[3]); err != nil {
		t.Fatal(err)
	}
	parts := c.Image().Topics["t"].Partitions
	var wg sync.WaitGroup
	errc := make(chan error, 2*len(parts))
	dup := 0 // one partition gets two requests from the same view
	for i, p := range parts {
		req := AlterPartitionRequest{BrokerID: p.Leader, BrokerEpoch: epochs[p.Leader], Topic: "t", Partition: int32(i),
			LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, NewISR: append(slices.Clone(p.ISR), 3)}
		n := 1
		if i == dup {
			n = 2
		}
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.AlterPartition(ctx, req)
				errc <- err
			}()
		}
	}
	wg.Wait()
	close(errc)
	ok, stale := 0, 0
	for err := range errc {
		switch errs.Code(err) {
		case sluicev1.ErrorCode_NONE:
			ok++
		case sluicev1.ErrorCode_INVALID_UPDATE_VERSION:
			stale++
		default:
			t.Errorf("AlterPartition: %v", err)
		}
	}
	if ok != len(parts) || stale != 1 {
		t.Fatalf("%d applied and %d refused as stale, want %d and 1", ok, stale, len(parts))
	}
	for i, p := range c.Image().Topics["t"].Partitions {
		if !slices.Contains(p.ISR, 3) {
			t.Fatalf("partition %d: ISR %v without broker 3", i, p.ISR)
		}
	}
}

// startWithBrokers starts a single-voter controller (cfg's node, data
// dir, Raft address and logger filled in; sessions that do not expire)
// with brokers 1, 2 and 3 registered and unfenced, and returns their
// epochs.
func startWithBrokers(t *testing.T, ctx context.Context, cfg Config) (*Controller, map[int32]int64) {
	t.Helper()
	cfg.NodeID, cfg.DataDir, cfg.RaftBind, cfg.Logger, cfg.SessionTimeout = 1, t.TempDir(), freeAddr(t), testLogger(), time.Hour
	c := startController(t, cfg)
	wait.For(t, 10*time.Second, "single voter leads", func() error {
		if !c.IsLeader() {
			return fmt.Errorf("not leader yet")
		}
		return nil
	})
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		e, err := c.RegisterBroker(ctx, RegisterBroker{BrokerID: id, Address: fmt.Sprintf("h%d:1", id), IncarnationID: "i"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.UnfenceBroker(ctx, id, e); err != nil {
			t.Fatal(err)
		}
		epochs[id] = e
	}
	return c, epochs
}
