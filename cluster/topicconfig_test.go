package cluster

import (
	"strings"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func TestTopicNameRules(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"orders", true},
		{"a.b_c-D9", true},
		{strings.Repeat("x", 249), true},
		{strings.Repeat("x", 250), false},
		{"", false},
		{".", false},
		{"..", false},
		{"has space", false},
		{"slash/name", false},
		{"ünïcode", false},
		{"__consumer_offsets", false},
		{"_single", true},
	}
	for _, c := range cases {
		err := ValidateTopicName(c.name)
		if (err == nil) != c.ok {
			t.Errorf("%q: err=%v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && errs.Code(err) != sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION {
			t.Errorf("%q: code %v", c.name, errs.Code(err))
		}
	}
}

func TestTopicConfigRules(t *testing.T) {
	cases := []struct {
		cfg map[string]string
		rf  int32
		ok  bool
	}{
		{nil, 1, true},
		{map[string]string{"min.insync.replicas": "1"}, 1, true},
		{map[string]string{"min.insync.replicas": "2"}, 1, false},
		{map[string]string{"min.insync.replicas": "0"}, 1, false},
		{map[string]string{"unclean.leader.election.enable": "maybe"}, 1, false},
		{map[string]string{"unclean.leader.election.enable": "true"}, 1, true},
		{map[string]string{"message.timestamp.type": "LogAppendTime"}, 1, true},
		{map[string]string{"message.timestamp.type": "CreateTime"}, 1, true},
		{map[string]string{"message.timestamp.type": "logappendtime"}, 1, false}, // Kafka's values are case-sensitive
		{map[string]string{"message.timestamp.type": "AppendTime"}, 1, false},
		{map[string]string{"segment.bytes": "100"}, 1, false},
		{map[string]string{"cleanup.policy": "compact"}, 1, true},
		{map[string]string{"cleanup.policy": "compact,delete", "delete.retention.ms": "1000", "min.compaction.lag.ms": "0", "min.cleanable.dirty.ratio": "0.1"}, 1, true},
		{map[string]string{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "2"}, 1, false},
		{map[string]string{"cleanup.policy": "archive"}, 1, false},
		{map[string]string{"bogus": "1"}, 1, false},
		{map[string]string{"compression.type": "producer"}, 1, true},
		{map[string]string{"compression.type": "uncompressed"}, 1, true},
		{map[string]string{"compression.type": "zstd"}, 1, true},
		{map[string]string{"compression.type": "none"}, 1, false}, // Kafka's spelling is "uncompressed"
		{map[string]string{"compression.type": "brotli"}, 1, false},
		{map[string]string{"compression.type": "LZ4"}, 1, false},
	}
	for _, c := range cases {
		tc, err := ParseTopicConfig(c.cfg, c.rf)
		if (err == nil) != c.ok {
			t.Errorf("%v: err=%v, want ok=%v", c.cfg, err, c.ok)
			continue
		}
		if err != nil && errs.Code(err) != sluicev1.ErrorCode_INVALID_CONFIG {
			t.Errorf("%v: code %v", c.cfg, errs.Code(err))
		}
		if err == nil && tc.Map()["min.insync.replicas"] == "" {
			t.Errorf("%v: Map lacks min.insync.replicas", c.cfg)
		}
	}
}

// A delete interrupted after the catalog write leaves log directories; the
// next start removes them so a re-created topic starts empty.

// compression.type (Kafka's values): producer keeps each batch's codec,
// anything else names the codec batches are stored in; Map reports it.
func TestCompressionTypeConfig(t *testing.T) {
	for v, want := range map[string]struct {
		codec kafkarecords.Codec
		ok    bool
	}{
		"":             {kafkarecords.None, false},
		"producer":     {kafkarecords.None, false},
		"uncompressed": {kafkarecords.None, true},
		"gzip":         {kafkarecords.Gzip, true},
		"snappy":       {kafkarecords.Snappy, true},
		"lz4":          {kafkarecords.LZ4, true},
		"zstd":         {kafkarecords.Zstd, true},
	} {
		m := map[string]string{}
		if v != "" {
			m["compression.type"] = v
		}
		tc, err := ParseTopicConfig(m, 1)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if c, ok := tc.Codec(); c != want.codec || ok != want.ok {
			t.Errorf("compression.type %q: Codec() = %v, %v; want %v, %v", v, c, ok, want.codec, want.ok)
		}
		if got, w := tc.Map()["compression.type"], map[bool]string{true: v, false: "producer"}[v != ""]; got != w {
			t.Errorf("compression.type %q: Map says %q", v, got)
		}
	}
}
