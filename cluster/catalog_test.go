package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		{map[string]string{"cleanup.policy": "compact"}, 1, false},
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
func TestOrphanLogDirsRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1000, 0)
	m, err := NewReplicaManager(ReplicaManagerConfig{DataDir: dir, NodeID: 1}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.CreateTopic("keep", 1, 1, nil, false, now); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "logs", "gone-0")
	if err := os.MkdirAll(orphan, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err = NewReplicaManager(ReplicaManagerConfig{DataDir: dir, NodeID: 1}, now)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphan dir still there: %v", err)
	}
	if _, err := m.Partition("keep", 0); err != nil {
		t.Fatalf("kept topic lost: %v", err)
	}
	if _, err := m.Partition("gone", 0); errs.Code(err) != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
		t.Fatalf("gone topic: %v", err)
	}
}

func TestCatalogSurvivesReopen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "meta", "topics.json")
	c, err := OpenCatalog(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Add(Topic{Name: "a", Partitions: 2, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(Topic{Name: "a", Partitions: 2, ReplicationFactor: 1}); errs.Code(err) != sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS {
		t.Fatalf("duplicate add: %v", err)
	}
	c2, err := OpenCatalog(p)
	if err != nil {
		t.Fatal(err)
	}
	if c2.ClusterID() != c.ClusterID() || len(c2.Topics()) != 1 {
		t.Fatalf("reopened catalog differs: %v %v", c2.ClusterID(), c2.Topics())
	}
	if err := os.WriteFile(p, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCatalog(p); err == nil {
		t.Fatal("corrupt catalog opened without error")
	}
}
