package controller

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Limits on topics, checked when a CreateTopic is applied.
const (
	MaxTopicNameLength = 249
	MaxPartitions      = 10000
)

// FeatureTransactionVersion is the transaction protocol feature
// (transaction.version); level 2 is KIP-890's protocol, which Sluice speaks.
const FeatureTransactionVersion = "transaction.version"

// SupportedFeatures is each feature this controller can finalize, with its
// maximum level. A new cluster's first controller finalizes every feature
// at its maximum (see Controller).
var SupportedFeatures = map[string]int16{
	FeatureTransactionVersion: 2,
}

// ConfigUncleanLeaderElection is the topic (or cluster) config that allows
// electing a replica outside the ISR when no ISR member is live.
const ConfigUncleanLeaderElection = "unclean.leader.election.enable"

// Result is what applying an accepted record produced.
type Result struct {
	// Offset is the Raft index the record was applied at.
	Offset uint64
	// BrokerEpoch is the broker's epoch after a RegisterBroker.
	BrokerEpoch int64
	// ProducerIDStart and ProducerIDEnd bound the block [start, end)
	// allocated by a ProducerIDsBlock.
	ProducerIDStart, ProducerIDEnd int64
	// Partition is a copy of the partition after a PartitionChange.
	Partition *PartitionState
}

// Apply applies record r, found at Raft index offset, to im in place.
//
// It is pure: the outcome depends only on im, r and offset (no clock, no
// randomness, no I/O), so every voter that applies the same log reaches the
// same image. On success im.Offset becomes offset. On error, im is left
// exactly as it was (every check happens before the first write) and the
// error is an *errs.Error saying why the record was rejected; the caller
// decides whether to advance im.Offset past it (the FSM adapter does).
// offset must be greater than im.Offset. Apply does not retain r's slices
// or maps.
func Apply(im *Image, r Record, offset uint64) (Result, error) {
	if offset <= im.Offset {
		return Result{}, errs.New(sluicev1.ErrorCode_INVALID_REQUEST,
			"offset %d is not after the image offset %d", offset, im.Offset)
	}
	ensureMaps(im)
	res := Result{Offset: offset}
	var err error
	switch r := r.(type) {
	case RegisterBroker:
		res.BrokerEpoch, err = applyRegisterBroker(im, r, offset)
	case FenceBroker:
		err = applyFencing(im, r.BrokerID, r.BrokerEpoch, true)
	case UnfenceBroker:
		err = applyFencing(im, r.BrokerID, r.BrokerEpoch, false)
	case CreateTopic:
		err = applyCreateTopic(im, r)
	case DeleteTopic:
		err = applyDeleteTopic(im, r)
	case PartitionChange:
		res.Partition, err = applyPartitionChange(im, r)
	case ProducerIDsBlock:
		res.ProducerIDStart, res.ProducerIDEnd, err = applyProducerIDsBlock(im, r)
	case FeatureLevel:
		err = applyFeatureLevel(im, r)
	case ConfigChange:
		err = applyConfigChange(im, r)
	case BootstrapCluster:
		err = applyBootstrapCluster(im, r)
	case OfflineReplicas:
		err = applyOfflineReplicas(im, r)
	case UnregisterBroker:
		err = applyUnregisterBroker(im, r)
	case UserScramCredential:
		err = applyUserScramCredential(im, r)
	case RemoveUserScramCredential:
		err = applyRemoveUserScramCredential(im, r)
	case CreateAcl:
		err = applyCreateAcl(im, r, offset)
	case RemoveAcl:
		err = applyRemoveAcl(im, r, offset)
	case ClientQuota:
		err = applyClientQuota(im, r, offset)
	case CreatePartitions:
		err = applyCreatePartitions(im, r)
	case TopicConfigs:
		err = applyTopicConfigs(im, r)
	default:
		err = errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "unknown record %T", r)
	}
	if err != nil {
		return Result{}, err
	}
	im.Offset = offset
	return res, nil
}

// ensureMaps makes a zero-value Image usable. It changes no observable
// state (nil and empty maps read the same), so it may run before checks.
func ensureMaps(im *Image) {
	if im.Brokers == nil {
		im.Brokers = map[int32]*Broker{}
	}
	if im.Topics == nil {
		im.Topics = map[string]*Topic{}
	}
	if im.Features == nil {
		im.Features = map[string]int16{}
	}
	if im.Configs == nil {
		im.Configs = map[string]string{}
	}
	if im.Users == nil {
		im.Users = map[string]map[string]ScramCredential{}
	}
	if im.Acls == nil {
		im.Acls = AclSet{}
	}
	if im.ClientQuotas == nil {
		im.ClientQuotas = QuotaMap{}
	}
}

func invalid(format string, args ...any) error {
	return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, format, args...)
}

// applyRegisterBroker: a new incarnation gets epoch = offset and starts
// fenced; the same incarnation again is a retried registration and keeps
// its epoch (updating the addresses, Kafka's included, and rack).
func applyRegisterBroker(im *Image, r RegisterBroker, offset uint64) (int64, error) {
	if r.BrokerID < 0 {
		return 0, invalid("broker id %d is negative", r.BrokerID)
	}
	if r.Address == "" {
		return 0, invalid("broker %d registered without an address", r.BrokerID)
	}
	if r.IncarnationID == "" {
		return 0, invalid("broker %d registered without an incarnation id", r.BrokerID)
	}
	if b := im.Brokers[r.BrokerID]; b != nil && b.IncarnationID == r.IncarnationID {
		b.Address, b.InternalAddress, b.KafkaAddress, b.Rack = r.Address, r.InternalAddress, r.KafkaAddress, r.Rack
		b.MaxReplicas, b.OpenFilesLimit = r.MaxReplicas, r.OpenFilesLimit
		return b.Epoch, nil
	}
	im.Brokers[r.BrokerID] = &Broker{
		ID: r.BrokerID, Address: r.Address, InternalAddress: r.InternalAddress, KafkaAddress: r.KafkaAddress, Rack: r.Rack, IncarnationID: r.IncarnationID,
		Epoch: int64(offset), Fenced: true, MaxReplicas: r.MaxReplicas, OpenFilesLimit: r.OpenFilesLimit,
	}
	return int64(offset), nil
}

// applyFencing sets a broker's fenced flag. The epoch check makes a fence
// or unfence decided for an earlier incarnation harmless: after a broker
// re-registers, requests carrying its old epoch are STALE_BROKER_EPOCH.
func applyFencing(im *Image, id int32, epoch int64, fenced bool) error {
	b := im.Brokers[id]
	if b == nil {
		return errs.New(sluicev1.ErrorCode_STALE_BROKER_EPOCH, "broker %d is not registered", id)
	}
	if b.Epoch != epoch {
		return errs.New(sluicev1.ErrorCode_STALE_BROKER_EPOCH,
			"broker %d epoch %d is not the current epoch %d", id, epoch, b.Epoch)
	}
	b.Fenced = fenced
	return nil
}

// applyOfflineReplicas replaces a broker's offline replicas (decision 42),
// epoch-checked as fencing is. The list is kept sorted by topic and
// partition, one entry per partition, so equal sets compare equal.
func applyOfflineReplicas(im *Image, r OfflineReplicas) error {
	b := im.Brokers[r.BrokerID]
	if b == nil {
		return errs.New(sluicev1.ErrorCode_STALE_BROKER_EPOCH, "broker %d is not registered", r.BrokerID)
	}
	if b.Epoch != r.BrokerEpoch {
		return errs.New(sluicev1.ErrorCode_STALE_BROKER_EPOCH,
			"broker %d epoch %d is not the current epoch %d", r.BrokerID, r.BrokerEpoch, b.Epoch)
	}
	set := SortOfflineReplicas(r.Replicas)
	for i, o := range set {
		if o.Topic == "" || o.TopicID == "" || o.Partition < 0 {
			return invalid("broker %d: offline replica %+v lacks a topic, topic id or partition", r.BrokerID, o)
		}
		if i > 0 && set[i-1].Topic == o.Topic && set[i-1].Partition == o.Partition {
			return invalid("broker %d: partition %s-%d is listed offline twice", r.BrokerID, o.Topic, o.Partition)
		}
	}
	b.OfflineReplicas = cloneNonEmpty(set)
	return nil
}

// SortOfflineReplicas returns a copy of rs sorted by topic, then
// partition: the order the image keeps them in.
func SortOfflineReplicas(rs []OfflineReplica) []OfflineReplica {
	out := slices.Clone(rs)
	slices.SortFunc(out, func(a, b OfflineReplica) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// ValidateTopicName reports whether name is a legal topic name: 1 to
// MaxTopicNameLength characters of [a-zA-Z0-9._-], not "." or "..".
func ValidateTopicName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > MaxTopicNameLength {
		return errs.New(sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION, "invalid topic name %q", errs.Echo(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-", c)) {
			return errs.New(sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION, "invalid character %q in topic name %q", c, errs.Echo(name))
		}
	}
	return nil
}

// checkReplicas: non-empty, no duplicates, every replica a registered broker.
func checkReplicas(im *Image, replicas []int32) error {
	if len(replicas) == 0 {
		return errs.New(sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT, "empty replica list")
	}
	for i, id := range replicas {
		if slices.Contains(replicas[:i], id) {
			return errs.New(sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT, "replica %d listed twice in %v", id, replicas)
		}
		if im.Brokers[id] == nil {
			return errs.New(sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT, "replica %d is not a registered broker", id)
		}
	}
	return nil
}

func applyCreateTopic(im *Image, r CreateTopic) error {
	if err := ValidateTopicName(r.Name); err != nil {
		return err
	}
	if im.Topics[r.Name] != nil {
		return errs.New(sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS, "topic %q already exists", r.Name)
	}
	if r.TopicID == "" {
		return invalid("topic %q has no topic id", r.Name)
	}
	for _, t := range im.Topics {
		if t.ID == r.TopicID {
			return invalid("topic id %s is already used by topic %q", r.TopicID, t.Name)
		}
	}
	if len(r.Partitions) < 1 || len(r.Partitions) > MaxPartitions {
		return errs.New(sluicev1.ErrorCode_INVALID_PARTITIONS,
			"topic %q: %d partitions, want 1..%d", r.Name, len(r.Partitions), MaxPartitions)
	}
	rf := len(r.Partitions[0].Replicas)
	for i, pa := range r.Partitions {
		if err := checkReplicas(im, pa.Replicas); err != nil {
			return errs.New(sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT, "topic %q partition %d: %s", r.Name, i, errs.Message(err))
		}
		if len(pa.Replicas) != rf {
			return errs.New(sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT,
				"topic %q partition %d has %d replicas, partition 0 has %d", r.Name, i, len(pa.Replicas), rf)
		}
	}
	t := &Topic{Name: r.Name, ID: r.TopicID, Configs: cloneMap(r.Configs),
		Partitions: make([]*PartitionState, len(r.Partitions))}
	for i, pa := range r.Partitions {
		t.Partitions[i] = newPartition(im, pa.Replicas)
	}
	im.Topics[r.Name] = t
	return nil
}

func applyDeleteTopic(im *Image, r DeleteTopic) error {
	if im.Topics[r.Name] == nil {
		return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", errs.Echo(r.Name))
	}
	delete(im.Topics, r.Name)
	return nil
}

// applyPartitionChange implements compare-and-set on (PartitionEpoch,
// LeaderEpoch): a change computed from an older view is rejected, so an
// AlterPartition from a deposed leader or a duplicate election can never
// undo a newer decision.
func applyPartitionChange(im *Image, r PartitionChange) (*PartitionState, error) {
	p := im.Partition(r.Topic, r.Partition)
	if p == nil {
		return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "partition %s-%d does not exist", errs.Echo(r.Topic), r.Partition)
	}
	if r.PartitionEpoch != p.PartitionEpoch {
		// The proposer must re-read the partition before trying again.
		return nil, errs.New(sluicev1.ErrorCode_INVALID_UPDATE_VERSION, "stale partition epoch %d for %s-%d, current is %d",
			r.PartitionEpoch, r.Topic, r.Partition, p.PartitionEpoch)
	}
	if r.LeaderEpoch != p.LeaderEpoch {
		return nil, errs.New(sluicev1.ErrorCode_FENCED_LEADER_EPOCH, "stale leader epoch %d for %s-%d, current is %d",
			r.LeaderEpoch, r.Topic, r.Partition, p.LeaderEpoch)
	}
	replicas := p.Replicas
	if r.Replicas != nil {
		if err := checkReplicas(im, r.Replicas); err != nil {
			return nil, err
		}
		replicas = r.Replicas
	}
	isr := p.ISR
	if r.ISR != nil {
		isr = r.ISR
	}
	if len(isr) == 0 {
		return nil, invalid("%s-%d: empty ISR", r.Topic, r.Partition)
	}
	for i, id := range isr {
		if slices.Contains(isr[:i], id) || !slices.Contains(replicas, id) {
			return nil, invalid("%s-%d: ISR %v is not a set of replicas %v", r.Topic, r.Partition, isr, replicas)
		}
	}
	leader := p.Leader
	if r.Leader != NoChange {
		if r.Leader < NoLeader {
			return nil, invalid("%s-%d: invalid leader %d", r.Topic, r.Partition, r.Leader)
		}
		if r.Leader != p.Leader && r.Leader != NoLeader {
			if b := im.Brokers[r.Leader]; b == nil || b.Fenced {
				return nil, invalid("%s-%d: new leader %d is not a live broker", r.Topic, r.Partition, r.Leader)
			}
			if !im.ReplicaLive(r.Topic, r.Partition, r.Leader) {
				return nil, invalid("%s-%d: new leader %d reported its replica offline", r.Topic, r.Partition, r.Leader)
			}
		}
		leader = r.Leader
	}
	if leader != NoLeader && !slices.Contains(isr, leader) {
		return nil, invalid("%s-%d: leader %d is not in ISR %v", r.Topic, r.Partition, leader, isr)
	}
	adding, removing, err := reassignmentAfter(p, r, replicas)
	if err != nil {
		return nil, err
	}

	// All checks passed: write.
	newReplicas := slices.Clone(replicas)
	// Keep the ISR in replica order so equal sets compare equal.
	newISR := make([]int32, 0, len(isr))
	for _, id := range newReplicas {
		if slices.Contains(isr, id) {
			newISR = append(newISR, id)
		}
	}
	p.Replicas, p.ISR = newReplicas, newISR
	p.AddingReplicas, p.RemovingReplicas = cloneNonEmpty(adding), cloneNonEmpty(removing)
	if leader != p.Leader {
		p.Leader = leader
		p.LeaderEpoch++
	}
	p.PartitionEpoch++
	return p.Clone(), nil
}

// reassignmentAfter returns the adding and removing replicas partition p
// has after change r, whose replica list is replicas, and checks them
// (KIP-455 rules):
//
//   - ClearReassignment ends the reassignment; it may not also set one;
//   - non-empty AddingReplicas or RemovingReplicas set both lists; with
//     neither, the running reassignment (if any) is kept;
//   - each list is duplicate-free and a subset of replicas (a change that
//     drops a replica still being added or removed must clear or reset
//     the reassignment), and the two are disjoint;
//   - the target (replicas minus the removing ones) is not empty.
//
// Violations are INVALID_REPLICA_ASSIGNMENT.
func reassignmentAfter(p *PartitionState, r PartitionChange, replicas []int32) (adding, removing []int32, err error) {
	bad := func(format string, args ...any) error {
		return errs.New(sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT, "%s-%d: %s", r.Topic, r.Partition, fmt.Sprintf(format, args...))
	}
	set := len(r.AddingReplicas) > 0 || len(r.RemovingReplicas) > 0
	switch {
	case r.ClearReassignment && set:
		return nil, nil, bad("a change cannot both clear and set a reassignment")
	case r.ClearReassignment:
		return nil, nil, nil
	case set:
		adding, removing = r.AddingReplicas, r.RemovingReplicas
	default:
		adding, removing = p.AddingReplicas, p.RemovingReplicas
	}
	for _, l := range []struct {
		name string
		ids  []int32
	}{{"adding", adding}, {"removing", removing}} {
		for i, id := range l.ids {
			if slices.Contains(l.ids[:i], id) {
				return nil, nil, bad("replica %d listed twice in the %s replicas %v", id, l.name, l.ids)
			}
			if !slices.Contains(replicas, id) {
				return nil, nil, bad("%s replica %d is not in the replicas %v", l.name, id, replicas)
			}
		}
	}
	for _, id := range adding {
		if slices.Contains(removing, id) {
			return nil, nil, bad("replica %d is both being added and removed", id)
		}
	}
	if len(removing) >= len(replicas) {
		return nil, nil, bad("every replica of %v is being removed", replicas)
	}
	return adding, removing, nil
}

// cloneNonEmpty copies ids, returning nil for an empty list so that images
// built by Apply and images decoded from JSON (omitempty) compare equal.
func cloneNonEmpty[T any](ids []T) []T {
	if len(ids) == 0 {
		return nil
	}
	return slices.Clone(ids)
}

// applyProducerIDsBlock: the record must name exactly the current next
// block start, so two allocations computed from the same image cannot both
// be accepted; each accepted block moves the start forward by the block
// size, so blocks never overlap.
func applyProducerIDsBlock(im *Image, r ProducerIDsBlock) (int64, int64, error) {
	if im.Brokers[r.BrokerID] == nil {
		return 0, 0, invalid("producer id block for unregistered broker %d", r.BrokerID)
	}
	next := im.nextBlockStart()
	if r.NextBlockStart != next {
		return 0, 0, invalid("producer id block start %d is not the next block start %d", r.NextBlockStart, next)
	}
	im.NextProducerIDBlockStart = next + ProducerIDBlockSize
	return next, next + ProducerIDBlockSize, nil
}

func applyFeatureLevel(im *Image, r FeatureLevel) error {
	max, ok := SupportedFeatures[r.Name]
	if !ok {
		return invalid("unknown feature %q", r.Name)
	}
	if r.Level < 0 || r.Level > max {
		return invalid("feature %s level %d is outside 0..%d", r.Name, r.Level, max)
	}
	im.Features[r.Name] = r.Level
	return nil
}

func applyConfigChange(im *Image, r ConfigChange) error {
	if r.Key == "" {
		return errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "empty config key")
	}
	configs := im.Configs
	if r.Topic != "" {
		t := im.Topics[r.Topic]
		if t == nil {
			return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", errs.Echo(r.Topic))
		}
		if t.Configs == nil {
			t.Configs = map[string]string{}
		}
		configs = t.Configs
	}
	if r.Value == "" {
		delete(configs, r.Key)
	} else {
		configs[r.Key] = r.Value
	}
	return nil
}

// applyBootstrapCluster sets the cluster id once.
func applyBootstrapCluster(im *Image, r BootstrapCluster) error {
	if r.ClusterID == "" {
		return invalid("cluster id is empty")
	}
	if im.ClusterID != "" {
		return invalid("cluster is already bootstrapped with id %s", im.ClusterID)
	}
	im.ClusterID = r.ClusterID
	return nil
}
