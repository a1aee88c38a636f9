//go:build !sluicetest

package main

// testMachinery is whether this build has the testing-only settings.
const testMachinery = false

// testMachineryFlags: the sluice that ships has no testing-only setting
// (docs/design.md decision 52; SLUICE_HOSTS is ignored); testflags.go has
// them under the sluicetest tag.
type testMachineryFlags struct{}

// fromEnv reads nothing.
func (*testMachineryFlags) fromEnv(func(string) (string, bool)) {}

// apply changes nothing.
func (*testMachineryFlags) apply() error { return nil }
