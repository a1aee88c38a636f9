package cluster

import (
	"strings"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
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
		{map[string]string{"message.timestamp.type": "LogAppendTime"}, 1, false},
		{map[string]string{"segment.bytes": "100"}, 1, false},
		{map[string]string{"cleanup.policy": "compact"}, 1, true},
		{map[string]string{"cleanup.policy": "compact,delete", "delete.retention.ms": "1000", "min.compaction.lag.ms": "0", "min.cleanable.dirty.ratio": "0.1"}, 1, true},
		{map[string]string{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "2"}, 1, false},
		{map[string]string{"cleanup.policy": "archive"}, 1, false},
		{map[string]string{"bogus": "1"}, 1, false},
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
