package group

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/sluice-io/sluice/coordinator/keyhash"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the record format of the group coordinator's log,
// __consumer_offsets (DESIGN §11, decision 40); offsets_state.go rebuilds
// one partition's committed and pending offsets from it.

// OffsetsTopic is the internal topic holding committed offsets and group records.
const OffsetsTopic = "__consumer_offsets"

// DefaultOffsetsPartitions is offsets.topic.num.partitions' default.
const DefaultOffsetsPartitions = 50

// MaxMetadataBytes bounds an offset's metadata (offset.metadata.max.bytes).
const MaxMetadataBytes = 4096

// MaxIDBytes bounds a group id (Kafka has no limit; a key must fit
// the record format's 16-bit lengths, and ids this long are mistakes).
const MaxIDBytes = 255

// PartitionFor is the __consumer_offsets partition of group: the same
// hash as transactional ids (keyhash.PartitionFor), so any client finds a
// group's coordinator partition without asking.
func PartitionFor(group string, numPartitions int32) int32 {
	return keyhash.PartitionFor(group, numPartitions)
}

// ValidateID checks a group id: non-empty valid UTF-8 of at most
// MaxIDBytes bytes; else INVALID_GROUP_ID. The coordinator routes (and
// Locator finds) only ids it accepts.
func ValidateID(group string) error {
	switch {
	case group == "":
		return errs.New(sluicev1.ErrorCode_INVALID_GROUP_ID, "the group id is empty")
	case len(group) > MaxIDBytes:
		return errs.New(sluicev1.ErrorCode_INVALID_GROUP_ID, "the group id is %d bytes long; at most %d", len(group), MaxIDBytes)
	case !utf8.ValidString(group):
		return errs.New(sluicev1.ErrorCode_INVALID_GROUP_ID, "the group id is not valid UTF-8")
	}
	return nil
}

// ErrCorruptRecord is wrapped by the decoders' errors.
var ErrCorruptRecord = errors.New("corrupt __consumer_offsets record")

// RecordVersion is the value version of offsets and of KIP-848 group
// records; readers refuse versions above ClassicRecordVersion rather than
// guess (as coordinator/txn does).
const RecordVersion = 1

// ClassicRecordVersion is the version of a group value that holds a
// classic group (GroupRecord.Classic; decision 70). Group values of
// KIP-848 groups stay at version 1, so that a broker from before the
// classic protocol still reads them.
const ClassicRecordVersion = 2

// Key types: the first two bytes of every key (big-endian).
const (
	// KeyOffset keys a committed offset: group, topic, partition.
	KeyOffset uint16 = 1
	// KeyGroup keys a group's own record (its epoch): group.
	KeyGroup uint16 = 2
	// KeyMember keys a KIP-848 member's record (decision 72): group,
	// member id.
	KeyMember uint16 = 3
)

// The record format of __consumer_offsets (decision 40).
//
// Key, binary and big-endian so that compaction keeps the last record per
// (group, topic, partition) and per group:
//
//	offset: type u16 = 1, len u16, group, len u16, topic, partition i32
//	group:  type u16 = 2, len u16, group
//	member: type u16 = 3, len u16, group, len u16, member id
//
// Value: a JSON object, or nil (a tombstone: the offset, or the group and
// its epoch, is deleted):
//
//	offset: {"version":1,"offset":42,"leader_epoch":3,"metadata":"",
//	         "commit_time_ms":1794026921817}
//	group:  {"version":1,"epoch":7,"time_ms":1794026921817,
//	         "assignment_epoch":7,"metadata_hash":1234567}
//	        (assignment_epoch and metadata_hash since decision 72; absent:
//	        the assignment epoch is the epoch, the metadata unknown)
//	member (decision 72; a KIP-848 member: its metadata, its share of
//	        the target assignment, and where it is in its reconciliation;
//	        state 0 Stable, 1 UnrevokedPartitions, 2 UnreleasedPartitions):
//	        {"version":1,"instance_id":"","rack_id":"","client_id":"c",
//	         "topics":["in"],"assignor":"","rebalance_timeout_ms":60000,
//	         "session_timeout_ms":45000,"epoch":7,"previous_epoch":6,
//	         "state":0,"assigned":{"in":[0,1]},"pending":{},
//	         "target":{"in":[0,1]}}
//	        (decision 73: a member subscribed with a regex has version 2
//	        and "regex":"in-.*","regex_topics":["in-a","in-b"]; decision
//	        74: "assignment_epochs":{"in":{"0":5,"1":7}}, the epoch each
//	        held partition was given at, KIP-1251)
//	classic group (decision 70; epoch = generation):
//	        {"version":2,"epoch":7,"time_ms":1794026921817,
//	         "classic":{"protocol_type":"consumer","generation":7,
//	           "protocol":"range","leader":"c-1",
//	           "members":[{"member_id":"c-1","instance_id":"",
//	             "client_id":"c","client_host":"/10.0.0.1",
//	             "rebalance_timeout_ms":60000,"session_timeout_ms":45000,
//	             "subscription":"<base64>","assignment":"<base64>"}]}}

// RecordKey is a decoded key.
type RecordKey struct {
	Type      uint16
	Group     string
	Topic     string // KeyOffset only
	Partition int32  // KeyOffset only
	Member    string // KeyMember only
}

// OffsetKey encodes the key of group's offset of topic/partition.
func OffsetKey(group, topic string, partition int32) []byte {
	b := make([]byte, 0, 2+2+len(group)+2+len(topic)+4)
	b = binary.BigEndian.AppendUint16(b, KeyOffset)
	b = appendString(b, group)
	b = appendString(b, topic)
	return binary.BigEndian.AppendUint32(b, uint32(partition))
}

// MemberKey encodes the key of the record of group's KIP-848 member.
func MemberKey(group, memberID string) []byte {
	b := make([]byte, 0, 2+2+len(group)+2+len(memberID))
	b = binary.BigEndian.AppendUint16(b, KeyMember)
	b = appendString(b, group)
	return appendString(b, memberID)
}

// GroupKey encodes the key of group's record.
func GroupKey(group string) []byte {
	b := make([]byte, 0, 2+2+len(group))
	b = binary.BigEndian.AppendUint16(b, KeyGroup)
	return appendString(b, group)
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// DecodeKey decodes a key written by OffsetKey, GroupKey or MemberKey.
func DecodeKey(b []byte) (RecordKey, error) {
	if len(b) < 2 {
		return RecordKey{}, fmt.Errorf("%w: key of %d bytes", ErrCorruptRecord, len(b))
	}
	k := RecordKey{Type: binary.BigEndian.Uint16(b)}
	rest := b[2:]
	str := func() (string, bool) {
		if len(rest) < 2 {
			return "", false
		}
		n := int(binary.BigEndian.Uint16(rest))
		if len(rest) < 2+n {
			return "", false
		}
		s := string(rest[2 : 2+n])
		rest = rest[2+n:]
		return s, true
	}
	var ok bool
	switch k.Type {
	case KeyOffset:
		if k.Group, ok = str(); !ok {
			break
		}
		if k.Topic, ok = str(); !ok {
			break
		}
		if len(rest) != 4 {
			ok = false
			break
		}
		k.Partition = int32(binary.BigEndian.Uint32(rest))
		rest = nil
	case KeyGroup:
		k.Group, ok = str()
	case KeyMember:
		if k.Group, ok = str(); !ok {
			break
		}
		k.Member, ok = str()
	default:
		return RecordKey{}, fmt.Errorf("%w: unknown key type %d", ErrCorruptRecord, k.Type)
	}
	if !ok || len(rest) != 0 {
		return RecordKey{}, fmt.Errorf("%w: malformed key of type %d", ErrCorruptRecord, k.Type)
	}
	return k, nil
}

// Offset is a committed offset.
type Offset struct {
	// Offset is the next offset to consume.
	Offset      int64
	LeaderEpoch int32
	Metadata    string
	// CommitTimeMs is when the coordinator accepted it.
	CommitTimeMs int64
	// RecordOffset is the offset of the record that committed it in
	// __consumer_offsets (-1 before it is written). Of two commits of one
	// partition the later record wins, whichever path (plain or
	// transactional) wrote it — Kafka's rule.
	RecordOffset int64
}

type offsetValue struct {
	Version      int    `json:"version"`
	Offset       int64  `json:"offset"`
	LeaderEpoch  int32  `json:"leader_epoch"`
	Metadata     string `json:"metadata"`
	CommitTimeMs int64  `json:"commit_time_ms"`
}

// OffsetValue encodes o's value (RecordOffset is the record's own
// offset, not stored).
func OffsetValue(o Offset) []byte {
	b, _ := json.Marshal(offsetValue{Version: RecordVersion, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata, CommitTimeMs: o.CommitTimeMs})
	return b
}

// DecodeOffsetValue decodes a non-nil offset value; RecordOffset is -1.
func DecodeOffsetValue(b []byte) (Offset, error) {
	var v offsetValue
	if err := json.Unmarshal(b, &v); err != nil {
		return Offset{}, fmt.Errorf("%w: offset value: %v", ErrCorruptRecord, err)
	}
	if err := checkVersion(v.Version, RecordVersion); err != nil {
		return Offset{}, err
	}
	return Offset{Offset: v.Offset, LeaderEpoch: v.LeaderEpoch, Metadata: v.Metadata, CommitTimeMs: v.CommitTimeMs, RecordOffset: -1}, nil
}

// GroupRecord is a group's own record: its epoch, written whenever the
// group epoch goes up, so that a new coordinator continues above it and
// never hands out an epoch twice. For a classic group (Classic set) it
// is the group's whole metadata, written when a rebalance completes, and
// Epoch is its generation.
type GroupRecord struct {
	Epoch  int32 `json:"epoch"`
	TimeMs int64 `json:"time_ms"`
	// AssignmentEpoch is the epoch of the KIP-848 group's target
	// assignment, whose shares are in the member records (decision 72;
	// 0: the same as Epoch, as in records from before).
	AssignmentEpoch int32 `json:"assignment_epoch,omitempty"`
	// MetadataHash is the hash of the subscribed topics' metadata the
	// target was computed from (0: unknown; the next heartbeat computes
	// a new target).
	MetadataHash uint64 `json:"metadata_hash,omitempty"`
	// Classic is set for a classic group (version 2).
	Classic *ClassicGroupRecord `json:"classic,omitempty"`
}

// ClassicGroupRecord is a classic group's metadata as the log keeps it
// (Kafka's GroupMetadataValue): enough for a new coordinator to serve
// the members at their generation.
type ClassicGroupRecord struct {
	ProtocolType string `json:"protocol_type"`
	Generation   int32  `json:"generation"`
	// Protocol is the chosen protocol ("" when Empty).
	Protocol string                `json:"protocol"`
	Leader   string                `json:"leader"`
	Members  []ClassicMemberRecord `json:"members"`
}

// ClassicMemberRecord is one member of a ClassicGroupRecord.
type ClassicMemberRecord struct {
	MemberID           string `json:"member_id"`
	InstanceID         string `json:"instance_id"`
	ClientID           string `json:"client_id"`
	ClientHost         string `json:"client_host"`
	RebalanceTimeoutMs int64  `json:"rebalance_timeout_ms"`
	SessionTimeoutMs   int64  `json:"session_timeout_ms"`
	// Subscription is the member's metadata for the chosen protocol.
	Subscription []byte `json:"subscription"`
	Assignment   []byte `json:"assignment"`
}

type groupValue struct {
	Version int `json:"version"`
	GroupRecord
}

// GroupValue encodes g (version 2 when g.Classic is set, else 1).
func GroupValue(g GroupRecord) []byte {
	v := RecordVersion
	if g.Classic != nil {
		v = ClassicRecordVersion
		g.Epoch = g.Classic.Generation
	}
	b, _ := json.Marshal(groupValue{Version: v, GroupRecord: g})
	return b
}

// DecodeGroupValue decodes a non-nil group value.
func DecodeGroupValue(b []byte) (GroupRecord, error) {
	var v groupValue
	if err := json.Unmarshal(b, &v); err != nil {
		return GroupRecord{}, fmt.Errorf("%w: group value: %v", ErrCorruptRecord, err)
	}
	if err := checkVersion(v.Version, ClassicRecordVersion); err != nil {
		return GroupRecord{}, err
	}
	return v.GroupRecord, nil
}

// MemberRecord is a KIP-848 member as the log keeps it (decision 72;
// Kafka's ConsumerGroupMemberMetadataValue,
// ConsumerGroupTargetAssignmentMemberValue and
// ConsumerGroupCurrentMemberAssignmentValue in one record): enough for
// a new coordinator to go on serving the member at its epoch with its
// assignment. Assignments are normalized (partitions sorted).
type MemberRecord struct {
	InstanceID string `json:"instance_id"`
	RackID     string `json:"rack_id"`
	ClientID   string `json:"client_id"`
	// Topics: the topic names subscribed to, sorted (without the
	// regex's topics).
	Topics []string `json:"topics"`
	// Regex is the member's regular-expression subscription ("" none;
	// decision 73). RegexTopics are the topics it resolved to for the
	// member — the matches its caller may DESCRIBE — sorted; the member
	// subscribes to Topics and RegexTopics. Absent in records from
	// before: no regex. A record with a regex is written as value
	// version 2, so that a broker from before skips it (the member joins
	// that broker again) rather than load the member without its regex.
	Regex              string   `json:"regex,omitempty"`
	RegexTopics        []string `json:"regex_topics,omitempty"`
	Assignor           string   `json:"assignor"`
	RebalanceTimeoutMs int64    `json:"rebalance_timeout_ms"`
	SessionTimeoutMs   int64    `json:"session_timeout_ms"`
	// Epoch is the member epoch (-2: a departed static member).
	Epoch         int32       `json:"epoch"`
	PreviousEpoch int32       `json:"previous_epoch"`
	State         MemberState `json:"state"`
	// Assigned is what the member was last answered; Pending what it was
	// asked to release and has not reported released.
	Assigned Assignment `json:"assigned"`
	Pending  Assignment `json:"pending"`
	// Target is the member's share of the target assignment at the
	// group record's AssignmentEpoch.
	Target Assignment `json:"target"`
	// AssignmentEpochs: the member epoch each partition of Assigned and
	// Pending was given to the member at (KIP-1251). Absent in records
	// from before, and for a partition missing here: the member's Epoch
	// (the strictest stamp, which accepts only commits at that epoch).
	AssignmentEpochs AssignmentEpochs `json:"assignment_epochs,omitempty"`
}

type memberValue struct {
	Version int `json:"version"`
	MemberRecord
}

// MemberRegexRecordVersion is the value version of a member record
// with a regex (MemberRecord.Regex; decision 73); records without one
// stay at version 1.
const MemberRegexRecordVersion = 2

// MemberValue encodes m (version 2 when m has a regex, else 1).
func MemberValue(m MemberRecord) []byte {
	v := RecordVersion
	if m.Regex != "" {
		v = MemberRegexRecordVersion
	}
	b, _ := json.Marshal(memberValue{Version: v, MemberRecord: m})
	return b
}

// DecodeMemberValue decodes a non-nil member value; its assignments come
// back normalized and a state out of range is ErrCorruptRecord.
func DecodeMemberValue(b []byte) (MemberRecord, error) {
	var v memberValue
	if err := json.Unmarshal(b, &v); err != nil {
		return MemberRecord{}, fmt.Errorf("%w: member value: %v", ErrCorruptRecord, err)
	}
	if err := checkVersion(v.Version, MemberRegexRecordVersion); err != nil {
		return MemberRecord{}, err
	}
	m := v.MemberRecord
	if m.State < MemberStable || m.State > MemberUnreleasedPartitions {
		return MemberRecord{}, fmt.Errorf("%w: member state %d", ErrCorruptRecord, m.State)
	}
	m.Assigned, m.Pending, m.Target = m.Assigned.normalized(), m.Pending.normalized(), m.Target.normalized()
	return m, nil
}

// checkVersion refuses a value version outside 1..newest.
func checkVersion(v, newest int) error {
	if v < 1 || v > newest {
		return fmt.Errorf("%w: value version %d (this broker reads 1..%d)", ErrCorruptRecord, v, newest)
	}
	return nil
}
