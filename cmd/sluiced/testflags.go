//go:build sluicetest

package main

import (
	"flag"
	"fmt"

	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/node"
)

// testMachineryFlags are the testing-only flags, which exist only in a
// sluiced built with the sluicetest tag (docs/design.md decision 52): the
// one the tests, the chaos harness and the StatefulSet rehearsal run
// (go build -tags sluicetest ./cmd/sluiced). They are documented in
// docs/operations.md, not in README's table of the shipped flags.
type testMachineryFlags struct {
	dialMap string
	hosts   string
}

// addTestMachineryFlags registers the testing-only flags on fs; the
// settings that need no parsing go straight into cfg.
func addTestMachineryFlags(fs *flag.FlagSet, cfg *node.Config) *testMachineryFlags {
	t := &testMachineryFlags{}
	fs.Float64Var(&cfg.FaultDropProduceResponses, "fault-drop-produce-responses", 0, "testing only: drop this fraction (0..1) of produce responses after processing them")
	fs.BoolVar(&cfg.FaultInjection, "fault-injection", false, "testing only: serve /debug/faults on --http-listen, per-RPC fault rules applied to this node's gRPC calls")
	fs.StringVar(&t.dialMap, "fault-dial-map", "", "testing only: from=to,... host:port pairs; outgoing inter-node connections (gRPC, Raft, gossip) to from dial to instead")
	fs.StringVar(&t.hosts, "hosts", "", "testing only: name=ip,... resolve these host names to these IPs in this process, and no other name through DNS")
	return t
}

// apply sets the dial map and the hosts table of cfg from the flags;
// where(flag name) says where a bad value came from.
func (t *testMachineryFlags) apply(cfg *node.Config, where func(string) string) error {
	var err error
	if cfg.FaultDialMap, err = faultnet.ParseDialMap(t.dialMap); err != nil {
		return fmt.Errorf("%s: %w", where("fault-dial-map"), err)
	}
	if cfg.Hosts, err = node.ParseHosts(t.hosts); err != nil {
		return fmt.Errorf("%s: %w", where("hosts"), err)
	}
	return nil
}
