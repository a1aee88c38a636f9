package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A config file sets flags by name; SLUICE_* variables win over it and
// flags over both; --print-config names each value's source.
func TestConfigFileLayersAndPrintConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluiced.yaml")
	data := "node-id: 4\ndata-dir: " + dir + "\nrack: from-file\nbroker-session-timeout: 3s\njoin:\n  - 127.0.0.1:9502\n  - 127.0.0.1:9512\nlog-level: warn\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	env := envOf(map[string]string{"SLUICE_RACK": "from-env", "SLUICE_LOG_LEVEL": "error"})
	cfg, err := configure([]string{"--config", path, "--log-level", "debug"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeID != 4 || cfg.DataDir != dir || cfg.Rack != "from-env" || cfg.SessionTimeout != 3*time.Second ||
		strings.Join(cfg.Join, ",") != "127.0.0.1:9502,127.0.0.1:9512" {
		t.Errorf("config %+v", cfg)
	}

	var out bytes.Buffer
	configOut = &out
	defer func() { configOut = os.Stdout }()
	if _, err := configure([]string{"--config=" + path, "--log-level", "debug", "--print-config"}, env); !errors.Is(err, errPrintedConfig) {
		t.Fatalf("--print-config: %v", err)
	}
	for _, want := range []string{`node-id: "4" # file`, `rack: "from-env" # env`, `log-level: "debug" # flag`,
		`listen: "127.0.0.1:9400" # default`, `join: "127.0.0.1:9502,127.0.0.1:9512" # file`} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("--print-config lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "print-config:") || strings.Contains(out.String(), "\nconfig:") {
		t.Errorf("--print-config shows itself:\n%s", out.String())
	}
}

// Bad files are refused with the file and the key named.
func TestConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{"no-such-flag: 1\n", `"no-such-flag" is not a setting`},
		{"broker-session-timeout: soon\n", "broker-session-timeout"},
		{"rack: {a: 1}\n", "rack"},
		{": : :\n", "sluiced.yaml"},
	} {
		path := filepath.Join(dir, "sluiced.yaml")
		if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := configure([]string{"--data-dir", dir}, envOf(map[string]string{"SLUICE_CONFIG": path}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error mentioning %q", tc.body, err, tc.want)
		}
	}
	if _, err := configure([]string{"--config", filepath.Join(dir, "missing.yaml")}, noEnv); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("missing file: %v", err)
	}
}
