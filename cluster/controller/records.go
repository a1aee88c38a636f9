// Package controller is Sluice's metadata controller (DESIGN §6): a Raft
// quorum (hashicorp/raft) whose replicated log holds metadata records and
// whose state machine folds them into an Image.
//
// The package is layered so that the rules can be tested without sockets:
//
//   - records.go: the record types and their encoding.
//   - image.go: the metadata Image the records build.
//   - fsm.go: the pure Apply(image, record, offset): the rules.
//   - raftfsm.go: the raft.FSM adapter, snapshots, and the metadata stream
//     (WaitForOffset, Subscribe).
//   - placement.go: pure replica assignment for new topics.
//   - election.go: pure partition leader election.
//   - reassign.go: partition reassignment (KIP-455): the pure start and
//     completion rules and the controller's driver.
//   - preferred.go: preferred-leader election, on demand and automatic.
//   - unregister.go: removing a broker's registration (KIP-631).
//   - topicdefaults.go: the cluster defaults for new topics.
//   - scram.go: users' SCRAM credentials (issue 32).
//   - acl.go: access control lists (issue 33).
//   - quota.go: client quotas (issue 33).
//   - partitions.go, topicconfigs.go: partitions added to a topic and
//     its configs altered (issue 34).
//   - controller.go: the Raft node, proposals and the convenience wrappers.
package controller

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// RecordType names a metadata record on the wire. The values are part of
// the log format and must never change meaning.
type RecordType string

// The record types of the metadata log.
const (
	TypeRegisterBroker   RecordType = "RegisterBroker"
	TypeFenceBroker      RecordType = "FenceBroker"
	TypeUnfenceBroker    RecordType = "UnfenceBroker"
	TypeCreateTopic      RecordType = "CreateTopic"
	TypeDeleteTopic      RecordType = "DeleteTopic"
	TypePartitionChange  RecordType = "PartitionChange"
	TypeProducerIDsBlock RecordType = "ProducerIDsBlock"
	TypeFeatureLevel     RecordType = "FeatureLevel"
	TypeConfigChange     RecordType = "ConfigChange"
	TypeBootstrapCluster RecordType = "BootstrapCluster"
	TypeOfflineReplicas  RecordType = "OfflineReplicas"
	TypeUnregisterBroker RecordType = "UnregisterBroker"
	// The SCRAM credentials of users (scram.go).
	TypeUserScramCredential       RecordType = "UserScramCredential"
	TypeRemoveUserScramCredential RecordType = "RemoveUserScramCredential"
	// Access control lists (acl.go).
	TypeCreateAcl RecordType = "CreateAcl"
	TypeRemoveAcl RecordType = "RemoveAcl"
	// Client quotas (quota.go).
	TypeClientQuota RecordType = "ClientQuota"
	// Topics' partitions added (partitions.go) and configs replaced
	// (topicconfigs.go).
	TypeCreatePartitions RecordType = "CreatePartitions"
	TypeTopicConfigs     RecordType = "TopicConfigs"
)

// RecordVersion is the only record version this code writes and reads.
// A reader refuses versions it does not know rather than guessing, so a
// newer controller must not write version 2 until every voter reads it.
const RecordVersion = 1

// Record is one metadata record. Implementations are plain values; the FSM
// never retains a pointer into a Record it was given (it copies slices and
// maps), so callers may reuse them after Apply returns.
type Record interface {
	// Type returns the record's wire type.
	Type() RecordType
}

// RegisterBroker registers (or re-registers) a broker. The FSM assigns the
// broker a new broker epoch equal to the Raft index (offset) of this record,
// and the broker starts fenced: it must be unfenced with that epoch (after
// catching up with the metadata log) before it leads or is placed on.
// Registering again with the same IncarnationID is idempotent (a retried
// registration): the epoch and fencing state are kept.
//
// Address is the broker's client listener, given to clients in Metadata;
// InternalAddress its internal listener, where the other nodes call its
// inter-node services (decision 41). InternalAddress was added without a
// version bump: records written before it decode with it empty, and
// Broker.InterBrokerAddress then falls back to Address, the one listener
// such a broker had.
//
// KafkaAddress is its Kafka-protocol listener (issue 34), given to Kafka
// clients in Metadata; added the same way, so records without it decode
// with it empty: the broker has no Kafka listener.
type RegisterBroker struct {
	BrokerID        int32  `json:"broker_id"`
	Address         string `json:"address"`
	InternalAddress string `json:"internal_address,omitempty"`
	KafkaAddress    string `json:"kafka_address,omitempty"`
	Rack            string `json:"rack,omitempty"`
	IncarnationID   string `json:"incarnation_id"`
	// MaxReplicas and OpenFilesLimit are Broker's (issue 29); absent
	// (0) from a broker that predates them.
	MaxReplicas    int32 `json:"max_replicas,omitempty"`
	OpenFilesLimit int64 `json:"open_files_limit,omitempty"`
}

// FenceBroker fences a broker: it may not lead partitions and is not used
// for placement. BrokerEpoch must be the broker's current epoch, otherwise
// the record is rejected with STALE_BROKER_EPOCH.
type FenceBroker struct {
	BrokerID    int32 `json:"broker_id"`
	BrokerEpoch int64 `json:"broker_epoch"`
}

// UnfenceBroker unfences a broker. BrokerEpoch must be the broker's current
// epoch, otherwise the record is rejected with STALE_BROKER_EPOCH.
type UnfenceBroker struct {
	BrokerID    int32 `json:"broker_id"`
	BrokerEpoch int64 `json:"broker_epoch"`
}

// OfflineReplicas sets the replicas a broker reports failed on its disk
// (decision 42), replacing the set it reported before; an empty list
// clears it. BrokerEpoch must be the broker's current epoch, otherwise the
// record is rejected with STALE_BROKER_EPOCH: a new incarnation (a
// restart) starts with none. The record changes no partition itself: the
// controller follows it with ReelectChanges, which moves leaderships and
// ISR memberships off the offline replicas as it does off a fenced
// broker. (Added to version 1 as a new type: a voter that does not know
// it must not apply a log that holds it.)
type OfflineReplicas struct {
	BrokerID    int32            `json:"broker_id"`
	BrokerEpoch int64            `json:"broker_epoch"`
	Replicas    []OfflineReplica `json:"replicas,omitempty"`
}

// UnregisterBroker removes a broker's registration from the image
// (Kafka's UnregisterBrokerRecord, KIP-631): for a broker gone for good,
// whose registration would otherwise stay forever. BrokerEpoch must be
// the broker's current epoch (STALE_BROKER_EPOCH otherwise), so a removal
// decided about one incarnation never removes a newer one. The FSM refuses
// an unknown id (BROKER_ID_NOT_REGISTERED), an unfenced broker, and a
// broker that is still a replica of some partition (INVALID_REQUEST both):
// after the record no partition names a broker the image does not know.
// That a fenced broker has also stopped heartbeating is the proposer's
// check (it needs the clock; Controller.UnregisterBroker). (Added to
// version 1 as a new type: a voter or broker that does not know it must
// not apply a log that holds it.)
type UnregisterBroker struct {
	BrokerID    int32 `json:"broker_id"`
	BrokerEpoch int64 `json:"broker_epoch"`
}

// PartitionAssignment is the replica list of one partition, in preference
// order (the first replica is the preferred leader).
type PartitionAssignment struct {
	Replicas []int32 `json:"replicas"`
}

// CreateTopic creates a topic with the given replica assignment, one entry
// per partition (partition i is Partitions[i]). The FSM sets each
// partition's ISR to its unfenced replicas and elects the first of them as
// leader (leader -1 and ISR = Replicas when none is unfenced).
type CreateTopic struct {
	Name       string                `json:"name"`
	TopicID    string                `json:"topic_id"`
	Partitions []PartitionAssignment `json:"partitions"`
	Configs    map[string]string     `json:"configs,omitempty"`
}

// DeleteTopic removes a topic and its partitions from the image.
type DeleteTopic struct {
	Name string `json:"name"`
}

// NoChange in a PartitionChange's Leader field means "keep the leader".
const NoChange int32 = -2

// NoLeader is the leader id of an offline partition.
const NoLeader int32 = -1

// PartitionChange changes the leader, ISR and/or replicas of one partition
// (leader election, AlterPartition from the leader, reassignment).
//
// PartitionEpoch and LeaderEpoch are the values the proposer read: the FSM
// rejects the change unless both equal the partition's current values, so a
// change computed from a stale view can never overwrite a newer one.
// Leader is the new leader (NoLeader for offline, NoChange to keep it); nil
// ISR or Replicas keep the current list. Every accepted change increments
// the PartitionEpoch; a change of leader also increments the LeaderEpoch.
//
// The reassignment fields (KIP-455) were added to version 1 as optional
// fields: a record written before them decodes with all three unset, which
// means "keep the running reassignment", exactly what such a record did.
// A record with AddingReplicas or RemovingReplicas non-empty sets the
// running reassignment to exactly those two lists (an absent one is empty;
// an empty list and an absent one are the same, since omitempty drops
// both); ClearReassignment ends it. Setting and clearing at once is
// rejected.
type PartitionChange struct {
	Topic             string  `json:"topic"`
	Partition         int32   `json:"partition"`
	PartitionEpoch    int32   `json:"partition_epoch"`
	LeaderEpoch       int32   `json:"leader_epoch"`
	Leader            int32   `json:"leader"`
	ISR               []int32 `json:"isr,omitempty"`
	Replicas          []int32 `json:"replicas,omitempty"`
	AddingReplicas    []int32 `json:"adding_replicas,omitempty"`
	RemovingReplicas  []int32 `json:"removing_replicas,omitempty"`
	ClearReassignment bool    `json:"clear_reassignment,omitempty"`
}

// ProducerIDBlockSize is the number of producer ids in one block.
const ProducerIDBlockSize = 1000

// FirstProducerIDBlockStart is the start of the first block. Producer id 0
// is never allocated (block [0, 1000) is skipped), so a zero producer id in
// a batch can never be mistaken for an allocated one.
const FirstProducerIDBlockStart int64 = ProducerIDBlockSize

// ProducerIDsBlock allocates the block [NextBlockStart,
// NextBlockStart+ProducerIDBlockSize) to BrokerID. NextBlockStart must equal
// the image's current next block start, so two proposals computed from the
// same image cannot both succeed and no id is handed out twice.
type ProducerIDsBlock struct {
	BrokerID       int32 `json:"broker_id"`
	NextBlockStart int64 `json:"next_block_start"`
}

// FeatureLevel finalizes a feature at a level (0 disables it). Only the
// features in SupportedFeatures are accepted, up to their maximum level.
type FeatureLevel struct {
	Name  string `json:"name"`
	Level int16  `json:"level"`
}

// ConfigChange sets (or, with an empty Value, deletes) one config key of a
// topic, or of the cluster when Topic is empty.
type ConfigChange struct {
	Topic string `json:"topic,omitempty"`
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

// BootstrapCluster names a new cluster. The first active controller of a
// fresh quorum proposes it once; a second one is rejected, so the cluster
// id never changes.
type BootstrapCluster struct {
	ClusterID string `json:"cluster_id"`
}

// Type implements Record.
func (OfflineReplicas) Type() RecordType { return TypeOfflineReplicas }

// Type implements Record.
func (BootstrapCluster) Type() RecordType { return TypeBootstrapCluster }

// Type implements Record.
func (UnregisterBroker) Type() RecordType { return TypeUnregisterBroker }

// Type implements Record.
func (RegisterBroker) Type() RecordType { return TypeRegisterBroker }

// Type implements Record.
func (FenceBroker) Type() RecordType { return TypeFenceBroker }

// Type implements Record.
func (UnfenceBroker) Type() RecordType { return TypeUnfenceBroker }

// Type implements Record.
func (CreateTopic) Type() RecordType { return TypeCreateTopic }

// Type implements Record.
func (DeleteTopic) Type() RecordType { return TypeDeleteTopic }

// Type implements Record.
func (PartitionChange) Type() RecordType { return TypePartitionChange }

// Type implements Record.
func (ProducerIDsBlock) Type() RecordType { return TypeProducerIDsBlock }

// Type implements Record.
func (FeatureLevel) Type() RecordType { return TypeFeatureLevel }

// Type implements Record.
func (ConfigChange) Type() RecordType { return TypeConfigChange }

// envelope is the header every encoded record starts with.
type envelope struct {
	Type    RecordType `json:"type"`
	Version int        `json:"version"`
}

// EncodeRecord encodes r as one JSON object: the envelope fields "type" and
// "version" followed by the record's own fields, e.g.
//
//	{"type":"FenceBroker","version":1,"broker_id":2,"broker_epoch":17}
//
// JSON is chosen over a binary form because metadata rates are low and a
// readable log is worth more than the bytes; encoding/json sorts map keys,
// so equal records encode to equal bytes. r must be one of this package's
// record values (not a pointer).
func EncodeRecord(r Record) ([]byte, error) {
	if _, ok := newRecord(r.Type()); !ok {
		return nil, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "unknown record type %q", r.Type())
	}
	head, err := json.Marshal(envelope{Type: r.Type(), Version: RecordVersion})
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	// Splice {"type":..,"version":1} and {fields...} into one object.
	var b bytes.Buffer
	b.Write(head[:len(head)-1])
	if len(body) > 2 {
		b.WriteByte(',')
		b.Write(body[1:])
	} else {
		b.WriteByte('}')
	}
	return b.Bytes(), nil
}

// DecodeRecord decodes a record written by EncodeRecord. It returns an
// INVALID_REQUEST *errs.Error for malformed input, an unknown type or a
// version other than RecordVersion. The returned Record is a value type
// (e.g. CreateTopic, not *CreateTopic).
func DecodeRecord(data []byte) (Record, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "malformed record: %w", err)
	}
	if env.Version != RecordVersion {
		return nil, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "record %s has unsupported version %d", env.Type, env.Version)
	}
	ptr, ok := newRecord(env.Type)
	if !ok {
		return nil, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "unknown record type %q", env.Type)
	}
	if err := json.Unmarshal(data, ptr); err != nil {
		return nil, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "malformed %s record: %w", env.Type, err)
	}
	return derefRecord(ptr), nil
}

// newRecord returns a pointer to a zero record of type t.
func newRecord(t RecordType) (any, bool) {
	switch t {
	case TypeRegisterBroker:
		return &RegisterBroker{}, true
	case TypeFenceBroker:
		return &FenceBroker{}, true
	case TypeUnfenceBroker:
		return &UnfenceBroker{}, true
	case TypeCreateTopic:
		return &CreateTopic{}, true
	case TypeDeleteTopic:
		return &DeleteTopic{}, true
	case TypePartitionChange:
		return &PartitionChange{}, true
	case TypeProducerIDsBlock:
		return &ProducerIDsBlock{}, true
	case TypeFeatureLevel:
		return &FeatureLevel{}, true
	case TypeConfigChange:
		return &ConfigChange{}, true
	case TypeBootstrapCluster:
		return &BootstrapCluster{}, true
	case TypeOfflineReplicas:
		return &OfflineReplicas{}, true
	case TypeUnregisterBroker:
		return &UnregisterBroker{}, true
	case TypeUserScramCredential:
		return &UserScramCredential{}, true
	case TypeRemoveUserScramCredential:
		return &RemoveUserScramCredential{}, true
	case TypeCreateAcl:
		return &CreateAcl{}, true
	case TypeRemoveAcl:
		return &RemoveAcl{}, true
	case TypeClientQuota:
		return &ClientQuota{}, true
	case TypeCreatePartitions:
		return &CreatePartitions{}, true
	case TypeTopicConfigs:
		return &TopicConfigs{}, true
	}
	return nil, false
}

func derefRecord(p any) Record {
	switch r := p.(type) {
	case *RegisterBroker:
		return *r
	case *FenceBroker:
		return *r
	case *UnfenceBroker:
		return *r
	case *CreateTopic:
		return *r
	case *DeleteTopic:
		return *r
	case *PartitionChange:
		return *r
	case *ProducerIDsBlock:
		return *r
	case *FeatureLevel:
		return *r
	case *ConfigChange:
		return *r
	case *BootstrapCluster:
		return *r
	case *OfflineReplicas:
		return *r
	case *UnregisterBroker:
		return *r
	case *UserScramCredential:
		return *r
	case *RemoveUserScramCredential:
		return *r
	case *CreateAcl:
		return *r
	case *RemoveAcl:
		return *r
	case *ClientQuota:
		return *r
	case *CreatePartitions:
		return *r
	case *TopicConfigs:
		return *r
	}
	panic(fmt.Sprintf("controller: unexpected record %T", p))
}
