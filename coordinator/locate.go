package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/coordinator/runtime"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// DefaultStateTopicCreateTimeout bounds one creation of an internal topic
// (the controller's answer and this broker seeing the topic).
const DefaultStateTopicCreateTimeout = 10 * time.Second

// CoordinatorNode is the broker that coordinates a key (transactional id, group): the
// leader of its partition of the internal topic.
type CoordinatorNode struct {
	NodeID  int32
	Address string // its client address, for FindCoordinator answers
	// InternalAddress is where other brokers call it (its internal
	// listener, or its client address if it registered none: see
	// controller.Broker.InterBrokerAddress).
	InternalAddress string
	// Partition is the key's partition of the internal topic.
	Partition int32
}

// LocatorConfig is what a Locator needs.
type LocatorConfig struct {
	// Metadata is the broker's metadata cache (required).
	Metadata *cluster.MetadataCache
	// Controllers creates the internal topic; nil never creates it.
	Controllers *cluster.ControllerClient
	// Partitions is the partition count of the internal topic this
	// locator creates (0: txn.DefaultStatePartitions for
	// __transaction_state, group.DefaultOffsetsPartitions for
	// __consumer_offsets). An existing topic's own count always decides
	// routing.
	Partitions int32
	// CreateTimeout bounds one creation (0: DefaultStateTopicCreateTimeout).
	CreateTimeout time.Duration
	// Logger may be nil (slog.Default()).
	Logger *slog.Logger
}

// Locator finds the coordinator of a key — a transactional id
// (NewTxnLocator) or a group (NewGroupLocator) — from the broker's
// metadata: the leader of the key's partition of the coordinator's
// internal topic (FindCoordinator, and the routing of a partition
// leader's AddPartitionsToTxn), creating the topic on first need. Both
// coordinators use it. Safe for concurrent use; it holds no lock while it
// calls out.
type Locator struct {
	cfg LocatorConfig
	// topic is the internal topic whose partition leaders coordinate
	// (__transaction_state, or __consumer_offsets for NewGroupLocator);
	// validate checks a key; configs are the topic's configs on creation
	// beside min.insync.replicas.
	topic    string
	validate func(string) error
	configs  map[string]string
	// creating is set while this node has a creation of the topic in
	// flight: one at a time per node; other
	// callers answer COORDINATOR_NOT_AVAILABLE meanwhile.
	creating atomic.Bool
}

// NewTxnLocator returns a locator of transaction coordinators: the
// leaders of __transaction_state (cfg.Partitions is its partition count
// on creation, 0: txn.DefaultStatePartitions). It panics without a
// metadata cache.
func NewTxnLocator(cfg LocatorConfig) *Locator {
	if cfg.Partitions <= 0 {
		cfg.Partitions = txn.DefaultStatePartitions
	}
	return newLocator(cfg, txn.StateTopic, txn.ValidateTransactionalID)
}

// NewGroupLocator returns a locator of consumer groups' coordinators: the
// leaders of __consumer_offsets (cfg.Partitions is its partition count on
// creation, 0: group.DefaultOffsetsPartitions), created compacted on first
// need exactly as __transaction_state is. It panics without a metadata
// cache.
func NewGroupLocator(cfg LocatorConfig) *Locator {
	if cfg.Partitions <= 0 {
		cfg.Partitions = group.DefaultOffsetsPartitions
	}
	return newLocator(cfg, group.OffsetsTopic, group.ValidateID)
}

// newLocator returns the locator of topic's coordinators; validate checks
// a key.
func newLocator(cfg LocatorConfig, topic string, validate func(string) error) *Locator {
	if cfg.Metadata == nil {
		panic("coordinator: a Locator needs a metadata cache")
	}
	if cfg.CreateTimeout <= 0 {
		cfg.CreateTimeout = DefaultStateTopicCreateTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Compacted (decision 38): the coordinators' records are keyed, so
	// loading a partition stays bounded.
	return &Locator{cfg: cfg, topic: topic, validate: validate,
		configs: map[string]string{"cleanup.policy": "compact"}}
}

// errNoTopic marks a Lookup that found no internal topic.
var errNoTopic = errors.New("the internal topic does not exist yet")

// PartitionCount is the partition count of the locator's topic in the
// metadata, or 0 when the topic does not exist (yet). It does not block
// (txn.CoordinatorDeps.StatePartitionCount,
// group.CoordinatorDeps.PartitionCount).
func (l *Locator) PartitionCount() int32 {
	if t := l.cfg.Metadata.Image().Topics[l.topic]; t != nil {
		return int32(len(t.Partitions))
	}
	return 0
}

// Lookup returns the coordinator of key from the metadata: the leader of
// partition runtime.PartitionFor(key, actual partition count) of the
// topic. Errors (*errs.Error): the validation's (INVALID_REQUEST for a bad
// transactional id, INVALID_GROUP_ID);
// COORDINATOR_NOT_AVAILABLE (retriable) when the broker has no metadata
// yet, the topic does not exist, or the partition has no leader.
func (l *Locator) Lookup(key string) (CoordinatorNode, error) {
	if err := l.validate(key); err != nil {
		return CoordinatorNode{}, err
	}
	if l.cfg.Metadata.Offset() == 0 {
		return CoordinatorNode{}, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "this broker has no cluster metadata yet")
	}
	im := l.cfg.Metadata.Image()
	t := im.Topics[l.topic]
	if t == nil || len(t.Partitions) == 0 {
		e := errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "%s does not exist yet", l.topic)
		e.Cause = errNoTopic
		return CoordinatorNode{}, e
	}
	p := runtime.PartitionFor(key, int32(len(t.Partitions)))
	leader := t.Partitions[p].Leader
	if leader == controller.NoLeader {
		return CoordinatorNode{}, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "%s partition %d has no leader", l.topic, p)
	}
	b := im.Brokers[leader]
	if b == nil || b.Address == "" {
		return CoordinatorNode{}, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "the address of node %d, leader of %s partition %d, is unknown", leader, l.topic, p)
	}
	return CoordinatorNode{NodeID: leader, Address: b.Address, InternalAddress: b.InterBrokerAddress(), Partition: p}, nil
}

// Locate is Lookup, creating the topic when it does not exist:
// the first caller on this node asks the controller (partitions
// Partitions, replication factor min(3, registered brokers),
// min.insync.replicas min(2, replication factor); TOPIC_ALREADY_EXISTS is
// fine), waits until this broker's metadata shows the topic, and looks
// again; callers meanwhile answer COORDINATOR_NOT_AVAILABLE at once. The
// answer stays COORDINATOR_NOT_AVAILABLE until the id's partition has a
// leader. ctx bounds the creation (with CreateTimeout).
func (l *Locator) Locate(ctx context.Context, key string) (CoordinatorNode, error) {
	n, err := l.Lookup(key)
	if err == nil || !errors.Is(err, errNoTopic) || l.cfg.Controllers == nil {
		return n, err
	}
	if !l.creating.CompareAndSwap(false, true) {
		return CoordinatorNode{}, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "%s is being created; retry", l.topic)
	}
	defer l.creating.Store(false)
	if err := l.createTopic(ctx); err != nil {
		l.cfg.Logger.Warn("creating internal topic failed; clients retry", "topic", l.topic, "err", err)
		return CoordinatorNode{}, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "creating %s: %s", l.topic, errs.Message(err))
	}
	return l.Lookup(key)
}

// createTopic asks the active controller to create the topic and waits until this broker's metadata has the
// answer's offset.
func (l *Locator) createTopic(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.CreateTimeout)
	defer cancel()
	brokers := int32(len(l.cfg.Metadata.Image().Brokers))
	if brokers < 1 {
		return errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "no broker is registered yet")
	}
	rf := min(3, brokers)
	req := &sluicev1.CreateTopicsRequest{
		TimeoutMs: int32(l.cfg.CreateTimeout / time.Millisecond),
		Topics: []*sluicev1.CreatableTopic{{
			Name: l.topic, NumPartitions: l.cfg.Partitions, ReplicationFactor: rf,
			Configs: map[string]string{"min.insync.replicas": strconv.Itoa(int(min(2, rf)))},
		}},
	}
	for k, v := range l.configs {
		req.Topics[0].Configs[k] = v
	}
	var out *internalv1.ControllerCreateTopicsResponse
	err := l.cfg.Controllers.Call(ctx, l.cfg.CreateTimeout, func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.CreateTopics(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	if len(out.GetResponse().GetTopics()) != 1 {
		return errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "the controller answered %d topics for one", len(out.GetResponse().GetTopics()))
	}
	switch r := out.Response.Topics[0]; r.ErrorCode {
	case sluicev1.ErrorCode_NONE:
		l.cfg.Logger.Info("internal topic created", "topic", l.topic, "partitions", l.cfg.Partitions,
			"replication_factor", rf, "min_insync_replicas", min(2, rf))
	case sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS:
		// Another broker created it first.
	default:
		return errs.New(r.ErrorCode, "%s", r.ErrorMessage)
	}
	return l.cfg.Metadata.WaitForOffset(ctx, out.MetadataOffset)
}
