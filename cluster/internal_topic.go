package cluster

import (
	"strings"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// InternalTopicPrefix starts the names reserved for the brokers' own
// topics (__transaction_state, __consumer_offsets): no client creates a
// topic so named (CreateTopics refuses it), and none produces to one.
const InternalTopicPrefix = "__"

// IsInternalTopic reports whether name is reserved for internal topics.
func IsInternalTopic(name string) bool { return strings.HasPrefix(name, InternalTopicPrefix) }

// CheckProducerTopic refuses a producer's batch for an internal topic
// (INVALID_TOPIC_EXCEPTION, as Kafka answers a produce to one). Only the
// topic's coordinator writes it, through AppendCommitted or
// AppendCoordinatorTxn, and its load must be able to decode every record
// (issue 29: one keyed record a client wrote to __consumer_offsets made
// its partition unloadable; a forged __transaction_state record would be
// applied). The rule lives here, below the doors, so that every door's
// produce (gRPC, Kafka) gets it from AppendTo and AppendTxnTo; the Kafka
// door also asks it by name before looking the partition up, so a
// produce to an internal topic not created yet is refused the same way.
func CheckProducerTopic(topic string) error {
	if IsInternalTopic(topic) {
		return errs.New(sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION, "topic %s is internal: only its coordinator writes it", topic)
	}
	return nil
}
