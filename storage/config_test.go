package storage

import (
	"strings"
	"testing"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		in      map[string]string
		check   func(Config) bool
		errWord string // non-empty: INVALID_CONFIG naming this
	}{
		{"defaults", nil, func(c Config) bool { return c == DefaultConfig() }, ""},
		{"segment.bytes", map[string]string{"segment.bytes": "1024"}, func(c Config) bool { return c.SegmentBytes == 1024 }, ""},
		{"segment.bytes too small", map[string]string{"segment.bytes": "1023"}, nil, "segment.bytes"},
		{"retention unlimited", map[string]string{"retention.ms": "-1", "retention.bytes": "-1"}, func(c Config) bool { return c.RetentionMs == -1 && c.RetentionBytes == -1 }, ""},
		{"retention.ms not a number", map[string]string{"retention.ms": "soon"}, nil, "retention.ms"},
		{"max.message.bytes", map[string]string{"max.message.bytes": "2000"}, func(c Config) bool { return c.MaxMessageBytes == 2000 }, ""},
		{"flush", map[string]string{"flush.messages": "1", "flush.ms": "10"}, func(c Config) bool { return c.FlushMessages == 1 && c.FlushMs == 10 }, ""},
		{"index.interval.bytes", map[string]string{"index.interval.bytes": "100"}, func(c Config) bool { return c.IndexIntervalBytes == 100 }, ""},
		{"compact", map[string]string{"cleanup.policy": "compact"}, func(c Config) bool { return c.Compacted() && !c.Deletes() }, ""},
		{"compact,delete", map[string]string{"cleanup.policy": "compact,delete"}, func(c Config) bool { return c.Compacted() && c.Deletes() }, ""},
		{"delete,compact is compact,delete", map[string]string{"cleanup.policy": "delete,compact"}, func(c Config) bool { return c.CleanupPolicy == PolicyCompactDelete }, ""},
		{"delete only", nil, func(c Config) bool { return !c.Compacted() && c.Deletes() }, ""},
		{"unknown policy", map[string]string{"cleanup.policy": "shred"}, nil, "cleanup.policy"},
		{"compaction configs", map[string]string{"delete.retention.ms": "5", "min.compaction.lag.ms": "7", "min.cleanable.dirty.ratio": "0.25"}, func(c Config) bool {
			return c.DeleteRetentionMs == 5 && c.MinCompactionLagMs == 7 && c.MinCleanableDirtyRatio == 0.25
		}, ""},
		{"delete.retention.ms negative", map[string]string{"delete.retention.ms": "-1"}, nil, "delete.retention.ms"},
		{"min.compaction.lag.ms negative", map[string]string{"min.compaction.lag.ms": "-1"}, nil, "min.compaction.lag.ms"},
		{"dirty ratio above 1", map[string]string{"min.cleanable.dirty.ratio": "1.5"}, nil, "min.cleanable.dirty.ratio"},
		{"dirty ratio not a number", map[string]string{"min.cleanable.dirty.ratio": "NaN"}, nil, "min.cleanable.dirty.ratio"},
		{"unknown key", map[string]string{"segment.byte": "1"}, nil, "segment.byte"},
		{"keys of other layers ignored", map[string]string{"min.insync.replicas": "2", "unclean.leader.election.enable": "false", "message.timestamp.type": "LogAppendTime"}, func(c Config) bool { return c == DefaultConfig() }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(tc.in)
			if tc.errWord != "" {
				wantCode(t, err, sluicev1.ErrorCode_INVALID_CONFIG)
				if !strings.Contains(err.Error(), tc.errWord) {
					t.Fatalf("error %q does not mention %q", err, tc.errWord)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("config %+v", c)
			}
		})
	}
}

func TestConfigMapRoundTrips(t *testing.T) {
	c := DefaultConfig()
	c.SegmentBytes, c.RetentionMs = 4096, -1
	c.CleanupPolicy, c.MinCleanableDirtyRatio = PolicyCompactDelete, 0.1
	m := c.Map()
	for _, k := range []string{"segment.bytes", "segment.ms", "retention.ms", "retention.bytes", "max.message.bytes", "cleanup.policy", "index.interval.bytes", "flush.messages", "flush.ms", "delete.retention.ms", "min.compaction.lag.ms", "min.cleanable.dirty.ratio"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("Map lacks %s", k)
		}
	}
	back, err := ParseConfig(m)
	if err != nil || back != c {
		t.Fatalf("ParseConfig(Map()) = %+v, %v; want %+v", back, err, c)
	}
	if DefaultConfig().SegmentBytes != 1073741824 || DefaultConfig().MaxMessageBytes != 1048588 {
		t.Fatal("defaults differ from Kafka's")
	}
}
