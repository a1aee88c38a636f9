package main

import (
	"flag"
	"fmt"

	"github.com/sluice-io/sluice/node"
)

// deployFlags are the flags for running under an orchestrator that starts
// every node with the same command line (a Kubernetes StatefulSet), and
// for rehearsing such a deployment on one machine (deploy/; its --hosts
// is a testing flag, testflags.go).
type deployFlags struct {
	nodeIDFromName string
	nodeIDOffset   int
}

// addDeployFlags registers the deployment flags on fs.
func addDeployFlags(fs *flag.FlagSet) *deployFlags {
	d := &deployFlags{}
	fs.StringVar(&d.nodeIDFromName, "node-id-from-name", "", "take the node id from this name's -<ordinal> suffix plus --node-id-offset, overriding --node-id (Kubernetes: the pod name, sluice-2 -> 2+offset)")
	fs.IntVar(&d.nodeIDOffset, "node-id-offset", 1, "added to the ordinal of --node-id-from-name (ids must be >= 1 to lead the controller quorum)")
	return d
}

// apply sets the node id of cfg from the flags;
// where(flag name) says where a bad value came from.
func (d *deployFlags) apply(cfg *node.Config, where func(string) string) error {
	if d.nodeIDFromName != "" {
		id, err := node.NodeIDFromName(d.nodeIDFromName, d.nodeIDOffset)
		if err != nil {
			return fmt.Errorf("%s: %w", where("node-id-from-name"), err)
		}
		cfg.NodeID = id
	}
	return nil
}
