//go:build !sluicetest

package main

import (
	"flag"

	"github.com/sluice-io/sluice/node"
)

// testMachineryFlags: the sluiced that ships has no testing-only flag
// (docs/design.md decision 52); testflags.go has them under the
// sluicetest tag.
type testMachineryFlags struct{}

// addTestMachineryFlags registers nothing.
func addTestMachineryFlags(*flag.FlagSet, *node.Config) *testMachineryFlags {
	return &testMachineryFlags{}
}

// apply changes nothing.
func (*testMachineryFlags) apply(*node.Config, func(string) string) error { return nil }
