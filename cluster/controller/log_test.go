package controller

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Raft's [ERROR] and [WARN] lines are slog errors and warnings, not info.
func TestRaftLogLevels(t *testing.T) {
	var buf bytes.Buffer
	l := newRaftLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.Error("failed to contact", "server-id", 2)
	l.Warn("heartbeat timeout reached")
	l.Info("entering leader state")
	l.Debug("not shown: hclog level is info")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"level=ERROR", "level=WARN", "level=INFO"} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], "raft: ") {
			t.Errorf("line %d %q, want %s and the raft: prefix", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[0], "server-id=2") {
		t.Errorf("key=value lost: %q", lines[0])
	}
}
