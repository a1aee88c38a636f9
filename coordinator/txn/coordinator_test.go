package txn

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

var bg = context.Background()

func initPID(c *Coordinator, id string, timeoutMs int32) (ProducerIDAndEpoch, error) {
	return c.InitProducerID(bg, InitProducerIDRequest{TransactionalID: id, TimeoutMs: timeoutMs, ProducerID: NoProducerID, ProducerEpoch: NoProducerEpoch})
}

func addPartition(c *Coordinator, id string, pe ProducerIDAndEpoch, tps ...TopicPartition) error {
	return c.AddPartitions(bg, AddPartitionsRequest{TransactionalID: id, ProducerID: pe.ProducerID, ProducerEpoch: pe.ProducerEpoch, ClientVersion: TV2, Partitions: tps})
}

func endTxn(c *Coordinator, id string, pe ProducerIDAndEpoch, commit bool) (ProducerIDAndEpoch, error) {
	return c.EndTxn(bg, EndTxnRequest{TransactionalID: id, ProducerID: pe.ProducerID, ProducerEpoch: pe.ProducerEpoch, Commit: commit, ClientVersion: TV2})
}

func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// The vectors' commit_abort_commit through the I/O path: every record
// the core decides is in the state log, in Kafka's order, each Prepare*
// followed by its markers (coordinator epoch = the leader epoch) and its
// Complete*.
func TestCommitAbortCommitWritesTheVectorsStateLog(t *testing.T) {
	wantLog, _ := kafkaStateLogs(t)
	e := newTxnEnv(t)
	c := e.coordinator(nil)
	e.lead(c, 0, 7)
	const id = "u12-txn"
	tp := TopicPartition{Topic: "u12-txn", Partition: 0}

	pe := must[ProducerIDAndEpoch](t, "InitProducerID")(initPID(c, id, 60000))
	if pe != (ProducerIDAndEpoch{1000, 0}) {
		t.Fatalf("InitProducerID = %+v, want producer 1000 epoch 0", pe)
	}
	for i, commit := range []bool{true, false, true} {
		e.clock.Advance(10 * time.Millisecond)
		if err := addPartition(c, id, pe, tp); err != nil {
			t.Fatalf("txn %d: AddPartitions: %v", i, err)
		}
		if err := addPartition(c, id, pe, tp); err != nil {
			t.Fatalf("txn %d: second AddPartitions: %v", i, err)
		}
		next := must[ProducerIDAndEpoch](t, "EndTxn")(endTxn(c, id, pe, commit))
		if next.ProducerEpoch != pe.ProducerEpoch+1 {
			t.Fatalf("txn %d: EndTxn answered epoch %d, want %d (TV2 bump)", i, next.ProducerEpoch, pe.ProducerEpoch+1)
		}
		pe = next
		want := CompleteAbort
		if commit {
			want = CompleteCommit
		}
		waitState(t, c, id, want)
	}
	if got := stateLogPairs(e.log.records(t, 0)); !reflect.DeepEqual(got, wantLog) {
		t.Fatalf("state log\n got %v\nwant %v", got, wantLog)
	}
	rounds := e.markers.calls()
	if len(rounds) != 3 {
		t.Fatalf("%d marker rounds, want 3: %+v", len(rounds), rounds)
	}
	for i, r := range rounds {
		if r.Commit != (i != 1) || r.ProducerID != 1000 || r.ProducerEpoch != int16(i+1) || r.CoordinatorEpoch != 7 ||
			!reflect.DeepEqual(r.Partitions, []TopicPartition{tp}) {
			t.Errorf("marker round %d: %+v", i, r)
		}
	}
}

// The vectors' fencing: a second producer's InitProducerId aborts the
// first one's open transaction (PrepareAbort with one epoch bump, ABORT
// markers, CompleteAbort) and the first producer is fenced.
func TestFencingWritesTheVectorsStateLog(t *testing.T) {
	_, wantLog := kafkaStateLogs(t)
	e := newTxnEnv(t)
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	const id = "u12-fence"
	tp := TopicPartition{Topic: "u12-fence", Partition: 0}

	p1 := must[ProducerIDAndEpoch](t, "p1 init")(initPID(c, id, 60000))
	if err := addPartition(c, id, p1, tp); err != nil {
		t.Fatal(err)
	}
	_, err := initPID(c, id, 60000)
	wantErrCode(t, "p2 init while p1's transaction is open", err, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	waitState(t, c, id, CompleteAbort)
	p2 := must[ProducerIDAndEpoch](t, "p2 init retry")(initPID(c, id, 60000))
	if p2 != (ProducerIDAndEpoch{1000, 2}) {
		t.Fatalf("p2 = %+v, want producer 1000 epoch 2", p2)
	}
	wantErrCode(t, "p1 adds", addPartition(c, id, p1, tp), sluicev1.ErrorCode_PRODUCER_FENCED)
	_, err = endTxn(c, id, p1, true)
	wantErrCode(t, "p1 commits", err, sluicev1.ErrorCode_PRODUCER_FENCED)
	if err := addPartition(c, id, p2, tp); err != nil {
		t.Fatal(err)
	}
	must[ProducerIDAndEpoch](t, "p2 commits")(endTxn(c, id, p2, true))
	waitState(t, c, id, CompleteCommit)
	if got := stateLogPairs(e.log.records(t, 0)); !reflect.DeepEqual(got, wantLog) {
		t.Fatalf("state log\n got %v\nwant %v", got, wantLog)
	}
}

// Failover: a coordinator writes PrepareCommit but cannot deliver its
// markers; it resigns; the next leader loads the partition, sends the
// markers at its own coordinator epoch and writes CompleteCommit.
func TestNewLeaderFinishesAPrepareCommitItLoads(t *testing.T) {
	e := newTxnEnv(t)
	stuck := &fakeMarkers{fail: func(Markers, TopicPartition, int) error {
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "no leader")
	}}
	a := e.coordinator(stuck)
	e.lead(a, 0, 1)
	const id = "failover"
	tps := []TopicPartition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}}
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(a, id, 60000))
	if err := addPartition(a, id, pe, tps...); err != nil {
		t.Fatal(err)
	}
	must[ProducerIDAndEpoch](t, "EndTxn")(endTxn(a, id, pe, true))
	waitFor(t, "the first coordinator's marker rounds fail", func() error {
		if len(stuck.calls()) < 2 {
			return errs.New(sluicev1.ErrorCode_NONE, "rounds %d", len(stuck.calls()))
		}
		return nil
	})

	// Leadership moves: a resigns at epoch 1, b leads at epoch 2.
	a.Resigned(cluster.TopicPartition{Topic: StateTopic, Partition: 0}, 1)
	_, err := a.Describe(id)
	wantErrCode(t, "describe on the resigned coordinator", err, sluicev1.ErrorCode_NOT_COORDINATOR)
	_, err = initPID(a, id, 60000)
	wantErrCode(t, "init on the resigned coordinator", err, sluicev1.ErrorCode_NOT_COORDINATOR)
	waitFor(t, "the resigned coordinator's marker round stops", func() error {
		if n := a.goroutines.Running(); n != 0 {
			return errs.New(sluicev1.ErrorCode_NONE, "%d goroutines", n)
		}
		return nil
	})

	b := e.coordinator(nil)
	e.lead(b, 0, 2)
	m := waitState(t, b, id, CompleteCommit)
	if m.ProducerID != pe.ProducerID || m.ProducerEpoch != pe.ProducerEpoch+1 {
		t.Fatalf("completed as %+v", m)
	}
	rounds := e.markers.calls()
	if len(rounds) != 1 || !rounds[0].Commit || rounds[0].CoordinatorEpoch != 2 || rounds[0].ProducerEpoch != 1 ||
		!reflect.DeepEqual(rounds[0].Partitions, tps) {
		t.Fatalf("the new leader's markers: %+v", rounds)
	}
	recs := e.log.records(t, 0)
	if last := recs[len(recs)-1]; last.State != CompleteCommit {
		t.Fatalf("last record %v", last.State)
	}
	// The producer's retry of EndTxn on the new coordinator is answered
	// from the loaded state (a retry: same outcome).
	got := must[ProducerIDAndEpoch](t, "EndTxn retry")(endTxn(b, id, pe, true))
	if got.ProducerEpoch != pe.ProducerEpoch+1 {
		t.Fatalf("retry answered %+v", got)
	}
}

// Ids of a partition this node does not lead, or no longer leads, are
// answered NOT_COORDINATOR; another partition's ids are unaffected.
func TestNotCoordinatorAfterResign(t *testing.T) {
	e := newTxnEnv(t)
	e.cfg.StatePartitions = 2
	c := e.coordinator(nil)
	// Two ids in different partitions.
	ids := map[int32]string{}
	for i := 0; len(ids) < 2; i++ {
		id := "id-" + string(rune('a'+i))
		if _, ok := ids[PartitionFor(id, 2)]; !ok {
			ids[PartitionFor(id, 2)] = id
		}
	}
	_, err := initPID(c, ids[0], 1000)
	wantErrCode(t, "before any leadership", err, sluicev1.ErrorCode_NOT_COORDINATOR)
	e.lead(c, 0, 3)
	e.lead(c, 1, 5)
	for p, id := range ids {
		if _, err := initPID(c, id, 1000); err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
	}
	// A Resigned for another epoch is not this leadership's.
	c.Resigned(cluster.TopicPartition{Topic: StateTopic, Partition: 0}, 2)
	must[ProducerIDAndEpoch](t, "after a stale resign")(initPID(c, ids[0], 1000))
	c.Resigned(cluster.TopicPartition{Topic: StateTopic, Partition: 0}, 3)
	_, err = initPID(c, ids[0], 1000)
	wantErrCode(t, "after resign", err, sluicev1.ErrorCode_NOT_COORDINATOR)
	must[ProducerIDAndEpoch](t, "the other partition")(initPID(c, ids[1], 1000))
	// Other topics' leadership is not the coordinator's business.
	c.BecameLeader(cluster.TopicPartition{Topic: "__consumer_offsets", Partition: 0}, 1)
	_, err = initPID(c, ids[0], 1000)
	wantErrCode(t, "after another topic's BecameLeader", err, sluicev1.ErrorCode_NOT_COORDINATOR)
}

// While a partition loads its ids answer COORDINATOR_LOAD_IN_PROGRESS
// (and List too); a load overtaken by a resign is abandoned.
func TestLoadInProgressDuringASlowLoad(t *testing.T) {
	e := newTxnEnv(t)
	first := e.coordinator(nil)
	e.lead(first, 0, 1)
	for _, id := range []string{"a", "b", "c"} {
		must[ProducerIDAndEpoch](t, "init "+id)(initPID(first, id, 1000))
	}
	first.Resigned(cluster.TopicPartition{Topic: StateTopic, Partition: 0}, 1)

	gate := make(chan struct{})
	e.log.setLoadGate(gate)
	c := e.coordinator(nil)
	tp := cluster.TopicPartition{Topic: StateTopic, Partition: 0}
	e.log.setLeaderEpoch(0, 2)
	c.BecameLeader(tp, 2)
	_, err := initPID(c, "a", 1000)
	wantErrCode(t, "init while loading", err, sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS)
	_, err = c.Describe("b")
	wantErrCode(t, "describe while loading", err, sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS)
	_, err = c.List(ListFilter{})
	wantErrCode(t, "list while loading", err, sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS)

	// Superseded: resigned while loading, then led again at epoch 3.
	c.Resigned(tp, 2)
	_, err = initPID(c, "a", 1000)
	wantErrCode(t, "init after resign during load", err, sluicev1.ErrorCode_NOT_COORDINATOR)
	e.log.setLeaderEpoch(0, 3)
	c.BecameLeader(tp, 3)
	close(gate)
	waitLoaded(t, c, 0)
	list := must[[]Listing](t, "list")(c.List(ListFilter{}))
	if len(list) != 3 {
		t.Fatalf("loaded %+v", list)
	}
	d := must[Description](t, "describe")(c.Describe("b"))
	if d.CoordinatorEpoch != 3 || d.State != Empty || d.ProducerEpoch != 0 {
		t.Fatalf("b = %+v", d)
	}
	pe := must[ProducerIDAndEpoch](t, "init after load")(initPID(c, "a", 1000))
	if pe.ProducerEpoch != 1 {
		t.Fatalf("init after load = %+v, want the loaded epoch bumped", pe)
	}
}

// One transition in flight per id: while one request's record is being
// written, others for the same id get CONCURRENT_TRANSACTIONS; other
// ids are served.
func TestConcurrentRequestsOnOneID(t *testing.T) {
	e := newTxnEnv(t)
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	must[ProducerIDAndEpoch](t, "init other")(initPID(c, "other", 1000))

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.log.setAppendHook(func(cluster.TopicPartition) error {
		blocked := false
		once.Do(func() { blocked = true })
		if blocked {
			close(entered)
			<-release
		}
		return nil
	})
	type answer struct {
		pe  ProducerIDAndEpoch
		err error
	}
	done := make(chan answer, 1)
	go func() {
		pe, err := initPID(c, "busy", 1000)
		done <- answer{pe, err}
	}()
	<-entered
	_, err := initPID(c, "busy", 1000)
	wantErrCode(t, "second init while the first is written", err, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	_, err = c.Describe("busy")
	wantErrCode(t, "describe before the record is applied", err, sluicev1.ErrorCode_TRANSACTIONAL_ID_NOT_FOUND)
	must[ProducerIDAndEpoch](t, "another id meanwhile")(initPID(c, "other", 1000))
	close(release)
	a := <-done
	if a.err != nil || a.pe.ProducerEpoch != 0 {
		t.Fatalf("first init: %+v", a)
	}
	must[ProducerIDAndEpoch](t, "init once the first is applied")(initPID(c, "busy", 1000))
}

// A failed append leaves memory as it was and answers a retriable error.
func TestFailedAppendLeavesMemoryUnchanged(t *testing.T) {
	e := newTxnEnv(t)
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	const id = "fail"
	tp := TopicPartition{Topic: "t", Partition: 0}
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, id, 1000))
	for _, tc := range []struct {
		err  error
		want sluicev1.ErrorCode
	}{
		{errs.New(sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS, "isr"), sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE},
		{errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "moved"), sluicev1.ErrorCode_NOT_COORDINATOR},
		{errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "disk"), sluicev1.ErrorCode_NOT_COORDINATOR},
	} {
		e.log.setAppendHook(func(cluster.TopicPartition) error { return tc.err })
		wantErrCode(t, "add with "+errs.Code(tc.err).String(), addPartition(c, id, pe, tp), tc.want)
		d := must[Description](t, "describe")(c.Describe(id))
		if d.State != Empty || len(d.Partitions) != 0 {
			t.Fatalf("after a failed append: %+v", d.Metadata)
		}
	}
	e.log.setAppendHook(nil)
	if err := addPartition(c, id, pe, tp); err != nil {
		t.Fatal(err)
	}
	if d := must[Description](t, "describe")(c.Describe(id)); d.State != Ongoing {
		t.Fatalf("after the retry: %v", d.State)
	}
	if n := len(e.log.records(t, 0)); n != 2 {
		t.Fatalf("%d records, want 2 (Empty, Ongoing)", n)
	}
}

// ErrCommitUnknown: the id answers CONCURRENT_TRANSACTIONS until the
// record is known committed, then is served from it (decision 32).
func TestCommitUnknownBlocksTheIDUntilResolved(t *testing.T) {
	e := newTxnEnv(t)
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	const id = "unknown"
	tp := TopicPartition{Topic: "t", Partition: 0}
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, id, 1000))
	if err := addPartition(c, id, pe, tp); err != nil {
		t.Fatal(err)
	}
	e.log.setAppendHook(func(cluster.TopicPartition) error { return errUnknown })
	_, err := endTxn(c, id, pe, true)
	wantErrCode(t, "EndTxn whose record may or may not commit", err, sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE)
	e.log.setAppendHook(nil)
	_, err = endTxn(c, id, pe, true)
	wantErrCode(t, "retry while unresolved", err, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	if d := must[Description](t, "describe")(c.Describe(id)); d.State != Ongoing {
		t.Fatalf("applied before known committed: %v", d.State)
	}
	e.log.commitAll()
	waitState(t, c, id, CompleteCommit)
	got := must[ProducerIDAndEpoch](t, "EndTxn retry after resolution")(endTxn(c, id, pe, true))
	if got.ProducerEpoch != pe.ProducerEpoch+1 {
		t.Fatalf("retry answered %+v", got)
	}
}

// An uncertain record on a partition that is then resigned: the id is
// dropped with the partition; the next leader decides from the log.
func TestCommitUnknownThenResignDropsTheState(t *testing.T) {
	e := newTxnEnv(t)
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, "x", 1000))
	lost := errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "leadership lost while waiting; %w", cluster.ErrCommitUnknown)
	e.log.setAppendHook(func(cluster.TopicPartition) error { return lost })
	wantErrCode(t, "add whose leadership was lost while waiting", addPartition(c, "x", pe, TopicPartition{Topic: "t"}), sluicev1.ErrorCode_NOT_COORDINATOR)
	wantErrCode(t, "add again before the resign arrives", addPartition(c, "x", pe, TopicPartition{Topic: "t"}), sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	e.log.setAppendHook(nil)
	c.Resigned(cluster.TopicPartition{Topic: StateTopic, Partition: 0}, 1)
	e.lead(c, 0, 2) // the fake's new leader keeps the appended record
	if d := must[Description](t, "describe")(c.Describe("x")); d.State != Ongoing || d.CoordinatorEpoch != 2 {
		t.Fatalf("reloaded %+v", d)
	}
	waitFor(t, "the resolver of epoch 1 ends", func() error {
		if n := c.goroutines.Running(); n != 0 {
			return errs.New(sluicev1.ErrorCode_NONE, "%d goroutines", n)
		}
		return nil
	})
}

// The timeout scan aborts an expired transaction with an epoch bump: the
// producer's commit is then PRODUCER_FENCED (KAFKA-20785), never a success.
func TestTimedOutTransactionIsAbortedAndItsProducerFenced(t *testing.T) {
	e := newTxnEnv(t)
	e.cfg.AbortTimedOutInterval = 5 * time.Millisecond // the loop itself scans
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	const id = "slow"
	tp := TopicPartition{Topic: "t", Partition: 3}
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, id, 1000))
	if err := addPartition(c, id, pe, tp); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Second)
	m := waitState(t, c, id, CompleteAbort)
	if m.ProducerEpoch != pe.ProducerEpoch+1 {
		t.Fatalf("aborted at epoch %d, want %d", m.ProducerEpoch, pe.ProducerEpoch+1)
	}
	_, err := endTxn(c, id, pe, true)
	wantErrCode(t, "the timed-out producer commits", err, sluicev1.ErrorCode_PRODUCER_FENCED)
	wantErrCode(t, "the timed-out producer adds", addPartition(c, id, pe, tp), sluicev1.ErrorCode_PRODUCER_FENCED)
	rounds := e.markers.calls()
	if len(rounds) != 1 || rounds[0].Commit || rounds[0].ProducerEpoch != pe.ProducerEpoch+1 {
		t.Fatalf("markers %+v", rounds)
	}
	want := [][2]any{{"Empty", 0.0}, {"Ongoing", 0.0}, {"PrepareAbort", 1.0}, {"CompleteAbort", 1.0}}
	if got := stateLogPairs(e.log.records(t, 0)); !reflect.DeepEqual(got, want) {
		t.Fatalf("state log %v, want %v", got, want)
	}
}

// Ids idle for transactional.id.expiration.ms are removed (a tombstone).
func TestIdleIDExpires(t *testing.T) {
	e := newTxnEnv(t)
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	must[ProducerIDAndEpoch](t, "init old")(initPID(c, "old", 1000))
	e.clock.Advance(DefaultIDExpiration)
	must[ProducerIDAndEpoch](t, "init young")(initPID(c, "young", 1000))
	e.clock.Advance(time.Minute)
	c.scanTimeouts()
	waitFor(t, "old expired", func() error {
		if _, err := c.Describe("old"); errs.Code(err) != sluicev1.ErrorCode_TRANSACTIONAL_ID_NOT_FOUND {
			return fmt.Errorf("describe old: %v", err)
		}
		return nil
	})
	must[Description](t, "describe young")(c.Describe("young"))
	recs := e.log.records(t, 0)
	if last := recs[len(recs)-1]; last.State != Dead || last.TransactionalID != "old" {
		t.Fatalf("last record %+v, want old's tombstone", last)
	}
	// A reload forgets it too.
	c.Resigned(cluster.TopicPartition{Topic: StateTopic, Partition: 0}, 1)
	e.lead(c, 0, 2)
	_, err := c.Describe("old")
	wantErrCode(t, "describe expired id after reload", err, sluicev1.ErrorCode_TRANSACTIONAL_ID_NOT_FOUND)
}

// Markers are retried until every partition has its marker; a partition
// whose topic is gone is dropped; only then is Complete* written.
func TestMarkersRetriedUntilTheySucceed(t *testing.T) {
	e := newTxnEnv(t)
	ok, gone, flaky := TopicPartition{Topic: "a", Partition: 0}, TopicPartition{Topic: "deleted", Partition: 0}, TopicPartition{Topic: "z", Partition: 1}
	e.markers.setFail(func(_ Markers, tp TopicPartition, round int) error {
		switch {
		case tp == gone:
			return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "deleted")
		case tp == flaky && round < 4:
			return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "moving")
		}
		return nil
	})
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, "m", 1000))
	if err := addPartition(c, "m", pe, flaky, gone, ok); err != nil {
		t.Fatal(err)
	}
	must[ProducerIDAndEpoch](t, "commit")(endTxn(c, "m", pe, true))
	waitState(t, c, "m", CompleteCommit)
	rounds := e.markers.calls()
	if len(rounds) != 4 {
		t.Fatalf("%d rounds, want 4: %+v", len(rounds), rounds)
	}
	if !reflect.DeepEqual(rounds[0].Partitions, []TopicPartition{ok, gone, flaky}) {
		t.Fatalf("first round %v", rounds[0].Partitions)
	}
	for _, r := range rounds[1:] {
		if !reflect.DeepEqual(r.Partitions, []TopicPartition{flaky}) {
			t.Fatalf("retry round %v, want only the failed partition", r.Partitions)
		}
	}
}

// A stale coordinator epoch at a partition stops the round without
// completing: the partition's current leader finishes the transaction.
func TestFencedMarkerRoundStops(t *testing.T) {
	e := newTxnEnv(t)
	e.markers.setFail(func(Markers, TopicPartition, int) error {
		return errs.New(sluicev1.ErrorCode_TRANSACTION_COORDINATOR_FENCED, "newer coordinator")
	})
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, "f", 1000))
	if err := addPartition(c, "f", pe, TopicPartition{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	must[ProducerIDAndEpoch](t, "commit")(endTxn(c, "f", pe, true))
	waitFor(t, "the round ends", func() error {
		if n := c.goroutines.Running(); n != 0 {
			return errs.New(sluicev1.ErrorCode_NONE, "%d goroutines", n)
		}
		return nil
	})
	if d := must[Description](t, "describe")(c.Describe("f")); d.State != PrepareCommit {
		t.Fatalf("state %v, want PrepareCommit left for the next leader", d.State)
	}
	if n := len(e.markers.calls()); n != 1 {
		t.Fatalf("%d rounds, want 1", n)
	}
}

// An empty transaction's end (TV2) writes Prepare* and Complete* with no
// markers.
func TestEmptyTransactionCompletesWithoutMarkers(t *testing.T) {
	e := newTxnEnv(t)
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, "e", 1000))
	next := must[ProducerIDAndEpoch](t, "abort")(endTxn(c, "e", pe, false))
	if next.ProducerEpoch != 1 {
		t.Fatalf("%+v", next)
	}
	waitState(t, c, "e", CompleteAbort)
	if n := len(e.markers.calls()); n != 0 {
		t.Fatalf("%d marker rounds for an empty transaction", n)
	}
}

func TestDescribeAndList(t *testing.T) {
	e := newTxnEnv(t)
	c := e.coordinator(nil)
	e.lead(c, 0, 4)
	tp := TopicPartition{Topic: "t"}
	a := must[ProducerIDAndEpoch](t, "init a")(initPID(c, "a", 60000))
	b := must[ProducerIDAndEpoch](t, "init b")(initPID(c, "b", 60000))
	must[ProducerIDAndEpoch](t, "init c")(initPID(c, "c", 60000))
	if err := addPartition(c, "a", a, tp); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(30 * time.Second)
	if err := addPartition(c, "b", b, tp); err != nil {
		t.Fatal(err)
	}
	d := must[Description](t, "describe a")(c.Describe("a"))
	if d.State != Ongoing || d.CoordinatorEpoch != 4 || !reflect.DeepEqual(d.Partitions, []TopicPartition{tp}) || d.TimeoutMs != 60000 {
		t.Fatalf("describe a: %+v", d)
	}
	_, err := c.Describe("")
	wantErrCode(t, "describe empty id", err, sluicev1.ErrorCode_INVALID_REQUEST)

	names := func(ls []Listing) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.TransactionalID)
		}
		return out
	}
	for _, tc := range []struct {
		f    ListFilter
		want []string
	}{
		{ListFilter{}, []string{"a", "b", "c"}},
		{ListFilter{States: []State{Ongoing}}, []string{"a", "b"}},
		{ListFilter{States: []State{Empty}}, []string{"c"}},
		{ListFilter{ProducerIDs: []int64{b.ProducerID}}, []string{"b"}},
		{ListFilter{MinDuration: 10 * time.Second}, []string{"a"}},
		{ListFilter{MinDuration: time.Hour}, nil},
	} {
		got := must[[]Listing](t, "list")(c.List(tc.f))
		if !reflect.DeepEqual(names(got), tc.want) {
			t.Errorf("List(%+v) = %v, want %v", tc.f, names(got), tc.want)
		}
	}
}

// Requests are validated before they are routed.
func TestRequestsAreValidated(t *testing.T) {
	e := newTxnEnv(t)
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	_, err := initPID(c, "", 1000)
	wantErrCode(t, "empty id", err, sluicev1.ErrorCode_INVALID_REQUEST)
	_, err = initPID(c, "x", 0)
	wantErrCode(t, "zero timeout", err, sluicev1.ErrorCode_INVALID_TRANSACTION_TIMEOUT)
	_, err = initPID(c, "x", int32((16 * time.Minute).Milliseconds()))
	wantErrCode(t, "timeout above the maximum", err, sluicev1.ErrorCode_INVALID_TRANSACTION_TIMEOUT)
	_, err = c.InitProducerID(bg, InitProducerIDRequest{TransactionalID: "x", TimeoutMs: 1000, ProducerID: 1000, ProducerEpoch: -1})
	wantErrCode(t, "producer id without epoch", err, sluicev1.ErrorCode_INVALID_REQUEST)
	wantErrCode(t, "add for an unknown id", addPartition(c, "x", ProducerIDAndEpoch{1000, 0}, TopicPartition{Topic: "t"}),
		sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING)
}

// Close stops every goroutine and later requests are NOT_COORDINATOR.
func TestCloseStopsEverything(t *testing.T) {
	e := newTxnEnv(t)
	e.markers.setFail(func(Markers, TopicPartition, int) error {
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "never")
	})
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, "k", 1000))
	if err := addPartition(c, "k", pe, TopicPartition{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	must[ProducerIDAndEpoch](t, "commit")(endTxn(c, "k", pe, true)) // its markers retry forever
	gate := make(chan struct{})
	defer close(gate)
	e.log.setLoadGate(gate)
	e.log.setLeaderEpoch(1, 1)
	c.BecameLeader(cluster.TopicPartition{Topic: StateTopic, Partition: 1}, 1) // a load that never ends by itself
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := c.goroutines.Running(); n != 0 {
		t.Fatalf("%d goroutines after Close", n)
	}
	_, err := initPID(c, "k", 1000)
	wantErrCode(t, "after Close", err, sluicev1.ErrorCode_NOT_COORDINATOR)
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A load retries a failing read. A corrupt record is skipped and
// reported, the rest loaded (issue 29); a record of a newer version stops
// the load for good (COORDINATOR_NOT_AVAILABLE), since skipping it would
// resume an older state of its id.
func TestLoadRetriesReadsSkipsCorruptRecordsAndRefusesNewerOnes(t *testing.T) {
	e := newTxnEnv(t)
	e.log.seed(t, 0, Metadata{
		TransactionalID: "seeded", ProducerID: 1000, PrevProducerID: 1000, NextProducerID: NoProducerID,
		ProducerEpoch: 4, LastProducerEpoch: 3, TimeoutMs: 1000, State: Empty,
		StartTimeMs: NoTimestamp, UpdateTimeMs: e.clock.Now().UnixMilli(),
	})
	e.log.setReadHook(func(n int) error {
		if n <= 3 {
			return errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "read %d fails", n)
		}
		return nil
	})
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	if d := must[Description](t, "describe")(c.Describe("seeded")); d.ProducerEpoch != 4 {
		t.Fatalf("loaded %+v", d.Metadata)
	}

	var b batch.Builder
	b.Reset(0)
	b.Add(0, []byte("bad"), []byte(`{"version":1,"state":"NoSuchState"}`), nil)
	e.log.seedRaw(0, b.Finish(batch.PlainProducer, 0))
	c.Resigned(cluster.TopicPartition{Topic: StateTopic, Partition: 0}, 1)
	e.lead(c, 0, 2)
	if d := must[Description](t, "describe after the corrupt record")(c.Describe("seeded")); d.ProducerEpoch != 4 {
		t.Fatalf("loaded %+v", d.Metadata)
	}
	if _, err := c.Describe("bad"); errs.Code(err) == sluicev1.ErrorCode_NONE || c.SkippedRecords() != 1 {
		t.Fatalf("the corrupt record: describe %v, skipped %d; want it skipped and counted", err, c.SkippedRecords())
	}

	b.Reset(0)
	b.Add(0, []byte("newer"), []byte(`{"version":99}`), nil)
	e.log.seedRaw(0, b.Finish(batch.PlainProducer, 0))
	c.Resigned(cluster.TopicPartition{Topic: StateTopic, Partition: 0}, 2)
	e.log.setLeaderEpoch(0, 3)
	c.BecameLeader(cluster.TopicPartition{Topic: StateTopic, Partition: 0}, 3)
	waitFor(t, "the load stopped by a newer record is refused", func() error {
		_, err := c.Describe("seeded")
		if errs.Code(err) != sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE {
			return fmt.Errorf("describe: %v", err)
		}
		return nil
	})
	_, err := initPID(c, "seeded", 1000)
	wantErrCode(t, "init on a partition that could not be loaded", err, sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE)
}

// An EndTxn whose epoch bump exhausts the epochs takes a new producer id
// from the ProducerIDSource; the markers carry the old id at the last
// epoch and Complete moves the id to the new one at epoch 0.
func TestEpochExhaustionTakesANewProducerID(t *testing.T) {
	e := newTxnEnv(t)
	tp := TopicPartition{Topic: "t"}
	now := e.clock.Now().UnixMilli()
	e.log.seed(t, 0, Metadata{
		TransactionalID: "old", ProducerID: 500, PrevProducerID: 500, NextProducerID: NoProducerID,
		ProducerEpoch: 32766, LastProducerEpoch: 32765, TimeoutMs: 60000, State: Ongoing,
		Partitions: []TopicPartition{tp}, StartTimeMs: now, UpdateTimeMs: now,
	})
	c := e.coordinator(nil)
	e.lead(c, 0, 1)
	got := must[ProducerIDAndEpoch](t, "commit")(endTxn(c, "old", ProducerIDAndEpoch{500, 32766}, true))
	if got != (ProducerIDAndEpoch{1000, 0}) {
		t.Fatalf("EndTxn answered %+v, want the new producer id 1000 at epoch 0", got)
	}
	m := waitState(t, c, "old", CompleteCommit)
	if m.ProducerID != 1000 || m.ProducerEpoch != 0 || m.PrevProducerID != 500 {
		t.Fatalf("completed as %+v", m)
	}
	rounds := e.markers.calls()
	if len(rounds) != 1 || rounds[0].ProducerID != 500 || rounds[0].ProducerEpoch != 32767 {
		t.Fatalf("markers %+v, want producer 500 epoch 32767", rounds)
	}
}

// Close waits for its goroutines at most CloseWait and says so when one
// (here a marker writer that ignores its context) overruns.
func TestCloseWaitIsBounded(t *testing.T) {
	e := newTxnEnv(t)
	e.cfg.CloseWait = 50 * time.Millisecond
	hold, entered := make(chan struct{}), make(chan struct{}, 1)
	stubborn := markerFunc(func(context.Context, Markers) map[TopicPartition]error {
		entered <- struct{}{}
		<-hold
		return nil
	})
	c := e.coordinator(stubborn)
	e.lead(c, 0, 1)
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, "s", 1000))
	if err := addPartition(c, "s", pe, TopicPartition{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	must[ProducerIDAndEpoch](t, "commit")(endTxn(c, "s", pe, true))
	<-entered
	if err := c.Close(); err == nil {
		t.Fatal("Close returned nil with a goroutine still running")
	}
	close(hold)
	waitFor(t, "the marker round ends", func() error {
		if n := c.goroutines.Running(); n != 0 {
			return fmt.Errorf("%d goroutines", n)
		}
		return nil
	})
}

// The first batch of a producer's next transaction arrives while its
// previous transaction's markers are still being written: AddPartitions
// waits for the transaction to complete and then adds the partition,
// instead of answering CONCURRENT_TRANSACTIONS; with the markers stuck
// longer than MaxConcurrentWait it answers CONCURRENT_TRANSACTIONS.
func TestAddPartitionsWaitsForThePreviousTransactionsMarkers(t *testing.T) {
	e := newTxnEnv(t)
	e.cfg.MaxConcurrentWait = 300 * time.Millisecond
	c, open := gatedCoordinator(t, e)
	e.lead(c, 0, 1)
	tp := TopicPartition{Topic: "a", Partition: 0}
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, "w", 1000))
	if err := addPartition(c, "w", pe, tp); err != nil {
		t.Fatal(err)
	}
	next := must[ProducerIDAndEpoch](t, "commit")(endTxn(c, "w", pe, true))

	// Markers stuck past MaxConcurrentWait: CONCURRENT_TRANSACTIONS.
	start := time.Now()
	wantErrCode(t, "add while the markers are stuck", addPartition(c, "w", next, tp), sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	if waited := time.Since(start); waited < e.cfg.MaxConcurrentWait {
		t.Errorf("answered after %v, before MaxConcurrentWait %v", waited, e.cfg.MaxConcurrentWait)
	}

	// Markers released while the request waits: it succeeds.
	done := make(chan error, 1)
	go func() { done <- addPartition(c, "w", next, tp) }()
	open()
	if err := <-done; err != nil {
		t.Fatalf("add once the markers are written: %v", err)
	}
	m := waitState(t, c, "w", Ongoing)
	if m.ProducerEpoch != next.ProducerEpoch || len(m.Partitions) != 1 {
		t.Errorf("state after the add: %+v", m)
	}
}

// scanTimeouts scans every loaded partition now (scanPartition; the
// scans' own timers wait AbortTimedOutInterval).
func (c *Coordinator) scanTimeouts() {
	c.mu.Lock()
	var all []*statePartition
	for _, ps := range c.rt.PartitionsLocked() {
		all = append(all, ps)
	}
	c.mu.Unlock()
	for _, ps := range all {
		c.scanPartition(ps)
	}
}
