package controller

import (
	"context"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Raft's log (hclog text lines "[LEVEL] name: message: key=value") goes
// to the node's slog logger at the level Raft gave it, so that a Raft
// [ERROR] is an error record, not an info record with "[ERROR]" inside.

// raftLevels maps hclog's line prefixes to slog levels.
var raftLevels = []struct {
	prefix string
	level  slog.Level
}{
	{"[TRACE]", slog.LevelDebug - 4},
	{"[DEBUG]", slog.LevelDebug},
	{"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn},
	{"[ERROR]", slog.LevelError},
}

// raftLogWriter is the Output of Raft's hclog logger (and the snapshot
// store's writer): one Write per line.
type raftLogWriter struct {
	log *slog.Logger
}

// Write logs one line at its level. It never fails.
func (w raftLogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, l := range raftLevels {
		if rest, ok := strings.CutPrefix(line, l.prefix); ok {
			level, line = l.level, strings.TrimSpace(rest)
			break
		}
	}
	w.log.Log(context.Background(), level, line)
	return len(p), nil
}

// newRaftLogger returns the hclog logger handed to Raft and its transport.
func newRaftLogger(l *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, DisableTime: true, Output: raftLogWriter{log: l}})
}
