package controller

import (
	"maps"
	"slices"
	"sort"
)

// Image is the metadata state built by applying the metadata log in order.
// An Image is a plain value with no locks: the owner (the FSM adapter) guards
// it, and readers get a deep copy from Clone. Everything in it is derived
// deterministically from the records and their offsets, so every voter that
// applied the same log holds an equal (reflect.DeepEqual) Image.
type Image struct {
	// Offset is the Raft index of the last log entry applied (accepted or
	// rejected); 0 before any.
	Offset uint64 `json:"offset"`
	// ClusterID is set once by BootstrapCluster; empty before.
	ClusterID string `json:"cluster_id,omitempty"`
	// Brokers by broker id.
	Brokers map[int32]*Broker `json:"brokers"`
	// Topics by name.
	Topics map[string]*Topic `json:"topics"`
	// NextProducerIDBlockStart is the start of the next producer id block
	// to allocate; it only grows.
	NextProducerIDBlockStart int64 `json:"next_producer_id_block_start"`
	// Features holds finalized feature levels by name.
	Features map[string]int16 `json:"features"`
	// Configs holds cluster-wide config overrides (ConfigChange with no topic).
	Configs map[string]string `json:"configs"`
	// Users holds the SCRAM credentials (scram.go) by user name, then
	// mechanism. A user is here only while it has a credential: no inner
	// map is empty. Absent from the snapshots of clusters without users.
	Users map[string]map[string]ScramCredential `json:"users,omitempty"`
	// Acls holds the access control lists (acl.go), each ACL once.
	// Absent from the snapshots of clusters without ACLs.
	Acls AclSet `json:"acls,omitempty"`
	// AclsVersion is the offset of the last record that changed Acls (0:
	// none has): an authorizer's index of the ACLs built at one version
	// is current while the version stays. It is the same on every voter
	// and broker at the same offset.
	AclsVersion uint64 `json:"acls_version,omitempty"`
	// ClientQuotas holds the client quotas (quota.go). Absent from the
	// snapshots of clusters without quotas.
	ClientQuotas QuotaMap `json:"client_quotas,omitempty"`
	// QuotasVersion is the offset of the last record that changed
	// ClientQuotas (0: none has), as AclsVersion is for Acls: a broker
	// rebuilds its quota table only when it moves.
	QuotasVersion uint64 `json:"quotas_version,omitempty"`
}

// Broker is a registered broker.
type Broker struct {
	ID int32 `json:"id"`
	// Address is the client listener's advertised address (Metadata).
	Address string `json:"address"`
	// InternalAddress is the internal listener's advertised address
	// (decision 41); empty in images built from registrations that predate
	// it. Dial InterBrokerAddress, not this field.
	InternalAddress string `json:"internal_address,omitempty"`
	// KafkaAddress is the Kafka-protocol listener's advertised address
	// (issue 34), answered in Kafka Metadata; empty when the broker has no
	// Kafka listener (or registered before it had one), and Kafka
	// Metadata then leaves the broker out.
	KafkaAddress  string `json:"kafka_address,omitempty"`
	Rack          string `json:"rack,omitempty"`
	IncarnationID string `json:"incarnation_id"`
	// Epoch is the Raft index of the broker's latest registration.
	Epoch int64 `json:"epoch"`
	// Fenced brokers lead nothing and receive no new replicas.
	Fenced bool `json:"fenced"`
	// MaxReplicas is the most partition replicas the broker accepts, as
	// it registered (0: no limit). The controller refuses a topic
	// creation or a reassignment that would place more on it
	// (CheckReplicaLimits); replicas already placed stay. OpenFilesLimit
	// is the open-files limit it was derived from (0: unknown).
	MaxReplicas    int32 `json:"max_replicas,omitempty"`
	OpenFilesLimit int64 `json:"open_files_limit,omitempty"`
	// OfflineReplicas are the replicas this incarnation reported failed on
	// its disk (decision 42), sorted by topic and partition; nil when
	// none. They lead nothing and are kept out of the ISR, as a fenced
	// broker's replicas are, until the broker registers again.
	OfflineReplicas []OfflineReplica `json:"offline_replicas,omitempty"`
}

// OfflineReplica is a partition replica whose log failed on its broker's
// disk (decision 42).
type OfflineReplica struct {
	Topic string `json:"topic"`
	// TopicID tells a re-created topic of the same name apart: a report
	// about the old one does not take the new one's replica offline.
	TopicID   string `json:"topic_id"`
	Partition int32  `json:"partition"`
	// Path and Error are what failed, for operators: the partition's
	// directory and the failure ("write <file>: input/output error").
	Path  string `json:"path,omitempty"`
	Error string `json:"error,omitempty"`
}

// ReplicaOffline reports whether broker b reported its replica of
// partition of the topic with id topicID failed. It scans b's reports:
// callers that know the topic's name use ReplicaLive, a binary search.
func (b *Broker) ReplicaOffline(topicID string, partition int32) bool {
	for _, r := range b.OfflineReplicas {
		if r.TopicID == topicID && r.Partition == partition {
			return true
		}
	}
	return false
}

// ReplicaLive reports whether replica id of partition of topic can lead
// it or be in its ISR: its broker is registered and unfenced and has not
// reported that replica offline.
func (im *Image) ReplicaLive(topic string, partition, id int32) bool {
	b := im.Brokers[id]
	if b == nil || b.Fenced {
		return false
	}
	if len(b.OfflineReplicas) == 0 {
		return true
	}
	t := im.Topics[topic]
	return t == nil || offlineReplicaIndex(b.OfflineReplicas, topic, t.ID, partition) < 0
}

// InterBrokerAddress is where other nodes call b's inter-node services
// (replica fetches, transaction markers and verification): its internal
// listener, or its client address when it registered without one (a
// registration logged before decision 41, served on one listener).
func (b *Broker) InterBrokerAddress() string {
	if b.InternalAddress != "" {
		return b.InternalAddress
	}
	return b.Address
}

// Topic is one topic and its partitions (partition i is Partitions[i]).
type Topic struct {
	Name       string            `json:"name"`
	ID         string            `json:"id"`
	Partitions []*PartitionState `json:"partitions"`
	Configs    map[string]string `json:"configs"`
}

// PartitionState is the replication state of one partition.
//
// While a reassignment runs (KIP-455), Replicas is the target assignment
// followed by the replicas being removed (Kafka's order, so that leader
// preference already follows the target); AddingReplicas are the target
// replicas that were not replicas before, RemovingReplicas those that will
// be dropped. Both are subsets of Replicas, disjoint, and empty (nil) when
// no reassignment runs. See ReassignmentCompletions for when it ends.
type PartitionState struct {
	// Replicas in assignment (preference) order.
	Replicas []int32 `json:"replicas"`
	// Leader is the leading broker, or NoLeader when offline.
	Leader int32 `json:"leader"`
	// LeaderEpoch increments on every change of leader.
	LeaderEpoch int32 `json:"leader_epoch"`
	// ISR is the in-sync replica set, in replica order.
	ISR []int32 `json:"isr"`
	// PartitionEpoch increments on every accepted PartitionChange.
	PartitionEpoch int32 `json:"partition_epoch"`
	// AddingReplicas are the replicas a running reassignment adds, in
	// target order; nil when none runs.
	AddingReplicas []int32 `json:"adding_replicas,omitempty"`
	// RemovingReplicas are the replicas a running reassignment drops once
	// it completes, in their old order; nil when none runs.
	RemovingReplicas []int32 `json:"removing_replicas,omitempty"`
}

// NewImage returns the empty image a fresh cluster starts from.
func NewImage() *Image {
	return &Image{
		Brokers:                  map[int32]*Broker{},
		Topics:                   map[string]*Topic{},
		NextProducerIDBlockStart: FirstProducerIDBlockStart,
		Features:                 map[string]int16{},
		Configs:                  map[string]string{},
		Users:                    map[string]map[string]ScramCredential{},
		Acls:                     AclSet{},
		ClientQuotas:             QuotaMap{},
	}
}

// Clone returns a deep copy of im; nothing in the copy aliases im. Nil maps
// in im become empty maps in the copy, so a Clone of a decoded image and a
// Clone of a built one compare equal.
func (im *Image) Clone() *Image {
	out := &Image{
		Offset:                   im.Offset,
		ClusterID:                im.ClusterID,
		Brokers:                  make(map[int32]*Broker, len(im.Brokers)),
		Topics:                   make(map[string]*Topic, len(im.Topics)),
		NextProducerIDBlockStart: im.NextProducerIDBlockStart,
		Features:                 cloneMap(im.Features),
		Configs:                  cloneMap(im.Configs),
		Users:                    cloneUsers(im.Users),
		Acls:                     cloneMap(im.Acls),
		AclsVersion:              im.AclsVersion,
		ClientQuotas:             cloneMap(im.ClientQuotas),
		QuotasVersion:            im.QuotasVersion,
	}
	for id, b := range im.Brokers {
		out.Brokers[id] = b.clone()
	}
	for name, t := range im.Topics {
		out.Topics[name] = t.Clone()
	}
	return out
}

// Clone returns a deep copy of t.
func (t *Topic) Clone() *Topic {
	out := &Topic{Name: t.Name, ID: t.ID, Configs: cloneMap(t.Configs),
		Partitions: make([]*PartitionState, len(t.Partitions))}
	for i, p := range t.Partitions {
		out.Partitions[i] = p.Clone()
	}
	return out
}

// Clone returns a deep copy of p.
func (p *PartitionState) Clone() *PartitionState {
	c := *p
	c.Replicas = slices.Clone(p.Replicas)
	c.ISR = slices.Clone(p.ISR)
	c.AddingReplicas = slices.Clone(p.AddingReplicas)
	c.RemovingReplicas = slices.Clone(p.RemovingReplicas)
	return &c
}

// Reassigning reports whether a reassignment of p is running.
func (p *PartitionState) Reassigning() bool {
	return len(p.AddingReplicas) > 0 || len(p.RemovingReplicas) > 0
}

// TargetReplicas is the assignment p converges to: Replicas without the
// replicas being removed (Replicas itself when no reassignment runs). The
// result is a new slice.
func (p *PartitionState) TargetReplicas() []int32 {
	out := make([]int32, 0, len(p.Replicas))
	for _, id := range p.Replicas {
		if !slices.Contains(p.RemovingReplicas, id) {
			out = append(out, id)
		}
	}
	return out
}

// UnderReplicated reports whether a replica of p is out of its ISR. Replicas
// a running reassignment is still adding do not count until they join (as
// Kafka, which measures a moving partition against its original replica
// set): a healthy partition is not under-replicated just because it moves.
func (p *PartitionState) UnderReplicated() bool {
	for _, id := range p.Replicas {
		if !slices.Contains(p.ISR, id) && !slices.Contains(p.AddingReplicas, id) {
			return true
		}
	}
	return false
}

// LiveBrokers returns the ids of registered, unfenced brokers in ascending
// order.
func (im *Image) LiveBrokers() []int32 {
	var ids []int32
	for id, b := range im.Brokers {
		if !b.Fenced {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Partition returns the partition topic/index, or nil if it does not exist.
// The result aliases the image.
func (im *Image) Partition(topic string, index int32) *PartitionState {
	t := im.Topics[topic]
	if t == nil || index < 0 || int(index) >= len(t.Partitions) {
		return nil
	}
	return t.Partitions[index]
}

// TopicNames returns the topic names in ascending order.
func (im *Image) TopicNames() []string {
	names := make([]string, 0, len(im.Topics))
	for n := range im.Topics {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// nextBlockStart is the next producer id block start, treating a zero-value
// image (not built by NewImage) as fresh.
func (im *Image) nextBlockStart() int64 {
	if im.NextProducerIDBlockStart < FirstProducerIDBlockStart {
		return FirstProducerIDBlockStart
	}
	return im.NextProducerIDBlockStart
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	maps.Copy(out, m)
	return out
}
