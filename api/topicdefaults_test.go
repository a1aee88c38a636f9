package api_test

import (
	"strings"
	"testing"

	"github.com/sluice-io/sluice/node"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A cluster default replication factor that the live brokers cannot hold
// is refused as an explicit one is, and the message says it came from the
// default (issue 28); a replication factor the request names wins, with
// the default min.insync.replicas capped at it.
func TestCreateTopicDefaultReplicationFactorAboveLiveBrokers(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(cfg *node.Config) {
		cfg.DefaultReplicationFactor, cfg.DefaultMinInsyncReplicas = 3, 2
	})
	resp, err := tn.admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{
		{Name: "dflt", NumPartitions: 1},
		{Name: "one", NumPartitions: 1, ReplicationFactor: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Topics[0]; r.ErrorCode != sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR ||
		!strings.Contains(r.ErrorMessage, "larger than the 1 live brokers") || !strings.Contains(r.ErrorMessage, "--default-replication-factor") {
		t.Errorf("default rf 3 on one broker: %v %q", r.ErrorCode, r.ErrorMessage)
	}
	if r := resp.Topics[1]; r.ErrorCode != sluicev1.ErrorCode_NONE || r.ReplicationFactor != 1 || r.Configs["min.insync.replicas"] != "1" || r.Note == "" {
		t.Errorf("explicit rf 1: %v %q rf %d min.insync.replicas %q note %q; want rf 1, 1, a note",
			r.ErrorCode, r.ErrorMessage, r.ReplicationFactor, r.Configs["min.insync.replicas"], r.Note)
	}
}
