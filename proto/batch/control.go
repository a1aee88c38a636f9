package batch

import (
	"encoding/binary"
)

// Control batches (DESIGN §4, §10): a batch with the control attribute
// holds one control record whose key says what it is and whose value
// carries the rest. For transaction markers (COMMIT, ABORT) the layout is
// Kafka's: key = version int16 (0) and type int16, value = version int16
// (0) and coordinator epoch int32, all big-endian
// (ControlRecordType, EndTransactionMarker).

// ControlType is the type of a control record (Kafka ControlRecordType).
type ControlType int16

// Control record types.
const (
	ControlAbort  ControlType = 0
	ControlCommit ControlType = 1
)

func (t ControlType) String() string {
	switch t {
	case ControlAbort:
		return "ABORT"
	case ControlCommit:
		return "COMMIT"
	}
	return "UNKNOWN"
}

// Sizes of a marker's key and value.
const (
	controlKeySize     = 4
	markerValueSize    = 6
	controlVersion     = 0
	NoCoordinatorEpoch = -1
)

// ControlRecordKey is the key of a control record of type t.
func ControlRecordKey(t ControlType) []byte {
	k := make([]byte, controlKeySize)
	binary.BigEndian.PutUint16(k[0:], controlVersion)
	binary.BigEndian.PutUint16(k[2:], uint16(t))
	return k
}

// MarkerValue is the value of a transaction marker record: the epoch of
// the coordinator that wrote it.
func MarkerValue(coordinatorEpoch int32) []byte {
	v := make([]byte, markerValueSize)
	binary.BigEndian.PutUint16(v[0:], controlVersion)
	binary.BigEndian.PutUint32(v[2:], uint32(coordinatorEpoch))
	return v
}

// ParseMarker reads a transaction marker record's key and value: its type
// and coordinator epoch. A key or value too short, or of an unknown
// version or type, is INVALID_RECORD.
func ParseMarker(key, value []byte) (ControlType, int32, error) {
	if len(key) < controlKeySize || len(value) < markerValueSize {
		return 0, 0, invalid("control record key of %d and value of %d bytes is too short for a transaction marker", len(key), len(value))
	}
	if v := binary.BigEndian.Uint16(key); v != controlVersion {
		return 0, 0, invalid("control record key version %d is not supported", v)
	}
	t := ControlType(binary.BigEndian.Uint16(key[2:]))
	if t != ControlAbort && t != ControlCommit {
		return 0, 0, invalid("control record type %d is not a transaction marker", t)
	}
	if v := binary.BigEndian.Uint16(value); v != controlVersion {
		return 0, 0, invalid("transaction marker value version %d is not supported", v)
	}
	return t, int32(binary.BigEndian.Uint32(value[2:])), nil
}

// MarkerBatch builds the canonical control batch of a transaction marker:
// one record of type t with coordinatorEpoch, written for producer p
// (its id and epoch; the base sequence is -1, as markers have none) at
// timestamp ts, with the transactional and control attributes. The leader
// sets the base offset and partition leader epoch when it appends it.
func MarkerBatch(p Producer, t ControlType, coordinatorEpoch int32, ts int64) []byte {
	var b Builder
	b.Reset(ts)
	b.Add(ts, ControlRecordKey(t), MarkerValue(coordinatorEpoch), nil)
	p.BaseSequence = -1
	return b.Finish(p, AttrTransactional|AttrControl)
}
