package cluster

import (
	"maps"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Every topic config has a description: a config added to
// TopicConfig.Map without one would be described as an undocumented
// string.
func TestTopicConfigDefsCoverEveryConfig(t *testing.T) {
	defs := defaultTopicConfig()
	for name := range defs {
		if d, ok := topicConfigDefs[name]; !ok || d.Doc == "" {
			t.Errorf("topic config %q has no description in topicConfigDefs", name)
		}
	}
	for name := range topicConfigDefs {
		if _, ok := defs[name]; !ok {
			t.Errorf("topicConfigDefs describes %q, which is not a topic config", name)
		}
	}
}

// Kafka's IncrementalAlterConfigs rules (ConfigAdminManager), on a topic
// of replication factor 2 that sets retention.ms and min.insync.replicas.
func TestAlterTopicConfigsRules(t *testing.T) {
	v := func(s string) *string { return &s }
	cases := []struct {
		name string
		ops  []ConfigOp
		want map[string]string
		code sluicev1.ErrorCode
	}{
		{name: "set", ops: []ConfigOp{{"segment.ms", ConfigSet, v("60000")}, {"retention.ms", ConfigSet, v("5")}},
			want: map[string]string{"retention.ms": "5", "min.insync.replicas": "2", "segment.ms": "60000"}},
		{name: "delete, a config set or not", ops: []ConfigOp{{"retention.ms", ConfigDelete, nil}, {"segment.ms", ConfigDelete, v("ignored")}},
			want: map[string]string{"min.insync.replicas": "2"}},
		{name: "append to the default", ops: []ConfigOp{{"cleanup.policy", ConfigAppend, v("compact")}},
			want: map[string]string{"retention.ms": "1000", "min.insync.replicas": "2", "cleanup.policy": "delete,compact"}},
		{name: "append what is there already", ops: []ConfigOp{{"cleanup.policy", ConfigAppend, v("delete")}},
			want: map[string]string{"retention.ms": "1000", "min.insync.replicas": "2", "cleanup.policy": "delete"}},
		{name: "set a list", ops: []ConfigOp{{"cleanup.policy", ConfigSet, v("compact,delete")}},
			want: map[string]string{"retention.ms": "1000", "min.insync.replicas": "2", "cleanup.policy": "compact,delete"}},
		{name: "subtract everything", ops: []ConfigOp{{"cleanup.policy", ConfigSubtract, v("delete")}}, code: sluicev1.ErrorCode_INVALID_CONFIG},
		{name: "an unknown config", ops: []ConfigOp{{"bogus", ConfigSet, v("1")}}, code: sluicev1.ErrorCode_INVALID_CONFIG},
		{name: "an unknown config deleted", ops: []ConfigOp{{"bogus", ConfigDelete, nil}}, code: sluicev1.ErrorCode_INVALID_CONFIG},
		{name: "a config twice", ops: []ConfigOp{{"retention.ms", ConfigSet, v("1")}, {"retention.ms", ConfigDelete, nil}}, code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "set to null", ops: []ConfigOp{{"retention.ms", ConfigSet, nil}}, code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "append to a config that is no list", ops: []ConfigOp{{"retention.ms", ConfigAppend, v("1")}}, code: sluicev1.ErrorCode_INVALID_CONFIG},
		{name: "an unknown operation", ops: []ConfigOp{{"retention.ms", 4, v("1")}}, code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a bad value", ops: []ConfigOp{{"segment.bytes", ConfigSet, v("12")}}, code: sluicev1.ErrorCode_INVALID_CONFIG},
		{name: "min.insync.replicas above the replication factor", ops: []ConfigOp{{"min.insync.replicas", ConfigSet, v("3")}}, code: sluicev1.ErrorCode_INVALID_CONFIG},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cur := map[string]string{"retention.ms": "1000", "min.insync.replicas": "2"}
			got, err := AlterTopicConfigs(cur, c.ops, 2)
			if errs.Code(err) != c.code {
				t.Fatalf("err = %v, want %v", err, c.code)
			}
			if err == nil && !maps.Equal(got, c.want) {
				t.Errorf("configs %v, want %v", got, c.want)
			}
		})
	}
	// Subtract from a list the topic sets.
	got, err := AlterTopicConfigs(map[string]string{"cleanup.policy": "compact,delete"}, []ConfigOp{{"cleanup.policy", ConfigSubtract, v("delete, other")}}, 1)
	if err != nil || got["cleanup.policy"] != "compact" {
		t.Errorf("subtract: %v %v", got, err)
	}
}

// The legacy AlterConfigs replaces the settings whole, with the same
// checks.
func TestReplaceTopicConfigs(t *testing.T) {
	if got, err := ReplaceTopicConfigs(map[string]string{"segment.ms": "5"}, 1); err != nil || !maps.Equal(got, map[string]string{"segment.ms": "5"}) {
		t.Errorf("replace: %v %v", got, err)
	}
	for _, bad := range []map[string]string{{"bogus": "1"}, {"min.insync.replicas": "2"}, {"segment.ms": "x"}} {
		if _, err := ReplaceTopicConfigs(bad, 1); errs.Code(err) != sluicev1.ErrorCode_INVALID_CONFIG {
			t.Errorf("%v: %v, want INVALID_CONFIG", bad, err)
		}
	}
}

// DescribeTopicConfigs answers every config, by name, with its effective
// value, whether the topic sets it, and its default.
func TestDescribeTopicConfigs(t *testing.T) {
	entries := DescribeTopicConfigs(map[string]string{"retention.ms": "5", "cleanup.policy": "delete,compact"}, 1)
	if len(entries) != len(topicConfigDefs) {
		t.Fatalf("%d entries, want %d", len(entries), len(topicConfigDefs))
	}
	by := map[string]TopicConfigEntry{}
	for i, e := range entries {
		if i > 0 && entries[i-1].Name >= e.Name {
			t.Errorf("%q after %q: not by name", e.Name, entries[i-1].Name)
		}
		by[e.Name] = e
	}
	if e := by["retention.ms"]; e.Value != "5" || !e.Set || e.Default != "604800000" || e.Type != ConfigTypeLong || e.Doc == "" {
		t.Errorf("retention.ms: %+v", e)
	}
	if e := by["cleanup.policy"]; e.Value != "compact,delete" || !e.Set || e.Default != "delete" || e.Type != ConfigTypeList {
		t.Errorf("cleanup.policy: %+v", e)
	}
	if e := by["segment.bytes"]; e.Set || e.Value != e.Default || e.Value != "1073741824" {
		t.Errorf("segment.bytes: %+v", e)
	}
}
