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
		{"compact not supported", map[string]string{"cleanup.policy": "compact"}, nil, "not supported yet"},
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
	m := c.Map()
	for _, k := range []string{"segment.bytes", "segment.ms", "retention.ms", "retention.bytes", "max.message.bytes", "cleanup.policy", "index.interval.bytes", "flush.messages", "flush.ms"} {
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
