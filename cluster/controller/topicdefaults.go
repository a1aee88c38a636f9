package controller

import (
	"strconv"
)

// Cluster defaults for new topics (issue 28): Kafka's broker settings
// default.replication.factor and min.insync.replicas, as sluiced
// --default-replication-factor and --default-min-insync-replicas. The
// active controller applies them to a CreateTopics that leaves the
// replication factor (0, or Kafka's -1) or min.insync.replicas unset, so
// every client gets them, and writes them into the CreateTopic record:
// the topic keeps the values it was created with when the setting changes
// later (Kafka's broker-level min.insync.replicas instead follows every
// topic without an override; here `--config min.insync.replicas=N` at
// creation is the override and the default is fixed at creation).
//
// Internal topics (__transaction_state, __consumer_offsets) do not use
// them: the broker creating one names replication factor min(3, brokers)
// and min.insync.replicas min(2, replication factor) itself.

// TopicDefaults are the cluster defaults for new topics. Zero fields
// stand for 1, Kafka's defaults.
type TopicDefaults struct {
	ReplicationFactor int32
	MinInsyncReplicas int32
}

// NewTopic is a topic creation after TopicDefaults.Apply.
type NewTopic struct {
	// ReplicationFactor is the request's, or the default when it left it
	// unset (RFDefaulted).
	ReplicationFactor int32
	RFDefaulted       bool
	// Configs are the request's configs (a new map) with
	// min.insync.replicas added when the request named none.
	Configs map[string]string
	// MinISRCapped: the default min.insync.replicas was above the
	// replication factor, and the topic got min.insync.replicas equal to
	// its replication factor instead (a topic whose min.insync.replicas
	// exceeds its replication factor could never take an acks=all
	// write).
	MinISRCapped bool
}

// Apply fills in what a topic creation left unset: a replication factor
// of 0 or -1 becomes d.ReplicationFactor, and without a
// min.insync.replicas config the topic gets d.MinInsyncReplicas, capped
// at the replication factor. Other values, invalid ones included, are
// kept for the caller's validation to judge. configs is not modified.
// Pure.
func (d TopicDefaults) Apply(rf int32, configs map[string]string) NewTopic {
	out := NewTopic{ReplicationFactor: rf, Configs: cloneMap(configs)}
	if rf == 0 || rf == -1 {
		out.ReplicationFactor, out.RFDefaulted = max(d.ReplicationFactor, 1), true
	}
	if _, ok := configs[ConfigMinInsyncReplicas]; !ok && out.ReplicationFactor >= 1 {
		minISR := max(d.MinInsyncReplicas, 1)
		if minISR > out.ReplicationFactor {
			minISR, out.MinISRCapped = out.ReplicationFactor, true
		}
		out.Configs[ConfigMinInsyncReplicas] = strconv.Itoa(int(minISR))
	}
	return out
}

// TopicDefaults returns this controller's defaults for new topics
// (Config.DefaultReplicationFactor and DefaultMinInsyncReplicas).
func (c *Controller) TopicDefaults() TopicDefaults {
	return TopicDefaults{ReplicationFactor: c.cfg.DefaultReplicationFactor, MinInsyncReplicas: c.cfg.DefaultMinInsyncReplicas}
}
