package txn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-io/sluice/proto/errs"
)

// RecordVersion is the newest __transaction_state value version this
// code writes. A reader accepts every version from 1 up to it and refuses
// newer ones (ErrNewerRecordVersion) rather than guess: a later Sluice
// that adds version 2 must keep reading 1, and must not write 2 until every
// broker that may lead the partition reads it.
const RecordVersion = 1

// ErrNewerRecordVersion is wrapped by DecodeRecord's error for a value
// written in a version above RecordVersion (by a newer Sluice).
var ErrNewerRecordVersion = errors.New("transaction record written by a newer version")

// ErrCorruptRecord is wrapped by DecodeRecord's error for a key or value
// that is not a valid record.
var ErrCorruptRecord = errors.New("corrupt transaction record")

// The record format of __transaction_state (decision 30).
//
// Key: the transactional id's UTF-8 bytes, nothing else, so compaction
// keeps the last record per id. No other kind of record lives in this
// topic.
//
// Value: a JSON object, or nil (a tombstone) for Dead:
//
//	{"version":1,"producer_id":1000,"previous_producer_id":1000,
//	 "next_producer_id":-1,"producer_epoch":1,"last_producer_epoch":0,
//	 "timeout_ms":60000,"state":"PrepareCommit",
//	 "partitions":[{"topic":"t","partitions":[0,2]}],
//	 "start_time_ms":1794026921817,"update_time_ms":1794026921900,
//	 "client_transaction_version":2}
//
// Every field is always written, in this order; "partitions" lists topics
// in byte order with their partitions ascending ([] when none), as
// Kafka's TransactionLogValue groups them. Times are Unix milliseconds
// (-1: none). "state" is a State name. A reader ignores fields it does not
// know, so a field added later without a version bump must be optional.
//
// JSON, as the controller's records (decision 9): the rate is a few
// records per transaction, the coordinator decodes only when it loads a
// partition, the records read as they are in a dump (Kafka needs a
// --transaction-log-decoder for its binary ones), and every language
// parses them without a schema.
//
// "client_transaction_version" (Metadata.ClientVersion, Kafka's tagged
// field clientTransactionVersion of TransactionLogValue) was added
// without a version bump, as Kafka added it: it is optional. A record
// without it was written by a Sluice that spoke TV2 only, so it reads as
// TV2 — not as Kafka's absent-means-0 (TV1), which would make a
// transaction ended before the upgrade answer its EndTxn retry by TV1's
// rules and fence a TV2 producer retrying its commit. An older Sluice
// reading a record with the field ignores it and acts by TV2: every node
// that may lead a __transaction_state partition must run a version that
// knows TV1 before a TV1 client is served (decision 69). encoding/json writes struct fields in
// order and these values have no maps, so equal Metadata encode to equal
// bytes (the golden files pin them).
type recordValue struct {
	Version            int              `json:"version"`
	ProducerID         int64            `json:"producer_id"`
	PreviousProducerID int64            `json:"previous_producer_id"`
	NextProducerID     int64            `json:"next_producer_id"`
	ProducerEpoch      int16            `json:"producer_epoch"`
	LastProducerEpoch  int16            `json:"last_producer_epoch"`
	TimeoutMs          int32            `json:"timeout_ms"`
	State              string           `json:"state"`
	Partitions         []topicPartition `json:"partitions"`
	StartTimeMs        int64            `json:"start_time_ms"`
	UpdateTimeMs       int64            `json:"update_time_ms"`
	// ClientVersion is written always; a pointer so that a record
	// without it (written before TV1) is told from one with 0.
	ClientVersion *int8 `json:"client_transaction_version"`
}

type topicPartition struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"`
}

// versionOnly reads the version before the rest, so a newer record is
// refused as newer, not as malformed.
type versionOnly struct {
	Version *int `json:"version"`
}

// EncodeRecord returns the key and value of m's __transaction_state
// record: value nil (a tombstone) when m.State is Dead. m.TransactionalID
// must pass ValidateTransactionalID and m.Partitions be valid (non-empty
// topic names, partitions ≥ 0); otherwise an error and no record.
// Partitions need not be sorted; the encoding sorts them.
func EncodeRecord(m Metadata) (key, value []byte, err error) {
	if err := ValidateTransactionalID(m.TransactionalID); err != nil {
		return nil, nil, err
	}
	key = []byte(m.TransactionalID)
	if m.State == Dead {
		return key, nil, nil
	}
	if _, ok := ParseState(m.State.String()); !ok {
		return nil, nil, fmt.Errorf("txn: transactional id %q: cannot encode %v", errs.Echo(m.TransactionalID), m.State)
	}
	v := recordValue{
		Version:            RecordVersion,
		ProducerID:         m.ProducerID,
		PreviousProducerID: m.PrevProducerID,
		NextProducerID:     m.NextProducerID,
		ProducerEpoch:      m.ProducerEpoch,
		LastProducerEpoch:  m.LastProducerEpoch,
		TimeoutMs:          m.TimeoutMs,
		State:              m.State.String(),
		Partitions:         []topicPartition{},
		StartTimeMs:        m.StartTimeMs,
		UpdateTimeMs:       m.UpdateTimeMs,
		ClientVersion:      ptr(int8(m.ClientVersion)),
	}
	ps := slices.Clone(m.Partitions)
	slices.SortFunc(ps, comparePartitions)
	for _, p := range slices.Compact(ps) {
		if p.Topic == "" || p.Partition < 0 {
			return nil, nil, fmt.Errorf("txn: transactional id %q: invalid partition %q-%d", errs.Echo(m.TransactionalID), p.Topic, p.Partition)
		}
		if n := len(v.Partitions); n > 0 && v.Partitions[n-1].Topic == p.Topic {
			v.Partitions[n-1].Partitions = append(v.Partitions[n-1].Partitions, p.Partition)
			continue
		}
		v.Partitions = append(v.Partitions, topicPartition{Topic: p.Topic, Partitions: []int32{p.Partition}})
	}
	value, err = json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	return key, value, nil
}

// DecodeRecord decodes a __transaction_state record written by
// EncodeRecord of this or an older version. A nil or empty value is a
// tombstone: Metadata{TransactionalID: key, State: Dead}, and the loader
// forgets the id. Errors wrap ErrNewerRecordVersion (a version above
// RecordVersion) or ErrCorruptRecord (anything else malformed: bad JSON,
// a missing or unknown version, an unknown state, Dead with a value, an
// invalid key or partition). The returned Metadata shares nothing with
// key or value; its Partitions are sorted (nil when none).
func DecodeRecord(key, value []byte) (Metadata, error) {
	id := string(key)
	if err := ValidateTransactionalID(id); err != nil {
		return Metadata{}, fmt.Errorf("%w: key: %w", ErrCorruptRecord, err)
	}
	if len(value) == 0 {
		return Metadata{TransactionalID: id, State: Dead}, nil
	}
	var vo versionOnly
	if err := json.Unmarshal(value, &vo); err != nil {
		return Metadata{}, fmt.Errorf("%w: transactional id %q: %w", ErrCorruptRecord, errs.Echo(id), err)
	}
	switch {
	case vo.Version == nil || *vo.Version < 1:
		return Metadata{}, fmt.Errorf("%w: transactional id %q: missing or invalid version", ErrCorruptRecord, errs.Echo(id))
	case *vo.Version > RecordVersion:
		return Metadata{}, fmt.Errorf("%w: transactional id %q: version %d, this broker reads up to %d",
			ErrNewerRecordVersion, errs.Echo(id), *vo.Version, RecordVersion)
	}
	var v recordValue
	d := json.NewDecoder(bytes.NewReader(value))
	if err := d.Decode(&v); err != nil {
		return Metadata{}, fmt.Errorf("%w: transactional id %q: %w", ErrCorruptRecord, errs.Echo(id), err)
	}
	if d.More() {
		return Metadata{}, fmt.Errorf("%w: transactional id %q: trailing data after the value", ErrCorruptRecord, errs.Echo(id))
	}
	state, ok := ParseState(v.State)
	if !ok || state == Dead {
		return Metadata{}, fmt.Errorf("%w: transactional id %q: state %q", ErrCorruptRecord, errs.Echo(id), v.State)
	}
	m := Metadata{
		TransactionalID:   id,
		ProducerID:        v.ProducerID,
		PrevProducerID:    v.PreviousProducerID,
		NextProducerID:    v.NextProducerID,
		ProducerEpoch:     v.ProducerEpoch,
		LastProducerEpoch: v.LastProducerEpoch,
		TimeoutMs:         v.TimeoutMs,
		State:             state,
		StartTimeMs:       v.StartTimeMs,
		UpdateTimeMs:      v.UpdateTimeMs,
		ClientVersion:     TV2, // absent: written when Sluice spoke TV2 only
	}
	if v.ClientVersion != nil {
		m.ClientVersion = ClientVersion(*v.ClientVersion)
	}
	for _, tp := range v.Partitions {
		for _, p := range tp.Partitions {
			if tp.Topic == "" || p < 0 {
				return Metadata{}, fmt.Errorf("%w: transactional id %q: partition %q-%d", ErrCorruptRecord, errs.Echo(id), tp.Topic, p)
			}
			m.Partitions = append(m.Partitions, TopicPartition{Topic: tp.Topic, Partition: p})
		}
	}
	slices.SortFunc(m.Partitions, comparePartitions)
	m.Partitions = slices.Compact(m.Partitions)
	return m, nil
}

func ptr[T any](v T) *T { return &v }
