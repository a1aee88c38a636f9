package main

import (
	"flag"

	"github.com/sluice-io/sluice/node"
)

// addConnectionFlags defines the listeners' connection settings (issue
// 29; node.Config's MaxConnections and the following fields). The limits'
// defaults come from this process's open-files limit (node.DefaultConfig
// derives them), so -h and --print-config show the values in force here.
func addConnectionFlags(fs *flag.FlagSet, cfg *node.Config) {
	for _, f := range []struct {
		v          *int
		name, help string
	}{
		{&cfg.MaxConnections, "max-connections", "client gRPC listener: most connections open at once; more are reset as they arrive (0: half of the open-files limit)"},
		{&cfg.MaxConnectionsPerIP, "max-connections-per-ip", "client gRPC listener: most connections open at once from one IP address (0: a tenth of --max-connections)"},
		{&cfg.InternalMaxConnections, "internal-max-connections", "internal gRPC listener: most connections open at once (0: a tenth of the open-files limit)"},
		{&cfg.InternalMaxConnectionsPerIP, "internal-max-connections-per-ip", "internal gRPC listener: most connections open at once from one IP address (0: --internal-max-connections)"},
		{&cfg.HTTPMaxConnections, "http-max-connections", "HTTP listener: most connections open at once (0: a hundredth of the open-files limit, within 16..1024)"},
		{&cfg.HTTPMaxConnectionsPerIP, "http-max-connections-per-ip", "HTTP listener: most connections open at once from one IP address (0: a quarter of --http-max-connections, at least 8)"},
	} {
		fs.IntVar(f.v, f.name, *f.v, f.help)
	}
	fs.DurationVar(&cfg.ConnectionSetupTimeout, "connection-setup-timeout", cfg.ConnectionSetupTimeout, "a gRPC connection that has not finished its HTTP/2 handshake in this time (one that sends nothing included) is closed; it bounds a Kafka connection's TLS handshake too")
	fs.DurationVar(&cfg.ConnectionsMaxIdle, "connections-max-idle", cfg.ConnectionsMaxIdle, "a gRPC connection with no call in progress, or an HTTP connection between requests, idle this long is closed (connections.max.idle.ms; negative: never)")
}
