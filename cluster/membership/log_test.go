package membership

import (
	"log/slog"
	"testing"
)

// Memberlist's prefixes map to slog levels, its [ERR] to Warn.
func TestMemberlistLogLevels(t *testing.T) {
	logs := &logRecorder{}
	l := newMemberlistLogger(logs.logger(1))
	l.Printf("[DEBUG] memberlist: Stream connection from=127.0.0.1:1")
	l.Printf("[INFO] memberlist: Marking node-3 as failed")
	l.Printf("[WARN] memberlist: Refuting a suspect message")
	l.Printf("[ERR] memberlist: Failed to send gossip")
	l.Printf("[ERR] Failed to shutdown transport: x")
	l.Printf("no prefix")
	want := []logRecord{
		{slog.LevelDebug, "memberlist: Stream connection from=127.0.0.1:1"},
		{slog.LevelInfo, "memberlist: Marking node-3 as failed"},
		{slog.LevelWarn, "memberlist: Refuting a suspect message"},
		{slog.LevelWarn, "memberlist: Failed to send gossip"},
		{slog.LevelWarn, "memberlist: Failed to shutdown transport: x"},
		{slog.LevelInfo, "memberlist: no prefix"},
	}
	if len(logs.recs) != len(want) {
		t.Fatalf("got %v, want %v", logs.recs, want)
	}
	for i, w := range want {
		if logs.recs[i] != w {
			t.Errorf("record %d = %v, want %v", i, logs.recs[i], w)
		}
	}
}
