package controller

import (
	"reflect"
	"testing"
)

// TopicDefaults.Apply (issue 28): an unset replication factor (0 or -1)
// takes the default; an unset min.insync.replicas takes the default,
// capped at the replication factor; what the request names wins, and
// invalid values are left for validation.
func TestTopicDefaultsApply(t *testing.T) {
	d := TopicDefaults{ReplicationFactor: 3, MinInsyncReplicas: 2}
	for _, tc := range []struct {
		name    string
		d       TopicDefaults
		rf      int32
		configs map[string]string
		want    NewTopic
	}{
		{"both unset", d, 0, nil,
			NewTopic{ReplicationFactor: 3, RFDefaulted: true, Configs: map[string]string{"min.insync.replicas": "2"}}},
		{"Kafka's -1", d, -1, map[string]string{"retention.ms": "1"},
			NewTopic{ReplicationFactor: 3, RFDefaulted: true, Configs: map[string]string{"min.insync.replicas": "2", "retention.ms": "1"}}},
		{"explicit rf above the default min isr", d, 2, nil,
			NewTopic{ReplicationFactor: 2, Configs: map[string]string{"min.insync.replicas": "2"}}},
		{"explicit rf below the default min isr: capped", d, 1, nil,
			NewTopic{ReplicationFactor: 1, Configs: map[string]string{"min.insync.replicas": "1"}, MinISRCapped: true}},
		{"explicit min isr wins", d, 0, map[string]string{"min.insync.replicas": "1"},
			NewTopic{ReplicationFactor: 3, RFDefaulted: true, Configs: map[string]string{"min.insync.replicas": "1"}}},
		{"explicit min isr above rf is left for validation", d, 1, map[string]string{"min.insync.replicas": "5"},
			NewTopic{ReplicationFactor: 1, Configs: map[string]string{"min.insync.replicas": "5"}}},
		{"an invalid rf is left for validation", d, -2, nil,
			NewTopic{ReplicationFactor: -2, Configs: map[string]string{}}},
		{"zero defaults are 1", TopicDefaults{}, 0, nil,
			NewTopic{ReplicationFactor: 1, RFDefaulted: true, Configs: map[string]string{"min.insync.replicas": "1"}}},
	} {
		in := cloneMap(tc.configs)
		got := tc.d.Apply(tc.rf, tc.configs)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
		if !reflect.DeepEqual(cloneMap(tc.configs), in) {
			t.Errorf("%s: Apply changed the caller's configs", tc.name)
		}
	}
}

func TestConfigValidateTopicDefaults(t *testing.T) {
	cfg := Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: "127.0.0.1:0"}
	if err := cfg.Validate(); err != nil || cfg.DefaultReplicationFactor != 1 || cfg.DefaultMinInsyncReplicas != 1 {
		t.Errorf("zero defaults: %v, %d, %d; want 1, 1", err, cfg.DefaultReplicationFactor, cfg.DefaultMinInsyncReplicas)
	}
	cfg = Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: "127.0.0.1:0", DefaultMinInsyncReplicas: -1}
	if err := cfg.Validate(); err == nil {
		t.Error("a negative default min.insync.replicas was accepted")
	}
}
