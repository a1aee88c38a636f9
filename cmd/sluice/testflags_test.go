package main

import (
	"strings"
	"testing"
)

// SLUICE_HOSTS is a testing-only setting (testflags.go): a sluice built
// with the sluicetest tag reads it, and refuses a malformed one naming
// it; the sluice that ships ignores it.
func TestHostsSettingIsTestingOnly(t *testing.T) {
	lookup := func(k string) (string, bool) {
		if k == "SLUICE_HOSTS" {
			return "no-ip-here", true
		}
		return "", false
	}
	g, err := newGlobals(nil, lookup)
	if err != nil {
		t.Fatal(err)
	}
	err = g.validate()
	if testMachinery {
		if err == nil || !strings.Contains(err.Error(), "SLUICE_HOSTS") {
			t.Errorf("a malformed SLUICE_HOSTS in a sluicetest build: %v, want an error naming it", err)
		}
	} else if err != nil {
		t.Errorf("the shipped sluice read SLUICE_HOSTS: %v", err)
	}
}
