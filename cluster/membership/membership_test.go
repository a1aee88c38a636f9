package membership

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
)

// Generous bounds: the tests assert that things happen, never how fast.
// Measured times are logged with t.Logf.
const (
	convergeTimeout = 10 * time.Second
	detectTimeout   = 10 * time.Second
)

// Nodes that join through a seed all see every member's Meta, and report
// each other's join with the gossip address. A seed list naming the node
// itself is ignored.
func TestNodesJoiningThroughSeedSeeEachOthersMeta(t *testing.T) {
	seed := freeAddr(t)
	n1 := startNode(t, 1, []string{seed}, bindTo(seed))
	if len(n1.seeds) != 0 {
		t.Fatalf("node 1 kept its own address as a seed: %v", n1.seeds)
	}
	if n1.LocalAddr() != seed {
		t.Fatalf("LocalAddr = %s, want %s", n1.LocalAddr(), seed)
	}
	n2 := startNode(t, 2, []string{seed})
	n3 := startNode(t, 3, []string{seed, n1.LocalAddr()})
	nodes := []*testNode{n1, n2, n3}
	allSee(t, convergeTimeout, nodes, metas(n1, n2, n3))

	for _, n := range nodes {
		for _, other := range nodes {
			if other == n {
				continue
			}
			wait.For(t, convergeTimeout, "join event for every other node", func() error {
				_, err := n.events.find(EventJoin, other.meta.NodeID, other.LocalAddr(), time.Time{})
				return err
			})
		}
		if _, err := n.events.find(EventJoin, n.meta.NodeID, "", time.Time{}); err == nil {
			t.Errorf("node %d reported its own join", n.meta.NodeID)
		}
	}
	got, ok := n1.Member(3)
	if !ok || got.GRPCAddress != n3.meta.GRPCAddress || !got.HasRole(RoleBroker) {
		t.Errorf("Member(3) = %+v, %v; want %+v", got, ok, n3.meta)
	}
	if _, ok := n1.Member(99); ok {
		t.Error("Member(99) found a node that does not exist")
	}
}

// A node that stops without Leave (a crash) is declared dead by failure
// detection and reported as EventLeave by every other node.
func TestCrashedNodeReportedAsLeave(t *testing.T) {
	n1 := startNode(t, 1, nil)
	n2 := startNode(t, 2, []string{n1.LocalAddr()})
	n3 := startNode(t, 3, []string{n1.LocalAddr()})
	allSee(t, convergeTimeout, []*testNode{n1, n2, n3}, metas(n1, n2, n3))

	crashed := time.Now()
	if err := n3.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testNode{n1, n2} {
		var ev timedEvent
		wait.For(t, detectTimeout, "leave event for crashed node 3", func() (err error) {
			ev, err = n.events.find(EventLeave, 3, n3.LocalAddr(), crashed)
			return err
		})
		if ev.Meta.GRPCAddress != n3.meta.GRPCAddress {
			t.Errorf("leave event carries %+v, want the last known meta %+v", ev.Meta, n3.meta)
		}
		t.Logf("node %d detected the crash of node 3 after %v", n.meta.NodeID, ev.at.Sub(crashed).Round(time.Millisecond))
	}
	allSee(t, convergeTimeout, []*testNode{n1, n2}, metas(n1, n2))
}

// A node that calls Leave is reported as EventLeave at once; Shutdown after
// Leave works, is idempotent, and later calls say ErrShutdown.
func TestLeavingNodeReportedAsLeave(t *testing.T) {
	n1 := startNode(t, 1, nil)
	n2 := startNode(t, 2, []string{n1.LocalAddr()})
	n3 := startNode(t, 3, []string{n1.LocalAddr()})
	allSee(t, convergeTimeout, []*testNode{n1, n2, n3}, metas(n1, n2, n3))

	left := time.Now()
	if err := n2.Leave(2 * time.Second); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if err := n2.Leave(time.Second); err != nil {
		t.Fatalf("second leave: %v", err)
	}
	for _, n := range []*testNode{n1, n3} {
		var ev timedEvent
		wait.For(t, detectTimeout, "leave event for node 2, which left", func() (err error) {
			ev, err = n.events.find(EventLeave, 2, n2.LocalAddr(), left)
			return err
		})
		t.Logf("node %d saw node 2 leave after %v", n.meta.NodeID, ev.at.Sub(left).Round(time.Millisecond))
	}
	allSee(t, convergeTimeout, []*testNode{n1, n3}, metas(n1, n3))
	if err := n2.UpdateMeta(n2.meta, time.Second); !errors.Is(err, ErrLeft) {
		t.Errorf("UpdateMeta after Leave = %v, want ErrLeft", err)
	}

	for range 2 {
		if err := n2.Shutdown(); err != nil {
			t.Fatalf("shutdown after leave: %v", err)
		}
	}
	if err := n2.Leave(time.Second); !errors.Is(err, ErrShutdown) {
		t.Errorf("Leave after Shutdown = %v, want ErrShutdown", err)
	}
	if err := n2.UpdateMeta(n2.meta, time.Second); !errors.Is(err, ErrShutdown) {
		t.Errorf("UpdateMeta after Shutdown = %v, want ErrShutdown", err)
	}
}

// A crashed node restarted with the same id on a new port is reported as
// EventJoin at the new address, after its old address was declared dead.
func TestRestartedNodeRejoinsAtNewAddress(t *testing.T) {
	n1 := startNode(t, 1, nil)
	n2 := startNode(t, 2, []string{n1.LocalAddr()})
	n3 := startNode(t, 3, []string{n1.LocalAddr()})
	allSee(t, convergeTimeout, []*testNode{n1, n2, n3}, metas(n1, n2, n3))

	crashed := time.Now()
	if err := n3.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testNode{n1, n2} {
		wait.For(t, detectTimeout, "leave event for crashed node 3", func() error {
			_, err := n.events.find(EventLeave, 3, n3.LocalAddr(), crashed)
			return err
		})
	}

	restarted := time.Now()
	n3b := startNode(t, 3, []string{n1.LocalAddr()}, bindTo(freeAddr(t)))
	if n3b.LocalAddr() == n3.LocalAddr() {
		t.Fatalf("restarted node got the old address %s", n3.LocalAddr())
	}
	for _, n := range []*testNode{n1, n2} {
		var ev timedEvent
		wait.For(t, convergeTimeout, "join event for restarted node 3", func() (err error) {
			ev, err = n.events.find(EventJoin, 3, n3b.LocalAddr(), restarted)
			return err
		})
		t.Logf("node %d saw node 3 rejoin at %s after %v", n.meta.NodeID, n3b.LocalAddr(), ev.at.Sub(restarted).Round(time.Millisecond))
	}
	allSee(t, convergeTimeout, []*testNode{n1, n2, n3b}, metas(n1, n2, n3b))
}

// A node restarted on a new address before its old one is declared dead
// first conflicts with its old entry; it keeps rejoining and is taken in
// once the old address is dead.
func TestQuickRestartRejoinsAfterOldAddressIsDead(t *testing.T) {
	n1 := startNode(t, 1, nil)
	n2 := startNode(t, 2, []string{n1.LocalAddr()})
	n3 := startNode(t, 3, []string{n1.LocalAddr()})
	allSee(t, convergeTimeout, []*testNode{n1, n2, n3}, metas(n1, n2, n3))

	crashed := time.Now()
	if err := n3.Shutdown(); err != nil {
		t.Fatal(err)
	}
	n3b := startNode(t, 3, []string{n1.LocalAddr()}, bindTo(freeAddr(t)))
	for _, n := range []*testNode{n1, n2} {
		var ev timedEvent
		wait.For(t, convergeTimeout, "join event for node 3 back", func() (err error) {
			ev, err = n.events.find(EventJoin, 3, n3b.LocalAddr(), crashed)
			return err
		})
		t.Logf("node %d took node 3 back at its new address %v after the crash", n.meta.NodeID, ev.at.Sub(crashed).Round(time.Millisecond))
		// The old address must have been reported gone first: memberlist
		// hands a name to a new address only once the old one is dead.
		leave, err := n.events.find(EventLeave, 3, n3.LocalAddr(), crashed)
		if err != nil || leave.at.After(ev.at) {
			t.Errorf("node %d: old address not reported as leave before the rejoin: %v", n.meta.NodeID, err)
		}
	}
	allSee(t, convergeTimeout, []*testNode{n1, n2, n3b}, metas(n1, n2, n3b))
}

// Two live nodes with the same node id are a configuration error, logged
// at Error through memberlist's ConflictDelegate.
func TestNodeIDConflictLoggedAsError(t *testing.T) {
	n1 := startNode(t, 1, nil)
	dup := startNode(t, 1, []string{n1.LocalAddr()})
	wait.For(t, convergeTimeout, "node id conflict logged at Error", func() error {
		if len(n1.logs.find(slog.LevelError, "node id conflict"))+len(dup.logs.find(slog.LevelError, "node id conflict")) == 0 {
			return errors.New("no conflict logged at Error")
		}
		return nil
	})
}

// A node whose seeds are not up yet keeps retrying and joins once one is.
func TestJoinRetriedUntilSeedIsUp(t *testing.T) {
	seed := freeAddr(t)
	n2 := startNode(t, 2, []string{seed})
	if err := sameMembers(n2.Membership, metas(n2)); err != nil {
		t.Fatal(err)
	}
	if len(n2.logs.find(slog.LevelWarn, "no seed reachable")) == 0 {
		t.Error("failed first join was not logged at Warn")
	}
	up := time.Now()
	n1 := startNode(t, 1, nil, bindTo(seed))
	allSee(t, convergeTimeout, []*testNode{n1, n2}, metas(n1, n2))
	t.Logf("joined %v after the seed came up", time.Since(up).Round(time.Millisecond))
}

// Two clusters linked only by a seed that was down when its node started
// (so that node is not alone, and does not retry) merge through the
// periodic rejoin.
func TestPeriodicRejoinMergesClusters(t *testing.T) {
	seed := freeAddr(t)
	rejoin := func(c *Config) { c.RejoinInterval = 300 * time.Millisecond }
	a1 := startNode(t, 1, []string{seed}, rejoin)
	a2 := startNode(t, 2, []string{a1.LocalAddr()}, rejoin)
	allSee(t, convergeTimeout, []*testNode{a1, a2}, metas(a1, a2))

	b3 := startNode(t, 3, nil, bindTo(seed))
	b4 := startNode(t, 4, []string{b3.LocalAddr()})
	allSee(t, convergeTimeout, []*testNode{a1, a2, b3, b4}, metas(a1, a2, b3, b4))
}

// UpdateMeta gossips the new Meta, reported as EventUpdate; the node id
// cannot change and the size limit holds.
func TestUpdateMetaReportedAsUpdate(t *testing.T) {
	n1 := startNode(t, 1, nil)
	n2 := startNode(t, 2, []string{n1.LocalAddr()})
	allSee(t, convergeTimeout, []*testNode{n1, n2}, metas(n1, n2))

	updated := n2.meta
	updated.Roles = []string{RoleBroker, RoleController}
	updated.RaftAddress = "127.0.0.1:29002"
	since := time.Now()
	if err := n2.UpdateMeta(updated, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	var ev timedEvent
	wait.For(t, convergeTimeout, "update event for node 2", func() (err error) {
		ev, err = n1.events.find(EventUpdate, 2, n2.LocalAddr(), since)
		return err
	})
	if !ev.Meta.HasRole(RoleController) || ev.Meta.RaftAddress != updated.RaftAddress {
		t.Errorf("update event carries %+v, want %+v", ev.Meta, updated)
	}
	if got, _ := n1.Member(2); !got.HasRole(RoleController) {
		t.Errorf("Member(2) = %+v after update", got)
	}

	other := updated
	other.NodeID = 7
	if err := n2.UpdateMeta(other, time.Second); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("UpdateMeta with another id = %v, want ErrInvalidConfig", err)
	}
	big := updated
	big.Rack = strings.Repeat("r", 600)
	if err := n2.UpdateMeta(big, time.Second); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("UpdateMeta too large = %v, want ErrInvalidConfig", err)
	}
}

// Start refuses a config it cannot run with, and starts nothing.
func TestStartRejectsInvalidConfig(t *testing.T) {
	badKeys := newKeyFileText(t, "# no key yet\n")
	missingKeys := filepath.Join(t.TempDir(), "missing.keys")
	tests := []struct {
		name string
		edit func(*Config)
	}{
		{"negative node id", func(c *Config) { c.Meta.NodeID = -1 }},
		{"bind address without port", func(c *Config) { c.BindAddr = "127.0.0.1" }},
		{"bind address garbage", func(c *Config) { c.BindAddr = "not an address" }},
		{"bind host name", func(c *Config) { c.BindAddr = "localhost:0" }},
		{"bind port out of range", func(c *Config) { c.BindAddr = "127.0.0.1:65536" }},
		{"bind IPv6 unspecified without advertise", func(c *Config) { c.BindAddr = "[::]:0" }},
		{"advertise unspecified", func(c *Config) { c.AdvertiseAddr = "0.0.0.0:7946" }},
		{"advertise host name", func(c *Config) { c.AdvertiseAddr = "sluice-1:7946" }},
		{"meta too large", func(c *Config) { c.Meta.Rack = strings.Repeat("r", 600) }},
		{"seed without port", func(c *Config) { c.Join = []string{"127.0.0.1"} }},
		{"probe timeout above interval", func(c *Config) { c.ProbeInterval, c.ProbeTimeout = time.Second, 2*time.Second }},
		{"negative gossip interval", func(c *Config) { c.GossipInterval = -time.Second }},
		{"negative suspicion multiplier", func(c *Config) { c.SuspicionMult = -1 }},
		{"key file without a key", func(c *Config) { c.KeyFile = badKeys }},
		{"key file missing", func(c *Config) { c.KeyFile = missingKeys }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Meta: testMeta(1), BindAddr: "127.0.0.1:0", Logger: (&logRecorder{}).logger(1)}
			tt.edit(&cfg)
			m, err := Start(cfg)
			if !errors.Is(err, ErrInvalidConfig) {
				if m != nil {
					_ = m.Shutdown()
				}
				t.Fatalf("Start = %v, want ErrInvalidConfig", err)
			}
			if m != nil {
				t.Fatal("Start returned a Membership with an error")
			}
		})
	}
}

// Validate fills in the documented defaults and accepts an empty host.
func TestValidateFillsDefaults(t *testing.T) {
	cfg := Config{Meta: testMeta(1), BindAddr: ":7946"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.BindAddr != "0.0.0.0:7946" || cfg.ProbeInterval != DefaultProbeInterval ||
		cfg.ProbeTimeout != DefaultProbeTimeout || cfg.GossipInterval != DefaultGossipInterval ||
		cfg.SuspicionMult != DefaultSuspicionMult || cfg.JoinRetryInterval != DefaultJoinRetryInterval ||
		cfg.RejoinInterval != DefaultRejoinInterval || cfg.KeyReloadInterval != DefaultKeyReloadInterval || cfg.Logger == nil {
		t.Errorf("defaults not filled: %+v", cfg)
	}
}

// Members and Member read this package's copy of the view, never
// memberlist's nodes, which memberlist rewrites in place
// (hashicorp/memberlist#306); -race checks it while metas change.
func TestMembersReadableDuringMetaUpdates(t *testing.T) {
	n1 := startNode(t, 1, nil)
	n2 := startNode(t, 2, []string{n1.LocalAddr()})
	allSee(t, convergeTimeout, []*testNode{n1, n2}, metas(n1, n2))

	done := make(chan error, 1)
	last := n2.meta
	go func() {
		for i := range 6 {
			last.Rack = fmt.Sprintf("rack-%d", i)
			if err := n2.UpdateMeta(last, 2*time.Second); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for reading := true; reading; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			reading = false
		default:
			n1.Members()
			n1.Member(2)
		}
	}
	wait.For(t, convergeTimeout, "node 1 sees node 2's new rack", func() error {
		if got, _ := n1.Member(2); got.Rack != last.Rack {
			return fmt.Errorf("node 1 sees rack %q, want %q", got.Rack, last.Rack)
		}
		return nil
	})
}
