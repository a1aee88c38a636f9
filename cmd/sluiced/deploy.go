package main

import (
	"flag"
	"fmt"

	"github.com/sluice-io/sluice/node"
)

// deployFlags are the flags for running under an orchestrator that starts
// every node with the same command line (a Kubernetes StatefulSet), and
// for rehearsing such a deployment on one machine (deploy/).
type deployFlags struct {
	nodeIDFromName string
	nodeIDOffset   int
	hosts          string
}

// addDeployFlags registers the deployment flags on fs.
func addDeployFlags(fs *flag.FlagSet) *deployFlags {
	d := &deployFlags{}
	fs.StringVar(&d.nodeIDFromName, "node-id-from-name", "", "take the node id from this name's -<ordinal> suffix plus --node-id-offset, overriding --node-id (Kubernetes: the pod name, sluice-2 -> 2+offset)")
	fs.IntVar(&d.nodeIDOffset, "node-id-offset", 1, "added to the ordinal of --node-id-from-name (ids must be >= 1 to lead the controller quorum)")
	fs.StringVar(&d.hosts, "hosts", "", "testing only: name=ip,... resolve these host names to these IPs in this process, and no other name through DNS")
	return d
}

// apply sets the node id and the hosts table of cfg from the flags;
// where(flag name) says where a bad value came from.
func (d *deployFlags) apply(cfg *node.Config, where func(string) string) error {
	if d.nodeIDFromName != "" {
		id, err := node.NodeIDFromName(d.nodeIDFromName, d.nodeIDOffset)
		if err != nil {
			return fmt.Errorf("%s: %w", where("node-id-from-name"), err)
		}
		cfg.NodeID = id
	}
	hosts, err := node.ParseHosts(d.hosts)
	if err != nil {
		return fmt.Errorf("%s: %w", where("hosts"), err)
	}
	cfg.Hosts = hosts
	return nil
}
