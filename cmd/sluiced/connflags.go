package main

import (
	"flag"

	"github.com/sluice-io/sluice/node"
)

// limitFlag is one connection-limit flag and the setting it fills.
type limitFlag struct {
	v          *int
	name, help string
}

// connectionLimitFlags are the listeners' connection-limit flags, filling
// cfg.
func connectionLimitFlags(cfg *node.Config) []limitFlag {
	return []limitFlag{
		{&cfg.MaxConnections, "max-connections", "client gRPC listener: most connections open at once; more are reset as they arrive (0: a quarter of the open-files limit, half on a node without a Kafka listener)"},
		{&cfg.MaxConnectionsPerIP, "max-connections-per-ip", "client gRPC listener: most connections open at once from one IP address (0: a tenth of --max-connections)"},
		{&cfg.InternalMaxConnections, "internal-max-connections", "internal gRPC listener: most connections open at once (0: a tenth of the open-files limit)"},
		{&cfg.InternalMaxConnectionsPerIP, "internal-max-connections-per-ip", "internal gRPC listener: most connections open at once from one IP address (0: --internal-max-connections)"},
		{&cfg.HTTPMaxConnections, "http-max-connections", "HTTP listener: most connections open at once (0: a hundredth of the open-files limit, within 16..1024)"},
		{&cfg.HTTPMaxConnectionsPerIP, "http-max-connections-per-ip", "HTTP listener: most connections open at once from one IP address (0: a quarter of --http-max-connections, at least 8)"},
		{&cfg.KafkaMaxConnections, "kafka-max-connections", "Kafka listener: most connections open at once; more are reset as they arrive (max.connections; 0: a quarter of the open-files limit)"},
		{&cfg.KafkaMaxConnectionsPerIP, "kafka-max-connections-per-ip", "Kafka listener: most connections open at once from one IP address (max.connections.per.ip; 0: a tenth of --kafka-max-connections)"},
	}
}

// addConnectionFlags defines the listeners' connection settings (issue
// 29; node.Config's MaxConnections and the following fields). The limits'
// defaults come from this process's open-files limit (node.DefaultConfig
// derives them), so -h and --print-config show the values in force here.
func addConnectionFlags(fs *flag.FlagSet, cfg *node.Config) {
	for _, f := range connectionLimitFlags(cfg) {
		fs.IntVar(f.v, f.name, *f.v, f.help)
	}
	fs.DurationVar(&cfg.ConnectionSetupTimeout, "connection-setup-timeout", cfg.ConnectionSetupTimeout, "a gRPC connection that has not finished its HTTP/2 handshake in this time (one that sends nothing included), or a Kafka connection whose first request has not arrived, is closed")
	fs.DurationVar(&cfg.FailedAuthenticationDelay, "connection-failed-authentication-delay", cfg.FailedAuthenticationDelay, "a refused SCRAM exchange is answered, and a Kafka connection whose SASL authentication failed is closed, this long after the failure (connection.failed.authentication.delay.ms; negative: at once)")
	fs.DurationVar(&cfg.ConnectionsMaxIdle, "connections-max-idle", cfg.ConnectionsMaxIdle, "a gRPC connection with no call in progress, an HTTP connection between requests, or a Kafka connection sending no request, idle this long is closed (connections.max.idle.ms; negative: never)")
}

// deriveUnsetConnectionLimits zeroes the connection limits no source set
// (set reports whether the config file, the environment or a flag did),
// so that cfg.WithDefaults derives them from the settings in force rather
// than node.DefaultConfig's: the client gRPC listener's total depends on
// whether the node has a Kafka listener (--kafka-listen, --roles), and a
// limit per IP on its listener's total (--max-connections 100 alone gives
// 10 per IP, as -h says).
func deriveUnsetConnectionLimits(cfg *node.Config, set func(name string) bool) {
	for _, f := range connectionLimitFlags(cfg) {
		if !set(f.name) {
			*f.v = 0
		}
	}
}
