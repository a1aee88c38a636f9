//go:build sluicetest

package main

import (
	"strings"
	"testing"
)

func init() {
	testMachineryRefused = []refusedValue{
		{"fault-injection", "maybe", `"maybe" is not true or false`},
		{"fault-dial-map", "127.0.0.1:1", "want from=to"},
		{"hosts", "a=b", `hosts item "a=b"`},
	}
}

// The testing-only flags of a sluicetest build: a bad dial map or hosts
// table is refused naming the flag, fault injection needs the HTTP
// listener, and --hosts fills the hosts table.
func TestTestMachineryFlags(t *testing.T) {
	for _, bad := range []struct{ value, want string }{
		{"127.0.0.1:9501", "want from=to"},
		{"127.0.0.1:9501=127.0.0.1", "missing port"},
		{"127.0.0.1:9501=127.0.0.1:1,127.0.0.1:9501=127.0.0.1:2", "mapped twice"},
	} {
		_, err := configure([]string{"--fault-dial-map", bad.value, "--data-dir", t.TempDir()}, noEnv)
		if err == nil || !strings.Contains(err.Error(), "--fault-dial-map") || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--fault-dial-map %q: got %v, want an error naming the flag and %q", bad.value, err, bad.want)
		}
	}
	if _, err := configure([]string{"--fault-injection", "--http-listen", "", "--data-dir", t.TempDir()}, noEnv); err == nil || !strings.Contains(err.Error(), "http listen") {
		t.Errorf("--fault-injection without an HTTP listener: got %v", err)
	}
	cfg, err := configure([]string{"--data-dir", t.TempDir(), "--hosts", "sluice-2.h=127.0.0.13"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Hosts.String() != "sluice-2.h=127.0.0.13" {
		t.Errorf("hosts %q, want sluice-2.h=127.0.0.13", cfg.Hosts)
	}
	if _, err := configure([]string{"--hosts", "a=b", "--data-dir", t.TempDir()}, noEnv); err == nil || !strings.Contains(err.Error(), "--hosts") {
		t.Errorf("--hosts a=b: %v, want an error naming --hosts", err)
	}
}
