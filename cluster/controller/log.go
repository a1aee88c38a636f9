package controller

import (
	"log/slog"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-io/sluice/internal/leveledlog"
)

// Raft's log (hclog text lines "[LEVEL] name: message: key=value") goes
// to the node's slog logger at the level Raft gave it, so that a Raft
// [ERROR] is an error record, not an info record with "[ERROR]" inside.

// raftLevels maps hclog's line prefixes to slog levels.
var raftLevels = []leveledlog.Level{
	{Prefix: "[TRACE]", Level: slog.LevelDebug - 4},
	{Prefix: "[DEBUG]", Level: slog.LevelDebug},
	{Prefix: "[INFO]", Level: slog.LevelInfo},
	{Prefix: "[WARN]", Level: slog.LevelWarn},
	{Prefix: "[ERROR]", Level: slog.LevelError},
}

// raftLogWriter is the Output of Raft's hclog logger and the snapshot
// store's writer: one Write per line.
func raftLogWriter(l *slog.Logger) leveledlog.Writer {
	return leveledlog.Writer{Log: l, Levels: raftLevels}
}

// newRaftLogger returns the hclog logger handed to Raft and its transport.
func newRaftLogger(l *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, DisableTime: true, Output: raftLogWriter(l)})
}
