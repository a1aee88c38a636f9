package txn

import (
	"reflect"
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fakeCoordinator plays the caller's part of the contract for scenario
// tests: it persists every Write (encoding it, so every record also
// round-trips), applies it only after that, allocates producer ids on
// NeedProducerID, and completes a Prepare* at once when asked.
type fakeCoordinator struct {
	t       *testing.T
	txns    map[string]*Metadata
	log     []Metadata // decoded records in write order
	nextPID int64
	now     time.Time
}

func newFakeCoordinator(t *testing.T, firstPID int64) *fakeCoordinator {
	return &fakeCoordinator{t: t, txns: map[string]*Metadata{}, nextPID: firstPID, now: time.UnixMilli(1_794_026_921_817)}
}

func (c *fakeCoordinator) tick(d time.Duration) { c.now = c.now.Add(d) }

// run calls f, allocating a producer id and calling again if asked, then
// persists and applies the Write.
func (c *fakeCoordinator) run(f func(newPID int64) Result) Result {
	c.t.Helper()
	r := f(0)
	if r.NeedProducerID {
		pid := c.nextPID
		c.nextPID++
		r = f(pid)
		if r.NeedProducerID {
			c.t.Fatal("NeedProducerID again with a producer id given")
		}
	}
	if r.Write != nil {
		key, value, err := EncodeRecord(*r.Write)
		if err != nil {
			c.t.Fatal(err)
		}
		m, err := DecodeRecord(key, value)
		if err != nil {
			c.t.Fatal(err)
		}
		c.log = append(c.log, m)
		if m.State == Dead {
			delete(c.txns, m.TransactionalID)
		} else {
			c.txns[m.TransactionalID] = &m
		}
	}
	return r
}

func (c *fakeCoordinator) initPID(id string, pid int64, epoch int16) Result {
	return c.run(func(n int64) Result {
		return InitProducerID(c.txns[id], InitProducerIDRequest{TransactionalID: id, TimeoutMs: 60000, ProducerID: pid, ProducerEpoch: epoch, NewProducerID: n}, c.now)
	})
}

func (c *fakeCoordinator) add(id string, pid int64, epoch int16, tps ...TopicPartition) Result {
	return c.run(func(int64) Result {
		return AddPartitions(c.txns[id], AddPartitionsRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, ClientVersion: TV2, Partitions: tps}, c.now)
	})
}

func (c *fakeCoordinator) end(id string, pid int64, epoch int16, commit bool) Result {
	return c.run(func(n int64) Result {
		return EndTxn(c.txns[id], EndTxnRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Commit: commit, NewProducerID: n, ClientVersion: TV2}, c.now)
	})
}

// complete plays the marker sender: every marker written, Complete.
func (c *fakeCoordinator) complete(id string) Result {
	c.t.Helper()
	m := c.txns[id]
	if m == nil || !m.PendingMarkers() {
		c.t.Fatalf("%s: no markers pending (%+v)", id, m)
	}
	return c.run(func(int64) Result { return Complete(m, m.ProducerID, m.ProducerEpoch, c.now) })
}

func (c *fakeCoordinator) abortTimedOut(id string) Result {
	return c.run(func(n int64) Result { return AbortTimedOut(*c.txns[id], c.now, n) })
}

func wantCode(t *testing.T, what string, r Result, want sluicev1.ErrorCode) {
	t.Helper()
	if r.Code() != want {
		t.Fatalf("%s: %v, want %v", what, r.Err, want)
	}
}

func wantAnswer(t *testing.T, what string, r Result, pid int64, epoch int16) {
	t.Helper()
	wantCode(t, what, r, sluicev1.ErrorCode_NONE)
	if r.ProducerID != pid || r.ProducerEpoch != epoch {
		t.Fatalf("%s: answered %d/%d, want %d/%d", what, r.ProducerID, r.ProducerEpoch, pid, epoch)
	}
}

var tp0 = TopicPartition{Topic: "t", Partition: 0}

// A new transactional id needs a producer id; the core asks rather than
// allocating.
func TestInitProducerIDOfANewIDAsksForAProducerID(t *testing.T) {
	r := InitProducerID(nil, InitProducerIDRequest{TransactionalID: "x", TimeoutMs: 1000}, time.UnixMilli(5))
	if !r.NeedProducerID || r.Write != nil || r.Err != nil {
		t.Fatalf("%+v", r)
	}
	r = InitProducerID(nil, InitProducerIDRequest{TransactionalID: "x", TimeoutMs: 1000, NewProducerID: 1000}, time.UnixMilli(5))
	want := Metadata{TransactionalID: "x", ProducerID: 1000, PrevProducerID: 1000, NextProducerID: NoProducerID,
		LastProducerEpoch: NoProducerEpoch, TimeoutMs: 1000, State: Empty, StartTimeMs: NoTimestamp, UpdateTimeMs: 5}
	if r.Write == nil || !reflect.DeepEqual(*r.Write, want) {
		t.Fatalf("wrote %+v, want %+v", r.Write, want)
	}
	wantAnswer(t, "new id", r, 1000, 0)
}

// DESIGN §10 fencing: InitProducerId on an open transaction aborts it
// (one epoch bump), answers CONCURRENT_TRANSACTIONS, and the retry gets
// the next epoch; the old producer is fenced everywhere.
func TestInitProducerIDFencesAnOpenTransaction(t *testing.T) {
	c := newFakeCoordinator(t, 1000)
	wantAnswer(t, "p1 init", c.initPID("id", 0, 0), 1000, 0)
	wantAnswer(t, "p1 add", c.add("id", 1000, 0, tp0), 1000, 0)

	r := c.initPID("id", 0, 0)
	wantCode(t, "p2 init", r, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	if r.Write == nil || r.Write.State != PrepareAbort || r.Write.ProducerEpoch != 1 || !r.SendMarkers ||
		!reflect.DeepEqual(r.Write.Partitions, []TopicPartition{tp0}) {
		t.Fatalf("fence wrote %+v", r.Write)
	}
	wantCode(t, "p2 init while the abort's markers are written", c.initPID("id", 0, 0), sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	wantCode(t, "p1 commit while the abort's markers are written", c.end("id", 1000, 0, true), sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	c.complete("id")
	wantAnswer(t, "p2 retry", c.initPID("id", 0, 0), 1000, 2)

	wantCode(t, "p1 add", c.add("id", 1000, 0, tp0), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantCode(t, "p1 commit", c.end("id", 1000, 0, true), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantCode(t, "p1 KIP-360 init", c.initPID("id", 1000, 0), sluicev1.ErrorCode_PRODUCER_FENCED)
}

// KIP-360: a producer that hit an abortable error re-initialises with its
// id and epoch and keeps its producer id; a retry of that call gets the
// same epoch; a plain InitProducerId in between fences it.
func TestInitProducerIDKIP360(t *testing.T) {
	c := newFakeCoordinator(t, 1000)
	c.initPID("id", 0, 0)
	wantAnswer(t, "bump", c.initPID("id", 1000, 0), 1000, 1)
	wantAnswer(t, "retry of the bump", c.initPID("id", 1000, 0), 1000, 1)
	wantAnswer(t, "bump again", c.initPID("id", 1000, 1), 1000, 2)
	wantAnswer(t, "another producer", c.initPID("id", 0, 0), 1000, 3)
	wantCode(t, "the first producer's retry", c.initPID("id", 1000, 1), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantCode(t, "a higher epoch", c.initPID("id", 1000, 9), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantCode(t, "another producer id", c.initPID("id", 77, 3), sluicev1.ErrorCode_PRODUCER_FENCED)

	// In an open transaction: fenced and aborted, then the retry is
	// answered as a retry of the abort's bump.
	c.add("id", 1000, 3, tp0)
	wantCode(t, "KIP-360 init on an open transaction", c.initPID("id", 1000, 3), sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	c.complete("id")
	wantAnswer(t, "its retry", c.initPID("id", 1000, 3), 1000, 4)
}

// Epoch exhaustion: a bump from 32766 or above moves the id to a new
// producer id at epoch 0 (InitProducerId directly; EndTxn and the fence
// at Complete, with the markers still at the old id and epoch 32767).
func TestEpochExhaustionMovesToANewProducerID(t *testing.T) {
	exhausted := func(s State) *Metadata {
		m := fixture(&s)
		m.ProducerEpoch, m.LastProducerEpoch = maxEpoch-1, maxEpoch-2
		return m
	}
	now := time.UnixMilli(afterUpdate)

	t.Run("InitProducerId", func(t *testing.T) {
		m := exhausted(CompleteCommit)
		if r := InitProducerID(m, InitProducerIDRequest{TransactionalID: fixID, TimeoutMs: 1}, now); !r.NeedProducerID {
			t.Fatalf("%+v", r)
		}
		r := InitProducerID(m, InitProducerIDRequest{TransactionalID: fixID, TimeoutMs: 1, NewProducerID: fixNewPID}, now)
		wantAnswer(t, "rotate", r, fixNewPID, 0)
		if w := r.Write; w.PrevProducerID != fixPID || w.LastProducerEpoch != NoProducerEpoch || w.State != Empty {
			t.Fatalf("wrote %+v", w)
		}
		// KIP-360 at the last epoch: rotates and remembers the epoch, so
		// the retry with the old id is recognised.
		r = InitProducerID(m, InitProducerIDRequest{TransactionalID: fixID, TimeoutMs: 1, ProducerID: fixPID, ProducerEpoch: maxEpoch - 1, NewProducerID: fixNewPID}, now)
		wantAnswer(t, "KIP-360 rotate", r, fixNewPID, 0)
		retry := InitProducerID(r.Write, InitProducerIDRequest{TransactionalID: fixID, TimeoutMs: 1, ProducerID: fixPID, ProducerEpoch: maxEpoch - 1}, now)
		wantAnswer(t, "its retry with the old id", retry, fixNewPID, 0)
	})

	t.Run("EndTxn", func(t *testing.T) {
		c := newFakeCoordinator(t, 5000)
		c.txns[fixID] = exhausted(Ongoing)
		r := c.end(fixID, fixPID, maxEpoch-1, true)
		wantAnswer(t, "commit at 32766", r, 5000, 0)
		if w := r.Write; w.State != PrepareCommit || w.ProducerID != fixPID || w.ProducerEpoch != maxEpoch || w.NextProducerID != 5000 {
			t.Fatalf("wrote %+v", w)
		}
		wantCode(t, "data with the new id before Complete", c.add(fixID, 5000, 0, tp0), sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
		wantCode(t, "EndTxn retry before Complete", c.end(fixID, fixPID, maxEpoch-1, true), sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
		r = c.complete(fixID)
		if w := r.Write; w.State != CompleteCommit || w.ProducerID != 5000 || w.ProducerEpoch != 0 || w.PrevProducerID != fixPID || w.NextProducerID != NoProducerID || w.LastProducerEpoch != maxEpoch-1 {
			t.Fatalf("Complete wrote %+v", w)
		}
		wantAnswer(t, "EndTxn retry after Complete (overflow retry)", c.end(fixID, fixPID, maxEpoch-1, true), 5000, 0)
		wantCode(t, "abort retry after Complete", c.end(fixID, fixPID, maxEpoch-1, false), sluicev1.ErrorCode_INVALID_TXN_STATE)
		wantAnswer(t, "next transaction with the new id", c.add(fixID, 5000, 0, tp0), 5000, 0)
	})

	t.Run("timeout fence (KAFKA-20090)", func(t *testing.T) {
		m := exhausted(Ongoing)
		late := time.UnixMilli(startMs + int64(fixTimeout) + 1)
		if r := AbortTimedOut(*m, late, 0); !r.NeedProducerID {
			t.Fatalf("%+v", r)
		}
		r := AbortTimedOut(*m, late, fixNewPID)
		if w := r.Write; w == nil || w.State != PrepareAbort || w.ProducerEpoch != maxEpoch || w.NextProducerID != fixNewPID {
			t.Fatalf("wrote %+v", r.Write)
		}
	})

	t.Run("abort at the maximum epoch goes through without a bump", func(t *testing.T) {
		m := exhausted(Ongoing)
		m.ProducerEpoch = maxEpoch
		r := EndTxn(m, EndTxnRequest{TransactionalID: fixID, ProducerID: fixPID, ProducerEpoch: maxEpoch, NewProducerID: fixNewPID, ClientVersion: TV2}, now)
		if w := r.Write; w == nil || w.State != PrepareAbort || w.ProducerEpoch != maxEpoch || w.NextProducerID != fixNewPID {
			t.Fatalf("wrote %+v (%v)", r.Write, r.Err)
		}
		wantCode(t, "commit at the maximum epoch",
			EndTxn(m, EndTxnRequest{TransactionalID: fixID, ProducerID: fixPID, ProducerEpoch: maxEpoch, Commit: true, NewProducerID: fixNewPID, ClientVersion: TV2}, now),
			sluicev1.ErrorCode_PRODUCER_FENCED)
	})
}

// TV2 EndTxn retries: a retry (epoch + 1 stored) of a completed
// transaction with the same outcome succeeds, the opposite outcome is
// INVALID_TXN_STATE — except a commit after the coordinator's own abort,
// which is PRODUCER_FENCED (KAFKA-20785), never a success.
func TestEndTxnRetries(t *testing.T) {
	c := newFakeCoordinator(t, 1000)
	c.initPID("id", 0, 0)
	c.add("id", 1000, 0, tp0)
	wantAnswer(t, "commit", c.end("id", 1000, 0, true), 1000, 1)
	wantCode(t, "retry while markers are written", c.end("id", 1000, 0, true), sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	c.complete("id")
	n := len(c.log)
	wantAnswer(t, "retry after Complete", c.end("id", 1000, 0, true), 1000, 1)
	wantCode(t, "abort with the commit's epoch", c.end("id", 1000, 0, false), sluicev1.ErrorCode_INVALID_TXN_STATE)
	if len(c.log) != n {
		t.Fatalf("retries wrote %v", c.log[n:])
	}
}

// KAFKA-20785: the transaction times out, the coordinator aborts it and
// bumps the epoch, and the producer's commit arrives with the old epoch.
func TestCommitRacingTheTimeoutAbortIsFenced(t *testing.T) {
	c := newFakeCoordinator(t, 1000)
	c.initPID("id", 0, 0)
	c.add("id", 1000, 0, tp0)

	c.tick(60 * time.Second)
	if r := c.abortTimedOut("id"); r.Write != nil {
		t.Fatalf("aborted at exactly the timeout: %+v", r.Write)
	}
	c.tick(time.Millisecond)
	r := c.abortTimedOut("id")
	if r.Err != nil || r.Write == nil || r.Write.State != PrepareAbort || r.Write.ProducerEpoch != 1 || !r.SendMarkers {
		t.Fatalf("timeout abort: %+v", r)
	}
	wantCode(t, "commit while the abort's markers are written", c.end("id", 1000, 0, true), sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	wantCode(t, "add while the abort's markers are written", c.add("id", 1000, 0, tp0), sluicev1.ErrorCode_PRODUCER_FENCED)
	c.complete("id")
	wantCode(t, "commit after the abort", c.end("id", 1000, 0, true), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantAnswer(t, "the producer's own abort after the timeout abort", c.end("id", 1000, 0, false), 1000, 1)
	wantCode(t, "more data at the old epoch", c.add("id", 1000, 0, tp0), sluicev1.ErrorCode_PRODUCER_FENCED)
}

// Kafka 4.5 TV2: committing or aborting with no partitions writes
// Prepare* with the epoch bumped and no markers; the caller completes it.
func TestEmptyTransactionEndsCleanly(t *testing.T) {
	for _, commit := range []bool{true, false} {
		c := newFakeCoordinator(t, 1000)
		c.initPID("id", 0, 0)
		r := c.end("id", 1000, 0, commit)
		wantAnswer(t, "empty end", r, 1000, 1)
		if len(r.Write.Partitions) != 0 || !r.SendMarkers || r.Write.Commit() != commit {
			t.Fatalf("wrote %+v", r.Write)
		}
		c.complete("id")
		wantAnswer(t, "next empty end", c.end("id", 1000, 1, commit), 1000, 2)
		c.complete("id")
		wantAnswer(t, "retry of it", c.end("id", 1000, 1, commit), 1000, 2)
	}
}

func TestAddPartitions(t *testing.T) {
	c := newFakeCoordinator(t, 1000)
	wantCode(t, "unknown id", c.add("id", 1000, 0, tp0), sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING)
	c.initPID("id", 0, 0)
	wantCode(t, "no partitions", c.add("id", 1000, 0), sluicev1.ErrorCode_INVALID_REQUEST)
	wantCode(t, "empty topic", c.add("id", 1000, 0, TopicPartition{Topic: "", Partition: 0}), sluicev1.ErrorCode_INVALID_REQUEST)
	wantCode(t, "negative partition", c.add("id", 1000, 0, TopicPartition{Topic: "t", Partition: -1}), sluicev1.ErrorCode_INVALID_REQUEST)
	c.tick(time.Second)
	start := c.now.UnixMilli()
	c.add("id", 1000, 0, TopicPartition{Topic: "b", Partition: 1}, TopicPartition{Topic: "a", Partition: 2}, TopicPartition{Topic: "b", Partition: 1})
	c.tick(time.Second)
	n := len(c.log)
	wantAnswer(t, "already in", c.add("id", 1000, 0, TopicPartition{Topic: "a", Partition: 2}), 1000, 0)
	if len(c.log) != n {
		t.Fatal("an idempotent add wrote a record")
	}
	c.add("id", 1000, 0, TopicPartition{Topic: "a", Partition: 0}, TopicPartition{Topic: "a", Partition: 2})
	m := c.txns["id"]
	want := []TopicPartition{{Topic: "a", Partition: 0}, {Topic: "a", Partition: 2}, {Topic: "b", Partition: 1}}
	if m.State != Ongoing || !reflect.DeepEqual(m.Partitions, want) || m.StartTimeMs != start {
		t.Fatalf("after adds: %+v", m)
	}
}

func TestCompleteChecksTheMarkerRound(t *testing.T) {
	s := PrepareCommit
	m := fixture(&s)
	wantCode(t, "other producer id", Complete(m, fixPID+1, fixEpoch, nowReq), sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH)
	wantCode(t, "unknown", Complete(nil, fixPID, fixEpoch, nowReq), sluicev1.ErrorCode_INVALID_TXN_STATE)
	r := Complete(m, fixPID, fixEpoch, nowReq)
	if r.Write == nil || r.Write.State != CompleteCommit || r.Write.Partitions != nil || r.SendMarkers || r.Write.UpdateTimeMs != afterUpdate {
		t.Fatalf("%+v", r.Write)
	}
}

func TestExpireAfterTheConfiguredIdleTime(t *testing.T) {
	s := CompleteAbort
	m := *fixture(&s)
	if r := Expire(m, time.UnixMilli(updateMs+59_999), time.Minute); r.Write != nil {
		t.Fatal("expired early")
	}
	r := Expire(m, time.UnixMilli(updateMs+60_000), time.Minute)
	if r.Write == nil || r.Write.State != Dead {
		t.Fatalf("%+v", r)
	}
	if _, value, err := EncodeRecord(*r.Write); err != nil || value != nil {
		t.Fatalf("Dead encodes as %q, %v; want a tombstone", value, err)
	}
}
