package txn

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The fixture: producer 1000 at epoch 5 (last 4), one partition t-0 in
// the open or ending transaction, started at startMs, updated at updateMs.
const (
	fixPID      int64 = 1000
	fixEpoch    int16 = 5
	fixLast     int16 = 4
	fixNewPID   int64 = 2000
	fixTimeout  int32 = 60000
	startMs     int64 = 1_000_000
	updateMs    int64 = 1_000_500
	fixTopic          = "t"
	fixID             = "txn-id"
	afterUpdate       = 1_001_000 // request time: within the timeout
)

var nowReq = time.UnixMilli(afterUpdate)

// fixture returns the id's Metadata in state s (nil for "unknown"), its
// transaction a TV2 one.
func fixture(s *State) *Metadata { return fixtureV(s, TV2) }

// fixtureV is fixture with the transaction's client version v.
func fixtureV(s *State, v ClientVersion) *Metadata {
	if s == nil {
		return nil
	}
	m := &Metadata{
		TransactionalID: fixID, ProducerID: fixPID, PrevProducerID: fixPID, NextProducerID: NoProducerID,
		ProducerEpoch: fixEpoch, LastProducerEpoch: fixLast, TimeoutMs: fixTimeout, State: *s,
		StartTimeMs: startMs, UpdateTimeMs: updateMs, ClientVersion: v,
	}
	switch *s {
	case Ongoing, PrepareCommit, PrepareAbort, PrepareEpochFence:
		m.Partitions = []TopicPartition{{Topic: fixTopic, Partition: 0}}
	case Empty:
		m.StartTimeMs = NoTimestamp
	}
	return m
}

// request is one coordinator call, by name.
type request struct {
	name string
	do   func(m *Metadata) Result
}

func initReq(pid int64, epoch int16) InitProducerIDRequest {
	return InitProducerIDRequest{TransactionalID: fixID, TimeoutMs: 30000, ProducerID: pid, ProducerEpoch: epoch, NewProducerID: fixNewPID}
}

func addReq(pid int64, epoch int16, parts ...int32) AddPartitionsRequest {
	r := AddPartitionsRequest{TransactionalID: fixID, ProducerID: pid, ProducerEpoch: epoch, ClientVersion: TV2}
	for _, p := range parts {
		r.Partitions = append(r.Partitions, TopicPartition{Topic: fixTopic, Partition: p})
	}
	return r
}

func addReqV1(pid int64, epoch int16, parts ...int32) AddPartitionsRequest {
	r := addReq(pid, epoch, parts...)
	r.ClientVersion = TV1
	return r
}

func verifyReq(pid int64, epoch int16, parts ...int32) AddPartitionsRequest {
	r := addReq(pid, epoch, parts...)
	r.ClientVersion, r.VerifyOnly = TV1, true
	return r
}

func endReqV1(pid int64, epoch int16, commit bool) EndTxnRequest {
	r := endReq(pid, epoch, commit)
	r.ClientVersion = TV1
	return r
}

func endReq(pid int64, epoch int16, commit bool) EndTxnRequest {
	return EndTxnRequest{TransactionalID: fixID, ProducerID: pid, ProducerEpoch: epoch, Commit: commit, NewProducerID: fixNewPID, ClientVersion: TV2}
}

// deref passes a nil Metadata on as the zero value for the periodic
// checks, which take a known id.
func deref(m *Metadata) (Metadata, bool) {
	if m == nil {
		return Metadata{}, false
	}
	return *m, true
}

var requests = []request{
	{"InitProducerId new producer", func(m *Metadata) Result { return InitProducerID(m, initReq(0, 0), nowReq) }},
	{"InitProducerId current (KIP-360)", func(m *Metadata) Result { return InitProducerID(m, initReq(fixPID, fixEpoch), nowReq) }},
	{"InitProducerId last epoch (KIP-360)", func(m *Metadata) Result { return InitProducerID(m, initReq(fixPID, fixLast), nowReq) }},
	{"InitProducerId stale epoch (KIP-360)", func(m *Metadata) Result { return InitProducerID(m, initReq(fixPID, fixLast-1), nowReq) }},
	{"InitProducerId other id (KIP-360)", func(m *Metadata) Result { return InitProducerID(m, initReq(999, fixEpoch), nowReq) }},
	{"AddPartitions new partition", func(m *Metadata) Result { return AddPartitions(m, addReq(fixPID, fixEpoch, 1), nowReq) }},
	{"AddPartitions already in", func(m *Metadata) Result { return AddPartitions(m, addReq(fixPID, fixEpoch, 0), nowReq) }},
	{"AddPartitions old epoch", func(m *Metadata) Result { return AddPartitions(m, addReq(fixPID, fixEpoch-1, 1), nowReq) }},
	{"AddPartitions newer epoch", func(m *Metadata) Result { return AddPartitions(m, addReq(fixPID, fixEpoch+1, 1), nowReq) }},
	{"AddPartitions other id", func(m *Metadata) Result { return AddPartitions(m, addReq(999, fixEpoch, 1), nowReq) }},
	{"EndTxn commit", func(m *Metadata) Result { return EndTxn(m, endReq(fixPID, fixEpoch, true), nowReq) }},
	{"EndTxn abort", func(m *Metadata) Result { return EndTxn(m, endReq(fixPID, fixEpoch, false), nowReq) }},
	{"EndTxn commit retry (epoch-1)", func(m *Metadata) Result { return EndTxn(m, endReq(fixPID, fixEpoch-1, true), nowReq) }},
	{"EndTxn abort retry (epoch-1)", func(m *Metadata) Result { return EndTxn(m, endReq(fixPID, fixEpoch-1, false), nowReq) }},
	{"EndTxn commit stale (epoch-2)", func(m *Metadata) Result { return EndTxn(m, endReq(fixPID, fixEpoch-2, true), nowReq) }},
	{"EndTxn commit newer epoch", func(m *Metadata) Result { return EndTxn(m, endReq(fixPID, fixEpoch+1, true), nowReq) }},
	{"EndTxn commit other id", func(m *Metadata) Result { return EndTxn(m, endReq(999, fixEpoch, true), nowReq) }},
	{"AddPartitions TV1 new partition", func(m *Metadata) Result { return AddPartitions(m, addReqV1(fixPID, fixEpoch, 1), nowReq) }},
	{"AddPartitions TV1 already in", func(m *Metadata) Result { return AddPartitions(m, addReqV1(fixPID, fixEpoch, 0), nowReq) }},
	{"AddPartitions TV1 old epoch", func(m *Metadata) Result { return AddPartitions(m, addReqV1(fixPID, fixEpoch-1, 1), nowReq) }},
	{"AddPartitions verify-only, in", func(m *Metadata) Result { return AddPartitions(m, verifyReq(fixPID, fixEpoch, 0), nowReq) }},
	{"AddPartitions verify-only, not in", func(m *Metadata) Result { return AddPartitions(m, verifyReq(fixPID, fixEpoch, 0, 1), nowReq) }},
	{"AddPartitions verify-only, old epoch", func(m *Metadata) Result { return AddPartitions(m, verifyReq(fixPID, fixEpoch-1, 0), nowReq) }},
	{"AddPartitions verify-only, other id", func(m *Metadata) Result { return AddPartitions(m, verifyReq(999, fixEpoch, 0), nowReq) }},
	{"EndTxn TV1 commit", func(m *Metadata) Result { return EndTxn(m, endReqV1(fixPID, fixEpoch, true), nowReq) }},
	{"EndTxn TV1 abort", func(m *Metadata) Result { return EndTxn(m, endReqV1(fixPID, fixEpoch, false), nowReq) }},
	{"EndTxn TV1 commit stale (epoch-1)", func(m *Metadata) Result { return EndTxn(m, endReqV1(fixPID, fixEpoch-1, true), nowReq) }},
	{"EndTxn TV1 commit newer epoch", func(m *Metadata) Result { return EndTxn(m, endReqV1(fixPID, fixEpoch+1, true), nowReq) }},
	{"EndTxn TV1 commit other id", func(m *Metadata) Result { return EndTxn(m, endReqV1(999, fixEpoch, true), nowReq) }},
	{"Complete", func(m *Metadata) Result { return Complete(m, fixPID, fixEpoch, nowReq) }},
	{"Complete stale round", func(m *Metadata) Result { return Complete(m, fixPID, fixEpoch-1, nowReq) }},
	{"AbortTimedOut, within timeout", func(m *Metadata) Result {
		md, ok := deref(m)
		if !ok {
			return Result{}
		}
		return AbortTimedOut(md, time.UnixMilli(startMs+int64(fixTimeout)), fixNewPID)
	}},
	{"AbortTimedOut, past timeout", func(m *Metadata) Result {
		md, ok := deref(m)
		if !ok {
			return Result{}
		}
		return AbortTimedOut(md, time.UnixMilli(startMs+int64(fixTimeout)+1), fixNewPID)
	}},
	{"Expire, idle < expiration", func(m *Metadata) Result {
		md, ok := deref(m)
		if !ok {
			return Result{}
		}
		return Expire(md, time.UnixMilli(updateMs+DefaultIDExpiration.Milliseconds()-1), 0)
	}},
	{"Expire, idle = expiration", func(m *Metadata) Result {
		md, ok := deref(m)
		if !ok {
			return Result{}
		}
		return Expire(md, time.UnixMilli(updateMs+DefaultIDExpiration.Milliseconds()), 0)
	}},
}

// describe renders a Result on one line of the decision matrix.
func describe(r Result) string {
	var b strings.Builder
	b.WriteString(r.Code().String())
	if r.NeedProducerID {
		b.WriteString(" need-producer-id")
	}
	if w := r.Write; w != nil {
		var ps []string
		for _, p := range w.Partitions {
			ps = append(ps, fmt.Sprintf("%s-%d", p.Topic, p.Partition))
		}
		fmt.Fprintf(&b, " write{%v pid=%d epoch=%d last=%d prev=%d next=%d parts=[%s] start=%d timeout=%d %v}",
			w.State, w.ProducerID, w.ProducerEpoch, w.LastProducerEpoch, w.PrevProducerID, w.NextProducerID,
			strings.Join(ps, " "), w.StartTimeMs, w.TimeoutMs, w.ClientVersion)
	}
	if r.Err == nil && (r.ProducerID != 0 || r.ProducerEpoch != 0) {
		fmt.Fprintf(&b, " answer=%d/%d", r.ProducerID, r.ProducerEpoch)
	}
	if r.SendMarkers {
		b.WriteString(" markers")
	}
	return b.String()
}

// TestEveryRequestInEveryState runs every request against every state
// (and an unknown id), the state's transaction a TV2 one and then a TV1
// one (the state's name suffixed /TV1), and pins the decisions in
// testdata/decisions.golden, one line per pair — the table to review when
// a rule changes. The rule tests in transitions_test.go assert the
// important lines explicitly. Invariants checked on every pair:
//   - a Write obeys the state table and shares nothing with the input,
//     which is left unchanged;
//   - SendMarkers exactly when the Write is Prepare*;
//   - Write and Err together only for InitProducerId's fence
//     (CONCURRENT_TRANSACTIONS);
//   - never UNKNOWN_SERVER_ERROR (the internal guard never trips).
func TestEveryRequestInEveryState(t *testing.T) {
	var b strings.Builder
	type fix struct {
		s *State
		v ClientVersion
	}
	fixes := []fix{{nil, TV2}}
	for _, v := range []ClientVersion{TV2, TV1} {
		for i := range States {
			fixes = append(fixes, fix{&States[i], v})
		}
	}
	for _, f := range fixes {
		s := f.s
		name := "unknown"
		if s != nil {
			name = s.String()
			if f.v == TV1 {
				name += "/TV1"
			}
		}
		for _, req := range requests {
			in := fixtureV(s, f.v)
			var before *Metadata
			if in != nil {
				c := in.Clone()
				before = &c
			}
			r := req.do(in)
			fmt.Fprintf(&b, "%-21s %-38s -> %s\n", name, req.name, describe(r))

			if !reflect.DeepEqual(in, before) {
				t.Errorf("%s / %s changed its input: %+v", name, req.name, in)
			}
			if r.Code() == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
				t.Errorf("%s / %s: %v", name, req.name, r.Err)
			}
			w := r.Write
			if w == nil {
				if r.SendMarkers {
					t.Errorf("%s / %s: markers without a write", name, req.name)
				}
				continue
			}
			from := Empty // a new id's first record comes from nothing; Empty -> Empty is allowed
			if in != nil {
				from = in.State
			}
			if !w.State.CanFollow(from) {
				t.Errorf("%s / %s writes %v, not allowed after %v", name, req.name, w.State, from)
			}
			if r.SendMarkers != w.State.IsPrepare() {
				t.Errorf("%s / %s: SendMarkers %v for a %v write", name, req.name, r.SendMarkers, w.State)
			}
			if r.Err != nil && r.Code() != sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS {
				t.Errorf("%s / %s: both a write and %v", name, req.name, r.Err)
			}
			if strings.Contains(req.name, "verify-only") {
				t.Errorf("%s / %s: a verification wrote %+v", name, req.name, *w)
			}
			if strings.Contains(req.name, "TV1") && w.ProducerEpoch != in.ProducerEpoch {
				t.Errorf("%s / %s: a TV1 request moved the epoch %d -> %d", name, req.name, in.ProducerEpoch, w.ProducerEpoch)
			}
			if in != nil && len(w.Partitions) > 0 && len(in.Partitions) > 0 && &w.Partitions[0] == &in.Partitions[0] {
				t.Errorf("%s / %s: the write shares Partitions with the input", name, req.name)
			}
			if w.State != Dead {
				if _, _, err := EncodeRecord(*w); err != nil {
					t.Errorf("%s / %s: the write does not encode: %v", name, req.name, err)
				}
			}
		}
	}
	golden(t, "decisions.golden", []byte(b.String()))
}
