package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-io/sluice/internal/fdlimit"
	"github.com/sluice-io/sluice/node"
)

// The Kafka listener's connection limits (Kafka's max.connections and
// max.connections.per.ip) come from --kafka-max-connections and
// --kafka-max-connections-per-ip, SLUICE_KAFKA_MAX_CONNECTIONS... or the
// config file like every flag. Unset, they and the client gRPC
// listener's total are derived from the open-files limit and the
// settings in force: a quarter of it each with a Kafka listener, the
// client listener half of it on a node without one (--kafka-listen "",
// or controller only), and a limit per IP a tenth of its listener's
// total in force. Negative limits are refused.
func TestKafkaConnectionLimitFlags(t *testing.T) {
	nofile := fdlimit.Limit()
	quarter, half := max(nofile/4, 1), max(nofile/2, 1)
	dir := t.TempDir()
	type limits struct{ client, clientIP, kafka, kafkaIP int }
	of := func(c node.Config) limits {
		return limits{c.MaxConnections, c.MaxConnectionsPerIP, c.KafkaMaxConnections, c.KafkaMaxConnectionsPerIP}
	}
	file := filepath.Join(t.TempDir(), "sluiced.yaml")
	if err := os.WriteFile(file, []byte("kafka-max-connections: 120\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want limits
	}{
		{"defaults", nil, nil, limits{quarter, max(quarter/10, 1), quarter, max(quarter/10, 1)}},
		{"flags", []string{"--kafka-max-connections", "300", "--kafka-max-connections-per-ip", "7"}, nil,
			limits{quarter, max(quarter/10, 1), 300, 7}},
		{"env, per IP derived from the total set", nil, map[string]string{"SLUICE_KAFKA_MAX_CONNECTIONS": "400"},
			limits{quarter, max(quarter/10, 1), 400, 40}},
		{"config file", []string{"--config", file}, nil, limits{quarter, max(quarter/10, 1), 120, 12}},
		{"client total set, its limit per IP derived from it", []string{"--max-connections", "100"}, nil,
			limits{100, 10, quarter, max(quarter/10, 1)}},
		{"no Kafka listener", []string{"--kafka-listen", ""}, nil, limits{half, max(half/10, 1), quarter, max(quarter/10, 1)}},
		{"controller only", []string{"--roles", "controller"}, nil, limits{half, max(half/10, 1), quarter, max(quarter/10, 1)}},
		{"no Kafka listener, client total set", []string{"--kafka-listen", "", "--max-connections", "50", "--max-connections-per-ip", "50"}, nil,
			limits{50, 50, quarter, max(quarter/10, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := configure(append(tc.args, "--data-dir", dir), envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if got := of(cfg); got != tc.want {
				t.Errorf("limits %+v, want %+v (open-files limit %d)", got, tc.want, nofile)
			}
		})
	}
	for _, bad := range [][]string{{"--kafka-max-connections", "-1"}, {"--kafka-max-connections-per-ip", "-5"}} {
		if _, err := configure(append(bad, "--data-dir", dir), noEnv); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
