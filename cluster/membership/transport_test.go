package membership

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/cluster/faultnet/faultnettest"
	"github.com/sluice-io/sluice/internal/wait"
)

// withDialMap sets the dial map.
func withDialMap(m faultnet.DialMap) func(*Config) {
	return func(c *Config) { c.DialMap = m }
}

// With dial maps, two nodes gossip only through forwarders, one per
// direction: the seed is dialed through the map (TCP push/pull), probes
// and acks travel through it (UDP), both nodes see each other at their
// real addresses, and with the forwarders gone each declares the other
// dead although both run. Node 1 binds port 0, so the bound port is found
// and advertised with a transport of our own too.
func TestGossipDialsThroughDialMap(t *testing.T) {
	addr2 := freeAddr(t)
	fwd12 := faultnettest.New(t, addr2, true)
	n1 := startNode(t, 1, nil, withDialMap(faultnet.DialMap{addr2: fwd12.Addr()}))
	addr1 := n1.LocalAddr()
	if addr1 == "127.0.0.1:0" {
		t.Fatalf("node 1 reports port 0")
	}
	fwd21 := faultnettest.New(t, addr1, true)
	n2 := startNode(t, 2, []string{addr1}, bindTo(addr2), withDialMap(faultnet.DialMap{addr1: fwd21.Addr()}))

	allSee(t, convergeTimeout, []*testNode{n1, n2}, metas(n1, n2))
	for _, c := range []struct {
		n     *testNode
		other int32
		addr  string
	}{{n1, 2, addr2}, {n2, 1, addr1}} {
		wait.For(t, convergeTimeout, "join event through the dial map", func() error {
			_, err := c.n.events.find(EventJoin, c.other, c.addr, time.Time{})
			return err
		})
	}
	if n := fwd21.Conns(); n == 0 {
		t.Error("node 2 joined its seed without the forwarder")
	}
	wait.For(t, convergeTimeout, "UDP packets forwarded both ways", func() error {
		if p12, p21 := fwd12.Packets(), fwd21.Packets(); p12 == 0 || p21 == 0 {
			return fmt.Errorf("UDP packets forwarded: 1→2 %d, 2→1 %d", p12, p21)
		}
		return nil
	})

	// The forwarders are the only route between the two.
	cut := time.Now()
	fwd12.Close()
	fwd21.Close()
	for _, c := range []struct {
		n     *testNode
		other int32
	}{{n1, 2}, {n2, 1}} {
		wait.For(t, detectTimeout, "leave event after the link is cut", func() error {
			_, err := c.n.events.find(EventLeave, c.other, "", cut)
			return err
		})
	}
}

// A bad dial map is refused before anything is bound.
func TestConfigRejectsBadDialMap(t *testing.T) {
	cfg := Config{Meta: testMeta(1), BindAddr: "127.0.0.1:0", DialMap: faultnet.DialMap{"127.0.0.1:1": "no-port"}}
	if err := cfg.Validate(); err == nil {
		t.Fatal("bad dial map accepted")
	}
}
