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
	"github.com/sluice-io/sluice/coordinator/offsets"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// DefaultStateTopicCreateTimeout bounds one creation of __transaction_state
// (the controller's answer and this broker seeing the topic).
const DefaultStateTopicCreateTimeout = 10 * time.Second

// CoordinatorNode is the broker that coordinates a transactional id: the
// leader of its __transaction_state partition.
type CoordinatorNode struct {
	NodeID  int32
	Address string // its client address, for FindCoordinator answers
	// InternalAddress is where other brokers call it (its internal
	// listener, or its client address if it registered none: see
	// controller.Broker.InterBrokerAddress).
	InternalAddress string
	// Partition is the id's __transaction_state partition.
	Partition int32
}

// TxnLocatorConfig is what a TxnLocator needs.
type TxnLocatorConfig struct {
	// Metadata is the broker's metadata cache (required).
	Metadata *cluster.MetadataCache
	// Controllers creates __transaction_state; nil never creates it.
	Controllers *cluster.ControllerClient
	// StatePartitions is the partition count of a __transaction_state
	// this locator creates (0: txn.DefaultStatePartitions). An existing
	// topic's own count always decides routing.
	StatePartitions int32
	// CreateTimeout bounds one creation (0: DefaultStateTopicCreateTimeout).
	CreateTimeout time.Duration
	// Logger may be nil (slog.Default()).
	Logger *slog.Logger
}

// TxnLocator finds the coordinator of a transactional id from the
// broker's metadata (FindCoordinator, and the routing of a partition
// leader's AddPartitionsToTxn), creating __transaction_state on first
// need. Safe for concurrent use; it holds no lock while it calls out.
type TxnLocator struct {
	cfg TxnLocatorConfig
	// topic is the internal topic whose partition leaders coordinate
	// (__transaction_state, or __consumer_offsets for NewGroupLocator);
	// validate checks a key; configs are the topic's configs on creation
	// beside min.insync.replicas.
	topic    string
	validate func(string) error
	configs  map[string]string
	// creating is set while this node has a creation of
	// __transaction_state in flight: one at a time per node; other
	// callers answer COORDINATOR_NOT_AVAILABLE meanwhile.
	creating atomic.Bool
}

// NewTxnLocator returns a locator; it panics without a metadata cache.
func NewTxnLocator(cfg TxnLocatorConfig) *TxnLocator {
	if cfg.Metadata == nil {
		panic("coordinator: TxnLocator needs a metadata cache")
	}
	if cfg.StatePartitions <= 0 {
		cfg.StatePartitions = txn.DefaultStatePartitions
	}
	if cfg.CreateTimeout <= 0 {
		cfg.CreateTimeout = DefaultStateTopicCreateTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Compacted (decision 38): the coordinators' records are keyed, so
	// loading a partition stays bounded.
	return &TxnLocator{cfg: cfg, topic: txn.StateTopic, validate: txn.ValidateTransactionalID,
		configs: map[string]string{"cleanup.policy": "compact"}}
}

// NewGroupLocator returns a locator of consumer groups' coordinators: the
// leaders of __consumer_offsets (cfg.StatePartitions is its partition
// count on creation, 0: offsets.DefaultPartitions), created compacted on
// first need exactly as __transaction_state is.
func NewGroupLocator(cfg TxnLocatorConfig) *TxnLocator {
	if cfg.StatePartitions <= 0 {
		cfg.StatePartitions = offsets.DefaultPartitions
	}
	l := NewTxnLocator(cfg)
	l.topic = offsets.Topic
	l.validate = func(g string) error {
		if err := offsets.ValidateGroupID(g); err != nil {
			return errs.New(sluicev1.ErrorCode_INVALID_GROUP_ID, "%v", err)
		}
		return nil
	}
	return l
}

// errNoStateTopic marks a Lookup that found no __transaction_state.
var errNoStateTopic = errors.New("the internal topic does not exist yet")

// StatePartitionCount is the partition count of __transaction_state in
// the metadata, or 0 when the topic does not exist (yet). It does not
// block (TransactionCoordinatorDeps.StatePartitionCount).
func (l *TxnLocator) StatePartitionCount() int32 {
	if t := l.cfg.Metadata.Image().Topics[l.topic]; t != nil {
		return int32(len(t.Partitions))
	}
	return 0
}

// Lookup returns the coordinator of transactionalID from the metadata:
// the leader of partition txn.PartitionFor(id, actual partition count) of
// __transaction_state. Errors (*errs.Error): INVALID_REQUEST (a bad id);
// COORDINATOR_NOT_AVAILABLE (retriable) when the broker has no metadata
// yet, the topic does not exist, or the partition has no leader.
func (l *TxnLocator) Lookup(transactionalID string) (CoordinatorNode, error) {
	if err := l.validate(transactionalID); err != nil {
		return CoordinatorNode{}, err
	}
	if l.cfg.Metadata.Offset() == 0 {
		return CoordinatorNode{}, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "this broker has no cluster metadata yet")
	}
	im := l.cfg.Metadata.Image()
	t := im.Topics[l.topic]
	if t == nil || len(t.Partitions) == 0 {
		e := errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "%s does not exist yet", l.topic)
		e.Cause = errNoStateTopic
		return CoordinatorNode{}, e
	}
	p := txn.PartitionFor(transactionalID, int32(len(t.Partitions))) // = offsets.PartitionFor
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

// Locate is Lookup, creating __transaction_state when it does not exist:
// the first caller on this node asks the controller (partitions
// StatePartitions, replication factor min(3, registered brokers),
// min.insync.replicas min(2, replication factor); TOPIC_ALREADY_EXISTS is
// fine), waits until this broker's metadata shows the topic, and looks
// again; callers meanwhile answer COORDINATOR_NOT_AVAILABLE at once. The
// answer stays COORDINATOR_NOT_AVAILABLE until the id's partition has a
// leader. ctx bounds the creation (with CreateTimeout).
func (l *TxnLocator) Locate(ctx context.Context, transactionalID string) (CoordinatorNode, error) {
	n, err := l.Lookup(transactionalID)
	if err == nil || !errors.Is(err, errNoStateTopic) || l.cfg.Controllers == nil {
		return n, err
	}
	if !l.creating.CompareAndSwap(false, true) {
		return CoordinatorNode{}, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "%s is being created; retry", l.topic)
	}
	defer l.creating.Store(false)
	if err := l.createStateTopic(ctx); err != nil {
		l.cfg.Logger.Warn("creating internal topic failed; clients retry", "topic", l.topic, "err", err)
		return CoordinatorNode{}, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "creating %s: %s", l.topic, errs.Message(err))
	}
	return l.Lookup(transactionalID)
}

// createStateTopic asks the active controller to create
// __transaction_state and waits until this broker's metadata has the
// answer's offset.
func (l *TxnLocator) createStateTopic(ctx context.Context) error {
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
			Name: l.topic, NumPartitions: l.cfg.StatePartitions, ReplicationFactor: rf,
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
		l.cfg.Logger.Info("internal topic created", "topic", l.topic, "partitions", l.cfg.StatePartitions,
			"replication_factor", rf, "min_insync_replicas", min(2, rf))
	case sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS:
		// Another broker created it first.
	default:
		return errs.New(r.ErrorCode, "%s", r.ErrorMessage)
	}
	return l.cfg.Metadata.WaitForOffset(ctx, out.MetadataOffset)
}
