package main

import (
	"log/slog"

	"github.com/sluice-io/sluice/internal/fdlimit"
	"github.com/sluice-io/sluice/node"
)

// Open-files limit (issue 29). sluiced does not raise RLIMIT_NOFILE
// itself: the Go runtime already does, for every Go program on Unix
// (Go 1.19 and later; syscall's init sets the soft limit to the hard limit
// less one, or on macOS to kern.maxfilesperproc, when it is lower, and
// restores the original soft limit in the processes it starts). Raising
// it again here would change nothing. What the process gets is the
// deployment's to choose (ulimit -Hn, systemd's LimitNOFILE, the container
// runtime's default); logOpenFilesLimit says what it got at start.

// logOpenFilesLimit logs the soft and hard open-files limits in force and
// the listeners' connection limits (derived from the soft limit unless
// set), and warns when the connection limits together leave less than a
// quarter of the descriptors to the partition logs, Raft and gossip.
func logOpenFilesLimit(logger *slog.Logger, cfg node.Config) {
	soft, hard, err := fdlimit.Get()
	if err != nil {
		logger.Info("open files limit unknown on this platform", "err", err)
		return
	}
	conns := cfg.ConnectionLimitsTotal()
	args := []any{"soft", soft, "hard", hard,
		"max_connections", cfg.MaxConnections, "internal_max_connections", cfg.InternalMaxConnections,
		"http_max_connections", cfg.HTTPMaxConnections}
	if cfg.KafkaListenerEnabled() {
		args = append(args, "kafka_max_connections", cfg.KafkaMaxConnections)
	}
	if n, ok := fdlimit.Open(); ok {
		args = append(args, "open", n)
	}
	logger.Info("open files limit (RLIMIT_NOFILE; the Go runtime raises the soft limit to the hard one at start)", args...)
	if uint64(conns) > soft-soft/4 {
		logger.Warn("the listeners' connection limits add up to more than three quarters of the open-files limit: a flood of connections can leave the partition logs without file descriptors (raise the hard limit, or lower --max-connections and --kafka-max-connections)",
			"connection_limits", conns, "soft", soft)
	}
}
