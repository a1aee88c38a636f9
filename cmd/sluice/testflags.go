//go:build sluicetest

package main

import (
	"fmt"

	"github.com/sluice-io/sluice/node"
)

// testMachinery is whether this build has the testing-only settings.
const testMachinery = true

// testMachineryFlags are the CLI's testing-only settings, which exist
// only in a sluice built with the sluicetest tag (docs/design.md decision
// 52), as sluiced's: SLUICE_HOSTS, with which the StatefulSet rehearsal
// (deploy/) runs a Kubernetes Job's sluice commands against pods whose
// names resolve only in its table, as the cluster's DNS would resolve
// them for the Job's pod. An environment variable only, no flag: the
// Job's arguments stay as the manifests give them (and `cert create-node`
// has a --hosts of its own). Documented in docs/operations.md with
// sluiced's --hosts.
type testMachineryFlags struct {
	hosts string
}

// fromEnv reads SLUICE_HOSTS: name=ip,...
func (t *testMachineryFlags) fromEnv(lookup func(string) (string, bool)) {
	if v, ok := lookup("SLUICE_HOSTS"); ok {
		t.hosts = v
	}
}

// apply installs the hosts table, if any, in this process's resolver:
// these names resolve to these IPs, and no other name through DNS.
func (t *testMachineryFlags) apply() error {
	h, err := node.ParseHosts(t.hosts)
	if err != nil {
		return fmt.Errorf("SLUICE_HOSTS: %w", err)
	}
	if len(h) > 0 {
		h.Install()
	}
	return nil
}
