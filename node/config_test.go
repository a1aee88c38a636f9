package node_test

import (
	"strings"
	"testing"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/node"
)

func TestNodeConfigValidate(t *testing.T) {
	base := node.DefaultConfig()
	voters := []controller.Voter{{ID: 1, Address: "127.0.0.1:1"}, {ID: 2, Address: "127.0.0.1:2"}}
	goodKeys, badKeys := writeGossipKeyFile(t, t.TempDir(), 16), writeGossipKeyFile(t, t.TempDir(), 17)
	cases := []struct {
		name string
		mod  func(c *node.Config)
		want string // substring of the error; "" = valid
	}{
		{"default", func(c *node.Config) {}, ""},
		{"unknown role", func(c *node.Config) { c.Roles = []string{"router"} }, "unknown role"},
		{"no roles", func(c *node.Config) { c.Roles = nil }, "roles"},
		{"controller not a voter", func(c *node.Config) { c.NodeID = 3; c.ControllerVoters = voters }, "not in the controller voters"},
		{"voter without the role", func(c *node.Config) {
			c.Roles = []string{node.RoleBroker}
			c.ControllerVoters = voters
			c.Join = []string{"127.0.0.1:9"}
		}, "lacks the controller role"},
		{"broker-only without join", func(c *node.Config) { c.NodeID = 3; c.Roles = []string{node.RoleBroker}; c.ControllerVoters = voters }, "--join"},
		{"broker-only without voters", func(c *node.Config) { c.Roles = []string{node.RoleBroker}; c.Join = []string{"127.0.0.1:9"} }, "controller-voters"},
		{"voter listed twice", func(c *node.Config) { c.ControllerVoters = append(voters, voters[0]) }, "twice"},
		{"bad join", func(c *node.Config) { c.Join = []string{"nohost"} }, "join address"},
		{"controller without raft listen", func(c *node.Config) { c.RaftListen = "" }, "raft listen"},
		{"bad internal listen", func(c *node.Config) { c.InternalListen = "9404" }, "internal listen address"},
		{"bad internal advertise", func(c *node.Config) { c.InternalAdvertise = "nohost" }, "internal advertise address"},
		{"internal listen on the client port", func(c *node.Config) { c.InternalListen = c.Listen }, "listener of their own"},
		{"no internal listen (kernel-picked loopback port)", func(c *node.Config) { c.InternalListen = "" }, ""},
		{"bad kafka listen", func(c *node.Config) { c.KafkaListen = "9092" }, "kafka listen address"},
		{"bad kafka advertise", func(c *node.Config) { c.KafkaAdvertise = "nohost" }, "kafka advertise address"},
		{"kafka listen on the client port", func(c *node.Config) { c.KafkaListen = c.Listen }, "is the listen address"},
		{"kafka listen on the internal port", func(c *node.Config) { c.KafkaListen = c.InternalListen }, "is the internal listen address"},
		{"kafka listen on the http port", func(c *node.Config) { c.KafkaListen = c.HTTPListen }, "is the http listen address"},
		{"kafka listen on a kernel-picked port like the others", func(c *node.Config) { c.Listen, c.KafkaListen = "127.0.0.1:0", "127.0.0.1:0" }, ""},
		{"no kafka listener", func(c *node.Config) { c.KafkaListen = "" }, ""},
		{"kafka advertise without a kafka listener", func(c *node.Config) { c.KafkaListen, c.KafkaAdvertise = "", "n1:9092" }, "no Kafka listener"},
		{"log cleaner backoff", func(c *node.Config) { c.LogCleanerBackoff = 0 }, "log cleaner backoff"},
		{"fault injection without http", func(c *node.Config) { c.FaultInjection, c.HTTPListen = true, "" }, "fault injection needs an http listen address"},
		{"dial map", func(c *node.Config) { c.FaultDialMap = faultnet.DialMap{"127.0.0.1:1": "127.0.0.1:2"} }, ""},
		{"gossip key file", func(c *node.Config) { c.GossipKeyFile = goodKeys }, ""},
		{"gossip key file of a bad key", func(c *node.Config) { c.GossipKeyFile = badKeys }, "gossip key file: " + badKeys + ": line 2: key of 17 bytes"},
		{"gossip key file missing", func(c *node.Config) { c.GossipKeyFile = badKeys + ".missing" }, "gossip key file: open " + badKeys + ".missing"},
		{"bad dial map", func(c *node.Config) { c.FaultDialMap = faultnet.DialMap{"127.0.0.1:1": "nowhere"} }, "fault dial map: to address for 127.0.0.1:1"},
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
	if _, err := node.ParseVoters("1@a:1,2@b:2"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"1@a", "x@a:1", "@a:1", "1a:1"} {
		if _, err := node.ParseVoters(bad); err == nil {
			t.Errorf("ParseVoters(%q) accepted", bad)
		}
	}
}
