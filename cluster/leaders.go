package cluster

import (
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Leaders answers, for the doors (the gRPC door in api, the Kafka door in
// kafka), which partitions this broker serves as their leader and, when
// it does not, why — with the same error codes through either door.
type Leaders struct {
	Self     int32
	Replicas *ReplicaManager
	Cache    *MetadataCache
}

// MetadataLoaded is nil once the broker has received cluster metadata
// since it started (its image is then complete as of some offset, if
// possibly stale), and LEADER_NOT_AVAILABLE (retriable) before: an empty
// image must not be reported as "no such topic". Found by the chaos
// harness: producers failed records of an existing topic when two of
// three nodes restarted.
func (l Leaders) MetadataLoaded() error {
	// Image().Offset is 0 also while a diverged cache reloads from empty.
	if l.Cache.Offset() == 0 || l.Cache.Image().Offset == 0 {
		return errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "broker %d has no cluster metadata yet (starting up)", l.Self)
	}
	return nil
}

// Partition returns the hosted partition if this broker leads it.
// Otherwise the error is UNKNOWN_TOPIC_OR_PARTITION (not in the image),
// LEADER_NOT_AVAILABLE (offline), KAFKA_STORAGE_ERROR (offline here after
// a disk error, or everywhere: NoLeaderError) or NOT_LEADER_OR_FOLLOWER
// (another broker leads it; Hint names it).
func (l Leaders) Partition(topic string, partition int32) (*Replica, error) {
	p, err := l.Replicas.Replica(topic, partition)
	if err == nil {
		if leader, _ := p.Leadership(); leader == l.Self {
			return p, nil
		}
	}
	if errs.Code(err) == sluicev1.ErrorCode_KAFKA_STORAGE_ERROR {
		return nil, err // offline here after a disk error (decision 42)
	}
	return nil, l.NotLeaderError(topic, partition)
}

// NotLeaderError says, from the metadata, why this broker does not serve
// topic/partition as its leader: UNKNOWN_TOPIC_OR_PARTITION (not in the
// image), LEADER_NOT_AVAILABLE (offline, or no metadata yet),
// KAFKA_STORAGE_ERROR (offline because every in-sync replica failed on its
// disk: NoLeaderError) or NOT_LEADER_OR_FOLLOWER (another broker leads it,
// or this one is becoming its leader).
func (l Leaders) NotLeaderError(topic string, partition int32) error {
	if err := l.MetadataLoaded(); err != nil {
		return err
	}
	h, ok := l.Cache.Leader(topic, partition)
	switch {
	case !ok && l.Cache.Image().Topics[topic] == nil:
		return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", errs.Echo(topic))
	case !ok:
		return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q has no partition %d", errs.Echo(topic), partition)
	case h.LeaderID == controller.NoLeader:
		return NoLeaderError(l.Cache.Image(), topic, partition)
	case h.LeaderID == l.Self:
		// The image says we lead but the replica manager has not caught up.
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "node %d is becoming the leader of %s-%d", l.Self, topic, partition)
	}
	return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "node %d is not the leader of %s-%d; the leader is node %d at %s (epoch %d)", l.Self, topic, partition, h.LeaderID, h.Address, h.LeaderEpoch)
}

// NoLeaderError is why partition of topic has no leader in im:
// KAFKA_STORAGE_ERROR naming the failed brokers, directories and OS errors
// when the log of every in-sync replica failed on its disk, so no broker
// can serve it until an operator acts (Image.StorageOfflineError), else
// LEADER_NOT_AVAILABLE (an election is due or its in-sync replicas are on
// brokers that are down).
func NoLeaderError(im *controller.Image, topic string, partition int32) error {
	if err := im.StorageOfflineError(topic, partition); err != nil {
		return err
	}
	return errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "partition %s-%d has no leader", topic, partition)
}

// Hint is the current leader to name in an answer of code (KIP-951's
// current leader): only for NOT_LEADER_OR_FOLLOWER and
// FENCED_LEADER_EPOCH, and only when the metadata names a leader.
func (l Leaders) Hint(topic string, partition int32, code sluicev1.ErrorCode) (LeaderHint, bool) {
	if code != sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER && code != sluicev1.ErrorCode_FENCED_LEADER_EPOCH {
		return LeaderHint{}, false
	}
	h, ok := l.Cache.Leader(topic, partition)
	if !ok || h.LeaderID == controller.NoLeader {
		return LeaderHint{}, false
	}
	return h, true
}
