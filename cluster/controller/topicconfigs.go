package controller

import (
	"context"
	"maps"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Altering a topic's configs (Kafka's IncrementalAlterConfigs and
// AlterConfigs on a topic). The controller reads the topic's configs,
// the caller's edit computes the new set and validates it (the rules of
// the configs are the caller's: cluster.AlterTopicConfigs), and one
// TopicConfigs record replaces the set whole, so an alteration of several
// keys is applied at once or not at all. Brokers apply the new configs to
// their replicas when they apply the record (cluster.ReplicaManager).

// TopicConfigs replaces the configs of topic Topic, whose id is TopicID,
// with Configs. The FSM refuses it for a topic that does not exist or has
// another id (re-created since the proposer read it:
// UNKNOWN_TOPIC_OR_PARTITION) and for an empty key (INVALID_CONFIG); the
// values are the proposer's to validate, as CreateTopic's are. (Added to
// version 1 as a new type: a voter or broker that does not know it must
// not apply a log that holds it.)
type TopicConfigs struct {
	Topic   string            `json:"topic"`
	TopicID string            `json:"topic_id"`
	Configs map[string]string `json:"configs,omitempty"`
}

// Type implements Record.
func (TopicConfigs) Type() RecordType { return TypeTopicConfigs }

func applyTopicConfigs(im *Image, r TopicConfigs) error {
	t := im.Topics[r.Topic]
	if t == nil || t.ID != r.TopicID {
		return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q with id %s does not exist", errs.Echo(r.Topic), r.TopicID)
	}
	if _, ok := r.Configs[""]; ok {
		return errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "empty config key")
	}
	// A new map: the old one may be shared with the image an edit
	// started from.
	t.Configs = cloneMap(r.Configs)
	return nil
}

// TopicConfigEdit is one topic's part of AlterTopicConfigs.
type TopicConfigEdit struct {
	Topic string
	// Edit returns the topic's configs after the alteration from its
	// current ones (a copy, Edit's to modify and return) and its
	// replication factor (Topic.ReplicationFactor), or why the
	// alteration is refused (an *errs.Error). The rules of the configs
	// are Edit's (cluster.AlterTopicConfigs). It runs on the active
	// controller under its proposal lock: it must be quick and must not
	// call the controller.
	Edit func(configs map[string]string, replicationFactor int32) (map[string]string, error)
}

// planTopicConfigs decides what AlterTopicConfigs proposes (pure when
// the edits are): perTopic[i] is why edits[i] is refused, recordOf[i] the
// index of its record, or -1 (refused, or the configs do not change). A
// topic without min.insync.replicas after its edit gets the cluster
// default again (TopicDefaults.Apply), as at its creation. A topic named
// twice is refused the second time.
func planTopicConfigs(im *Image, d TopicDefaults, edits []TopicConfigEdit) (perTopic []error, records []Record, recordOf []int) {
	perTopic = make([]error, len(edits))
	recordOf = make([]int, len(edits))
	seen := map[string]bool{}
	for i, e := range edits {
		recordOf[i] = -1
		if seen[e.Topic] {
			perTopic[i] = invalid("topic %q is named twice", errs.Echo(e.Topic))
			continue
		}
		seen[e.Topic] = true
		t := im.Topics[e.Topic]
		if t == nil {
			perTopic[i] = errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", errs.Echo(e.Topic))
			continue
		}
		rf := t.ReplicationFactor()
		configs, err := e.Edit(cloneMap(t.Configs), rf)
		if err != nil {
			perTopic[i] = err
			continue
		}
		configs = d.Apply(rf, configs).Configs
		if maps.Equal(configs, t.Configs) {
			continue
		}
		recordOf[i] = len(records)
		records = append(records, TopicConfigs{Topic: e.Topic, TopicID: t.ID, Configs: configs})
	}
	return perTopic, records, recordOf
}

// AlterTopicConfigs alters the configs of each topic (planTopicConfigs
// on the leader's image after a barrier; the FSM checks each record
// again). perTopic[i] is edits[i]'s outcome: nil when its configs are
// the edited ones now (with validateOnly: when they would be, and
// nothing is proposed), else why not (UNKNOWN_TOPIC_OR_PARTITION, the
// edit's error). offset is the metadata offset that holds every change
// made. err is set when the call failed as a whole (NOT_CONTROLLER, ctx):
// then a topic's configs may or may not have changed, as with Propose.
func (c *Controller) AlterTopicConfigs(ctx context.Context, edits []TopicConfigEdit, validateOnly bool) (perTopic []error, offset uint64, err error) {
	d := c.TopicDefaults()
	return c.proposePlanned(ctx, func(im *Image) ([]error, []Record, []int) {
		perTopic, recs, recordOf := planTopicConfigs(im, d, edits)
		if validateOnly {
			recs = nil
		}
		return perTopic, recs, recordOf
	}, func(r Record) {
		tc := r.(TopicConfigs)
		c.log.Info("controller: topic configs altered", "topic", tc.Topic, "configs", tc.Configs)
	})
}
