package group

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator/runtime"
	"github.com/sluice-io/sluice/internal/fakeclock"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fakeOffsetsLog is __consumer_offsets in memory with real offsets (one
// per record), everything committed at once, and a gate holding loads.
type fakeOffsetsLog struct {
	mu      sync.Mutex // guards the following
	batches map[int32][][]byte
	end     map[int32]int64
	epochs  map[int32]int32
	gate    chan struct{}
	// holds: an append of a batch whose first record is keyed by one of
	// these groups waits until the channel closes (or its ctx ends).
	holds map[string]chan struct{}
}

// held returns the hold of raw's group, if any.
func (l *fakeOffsetsLog) held(raw []byte) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.holds) == 0 {
		return nil
	}
	var hold chan struct{}
	_ = batch.ForEachRecord(raw, func(r batch.Record) error {
		if k, err := DecodeKey(r.Key); err == nil && hold == nil {
			hold = l.holds[k.Group]
		}
		return nil
	})
	return hold
}

func newFakeOffsetsLog() *fakeOffsetsLog {
	return &fakeOffsetsLog{batches: map[int32][][]byte{}, end: map[int32]int64{}, epochs: map[int32]int32{}}
}

func (l *fakeOffsetsLog) append(p int32, raw []byte) cluster.AppendResult {
	raw = append([]byte(nil), raw...)
	h, _ := batch.ParseHeader(raw)
	base := l.end[p]
	batch.SetBaseOffset(raw, base)
	l.batches[p] = append(l.batches[p], raw)
	l.end[p] = base + int64(h.LastOffsetDelta) + 1
	return cluster.AppendResult{BaseOffset: base, LastOffset: base + int64(h.LastOffsetDelta)}
}

func (l *fakeOffsetsLog) AppendCommitted(ctx context.Context, tp cluster.TopicPartition, raw []byte, leaderEpoch int32, now time.Time) (cluster.AppendResult, error) {
	if hold := l.held(raw); hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return cluster.AppendResult{}, errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "held: %v", ctx.Err())
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epochs[tp.Partition] != leaderEpoch {
		return cluster.AppendResult{}, errs.New(sluicev1.ErrorCode_FENCED_LEADER_EPOCH, "epoch")
	}
	return l.append(tp.Partition, raw), nil
}

func (l *fakeOffsetsLog) WaitCommitted(ctx context.Context, tp cluster.TopicPartition, leaderEpoch int32, lastOffset int64) error {
	return nil
}

func (l *fakeOffsetsLog) ReadForLoad(ctx context.Context, tp cluster.TopicPartition, leaderEpoch int32, offset int64, maxBytes int) (runtime.LogRead, error) {
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return runtime.LogRead{}, ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out runtime.LogRead
	out.EndOffset, out.NextOffset = l.end[tp.Partition], l.end[tp.Partition]
	for _, b := range l.batches[tp.Partition] {
		if h, _ := batch.ParseHeader(b); h.LastOffset() >= offset {
			out.Batches = append(out.Batches, b)
		}
	}
	return out, nil
}

func (l *fakeOffsetsLog) AppendCoordinatorTxn(ctx context.Context, tp cluster.TopicPartition, leaderEpoch int32, transactionalID string,
	producerID int64, producerEpoch int16, verifyOnly bool, build func(baseSequence int32) []byte, now time.Time) (cluster.AppendResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.append(tp.Partition, build(0)), nil
}

func newTestCoordinator(t *testing.T, l *fakeOffsetsLog) *Coordinator {
	c := NewCoordinator(CoordinatorDeps{Log: l, Txn: l,
		Topics: func() (map[string]TopicMetadata, int64) { return nil, 0 }},
		CoordinatorConfig{Partitions: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func waitGroupsLoaded(t *testing.T, c *Coordinator) {
	t.Helper()
	waitFor(t, "partition loaded", func() error {
		_, err := c.FetchOffsets("g", "", -1, nil, false)
		if errs.Code(err) == sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS {
			return err
		}
		return nil
	})
}

var offsetsTP0 = cluster.TopicPartition{Topic: OffsetsTopic, Partition: 0}

// A marker the partition's leader reports while the coordinator loads is
// applied after the load — unless the load itself read it.
func TestGroupCoordinatorMarkersDuringLoad(t *testing.T) {
	l := newFakeOffsetsLog()
	l.epochs[0] = 1
	in := TopicPartition{Topic: "in", Partition: 0}
	c := newTestCoordinator(t, l)
	if _, err := c.FetchOffsets("g", "", -1, nil, false); errs.Code(err) != sluicev1.ErrorCode_NOT_COORDINATOR {
		t.Fatalf("before leading: %v, want NOT_COORDINATOR", err)
	}
	c.BecameLeader(offsetsTP0, 1)
	waitGroupsLoaded(t, c)
	ctx := context.Background()
	for _, pid := range []int64{7, 8} {
		if _, err := c.TxnCommitOffsets(ctx, TxnOffsetCommitRequest{TransactionalID: "t", Group: "g", ProducerID: pid, MemberEpoch: -1,
			Entries: []OffsetCommitEntry{{TP: in, Offset: Offset{Offset: pid * 10}}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Producer 7's marker is in the log before the next load; producer
	// 8's arrives while the new leader epoch loads.
	l.mu.Lock()
	mk := l.append(0, batch.MarkerBatch(batch.Producer{ID: 7, Epoch: 1}, batch.ControlCommit, 0, 1))
	l.epochs[0] = 2
	l.gate = make(chan struct{})
	gate := l.gate
	l.mu.Unlock()
	c.Resigned(offsetsTP0, 1)
	c.BecameLeader(offsetsTP0, 2)
	if _, err := c.FetchOffsets("g", "", -1, nil, false); errs.Code(err) != sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS {
		t.Fatalf("while loading: %v", err)
	}
	c.TxnMarkerCommitted(offsetsTP0, 7, false, mk.BaseOffset) // already in the log: the load decides (it committed)
	l.mu.Lock()
	mk8 := l.append(0, batch.MarkerBatch(batch.Producer{ID: 8, Epoch: 1}, batch.ControlCommit, 0, 1))
	l.mu.Unlock()
	// Reported before the load reads the log end: the load includes it
	// anyway, and applying it twice must be harmless.
	c.TxnMarkerCommitted(offsetsTP0, 8, true, mk8.BaseOffset)
	close(gate)
	waitGroupsLoaded(t, c)
	got, err := c.FetchOffsets("g", "", -1, []TopicPartition{in}, true)
	if err != nil || got[0].Err != nil || got[0].Offset.Offset != 80 {
		t.Fatalf("after load: %+v %v, want 80 stable (both committed, producer 8 last)", got, err)
	}
}

// Plain commits are written before they are applied, the later record
// wins, and a tombstone batch from DeleteGroup removes them; the next
// leader's load reproduces the same state.
func TestGroupCoordinatorCommitsSurviveReload(t *testing.T) {
	l := newFakeOffsetsLog()
	l.epochs[0] = 1
	c := newTestCoordinator(t, l)
	c.BecameLeader(offsetsTP0, 1)
	waitGroupsLoaded(t, c)
	ctx := context.Background()
	a, b := TopicPartition{Topic: "in", Partition: 0}, TopicPartition{Topic: "in", Partition: 1}
	res, err := c.CommitOffsets(ctx, "g", "", "", -1, []OffsetCommitEntry{{TP: a, Offset: Offset{Offset: 3}},
		{TP: b, Offset: Offset{Offset: 4, Metadata: string(make([]byte, MaxMetadataBytes+1))}}})
	if err != nil || res[a] != nil || errs.Code(res[b]) != sluicev1.ErrorCode_OFFSET_METADATA_TOO_LARGE {
		t.Fatalf("commit: %v %v", res, err)
	}
	if _, err := c.CommitOffsets(ctx, "other", "", "", -1, []OffsetCommitEntry{{TP: a, Offset: Offset{Offset: 9}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteGroup(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteGroup(ctx, "nope"); errs.Code(err) != sluicev1.ErrorCode_GROUP_ID_NOT_FOUND {
		t.Fatalf("delete unknown: %v", err)
	}
	l.mu.Lock()
	l.epochs[0] = 2
	l.mu.Unlock()
	c.Resigned(offsetsTP0, 1)
	c.BecameLeader(offsetsTP0, 2)
	waitGroupsLoaded(t, c)
	got, _ := c.FetchOffsets("g", "", -1, nil, false)
	if len(got) != 1 || got[0].TP != a || got[0].Offset.Offset != 3 {
		t.Fatalf("after reload: %+v", got)
	}
	if got, _ := c.FetchOffsets("other", "", -1, nil, false); len(got) != 0 {
		t.Fatalf("deleted group's offsets came back: %+v", got)
	}
	ls, err := c.ListGroups(nil)
	if err != nil || len(ls) != 1 || ls[0].Group != "g" {
		t.Fatalf("list: %+v %v", ls, err)
	}
}

// KIP-211: a group's offsets are deleted once it has been empty for the
// retention (counted from its last commit when it never had members
// here), and not before.
func TestGroupCoordinatorOffsetsRetention(t *testing.T) {
	l := newFakeOffsetsLog()
	l.epochs[0] = 1
	clock := fakeclock.New(time.Unix(1_800_000_000, 0))
	c := NewCoordinator(CoordinatorDeps{Log: l, Txn: l, Now: clock.Now,
		Topics: func() (map[string]TopicMetadata, int64) { return nil, 0 }},
		CoordinatorConfig{Partitions: 1, OffsetsRetention: time.Hour})
	t.Cleanup(func() { _ = c.Close() })
	c.BecameLeader(offsetsTP0, 1)
	waitGroupsLoaded(t, c)
	ctx := context.Background()
	in := TopicPartition{Topic: "in", Partition: 0}
	commit := func(g string) {
		if _, err := c.CommitOffsets(ctx, g, "", "", -1, []OffsetCommitEntry{{TP: in, Offset: Offset{Offset: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	commit("old")
	clock.Advance(40 * time.Minute)
	// Looking at a group does not restart its retention.
	if _, err := c.DescribeGroup("old"); err != nil {
		t.Fatal(err)
	}
	commit("young")
	clock.Advance(30 * time.Minute) // old: 70 min, young: 30 min
	c.expireOffsets(clock.Now())
	if got, _ := c.FetchOffsets("old", "", -1, nil, false); len(got) != 0 {
		t.Fatalf("old group's offsets kept past the retention: %+v", got)
	}
	if got, _ := c.FetchOffsets("young", "", -1, nil, false); len(got) != 1 {
		t.Fatalf("young group's offsets expired early: %+v", got)
	}
	// The deletion is in the log: a reload agrees.
	l.mu.Lock()
	l.epochs[0] = 2
	l.mu.Unlock()
	c.Resigned(offsetsTP0, 1)
	c.BecameLeader(offsetsTP0, 2)
	waitGroupsLoaded(t, c)
	if ls, _ := c.ListGroups(nil); len(ls) != 1 || ls[0].Group != "young" {
		t.Fatalf("after reload: %+v", ls)
	}
}

// waitFor is wait.For with the bound these tests use.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	wait.For(t, 10*time.Second, what, cond)
}

// Decision 72: a KIP-848 group's membership survives a coordinator
// failover. Two members with assignments; the partition is resigned and
// loaded again; each member's next heartbeat at its epoch goes on with
// the same assignment, and its commit at that epoch is accepted; a
// member that leaves afterwards has its partitions reassigned.
func TestGroupCoordinatorMembershipSurvivesFailover(t *testing.T) {
	l := newFakeOffsetsLog()
	l.epochs[0] = 1
	clock := fakeclock.New(t0)
	topics := meta("t", 2)
	c := NewCoordinator(CoordinatorDeps{Log: l, Txn: l, Now: clock.Now,
		Topics: func() (map[string]TopicMetadata, int64) { return topics, 1 }},
		CoordinatorConfig{Partitions: 1, Group: Config{NewMemberID: counterIDs()}})
	t.Cleanup(func() { _ = c.Close() })
	c.BecameLeader(offsetsTP0, 1)
	waitGroupsLoaded(t, c)
	ctx := context.Background()
	type mem struct {
		id    string
		epoch int32
		owned Assignment
	}
	hb := func(m *mem) HeartbeatResponse {
		t.Helper()
		resp, err := c.Heartbeat(ctx, "g", HeartbeatRequest{MemberID: m.id, MemberEpoch: m.epoch, OwnedSet: true, Owned: m.owned.Clone()})
		if err != nil {
			t.Fatalf("heartbeat of %s at epoch %d: %v", m.id, m.epoch, err)
		}
		m.epoch = resp.MemberEpoch
		if resp.AssignmentChanged {
			m.owned = resp.Assignment.Clone()
		}
		return resp
	}
	join := func() *mem {
		t.Helper()
		resp, err := c.Heartbeat(ctx, "g", HeartbeatRequest{MemberEpoch: 0, SubscribedTopics: []string{"t"}})
		if err != nil {
			t.Fatal(err)
		}
		return &mem{id: resp.MemberID, epoch: resp.MemberEpoch, owned: resp.Assignment}
	}
	a, b := join(), join()
	for range 4 {
		hb(a)
		hb(b)
	}
	if a.owned.Len() != 1 || b.owned.Len() != 1 || a.epoch != b.epoch {
		t.Fatalf("not settled: a %+v, b %+v", a, b)
	}
	// A heartbeat that changes nothing writes nothing.
	l.mu.Lock()
	n := len(l.batches[0])
	l.mu.Unlock()
	hb(a)
	l.mu.Lock()
	if len(l.batches[0]) != n {
		t.Fatalf("a plain heartbeat wrote %d batches", len(l.batches[0])-n)
	}
	l.epochs[0] = 2
	l.mu.Unlock()

	// Failover.
	c.Resigned(offsetsTP0, 1)
	c.BecameLeader(offsetsTP0, 2)
	waitGroupsLoaded(t, c)
	d, err := c.DescribeGroup("g")
	if err != nil || d.State != Stable || len(d.Members) != 2 {
		t.Fatalf("after the failover: %+v %v", d, err)
	}
	in := TopicPartition{Topic: "t"}
	for _, m := range []*mem{a, b} {
		epoch, owned := m.epoch, m.owned.Clone()
		resp := hb(m)
		if resp.MemberEpoch != epoch || !m.owned.Equal(owned) {
			t.Fatalf("%s after the failover: %+v, want epoch %d with %s", m.id, resp, epoch, owned)
		}
		for tp, ps := range m.owned {
			in = TopicPartition{Topic: tp, Partition: ps[0]}
		}
		res, err := c.CommitOffsets(ctx, "g", m.id, "", m.epoch, []OffsetCommitEntry{{TP: in, Offset: Offset{Offset: 5}}})
		if err != nil || res[in] != nil {
			t.Fatalf("commit of %s at epoch %d after the failover: %v %v", m.id, m.epoch, res, err)
		}
	}
	// b leaves: a gets both partitions.
	aEpoch, aOwned := a.epoch, a.owned.Clone()
	if _, err := c.Heartbeat(ctx, "g", HeartbeatRequest{MemberID: b.id, MemberEpoch: LeaveEpoch}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		hb(a)
	}
	if a.owned.Len() != 2 || a.epoch <= aEpoch {
		t.Fatalf("a after b left: %+v", a)
	}
	// KIP-1251: a commit of both at a's epoch from before b left commits
	// the partition a held since then; b's former one is stale.
	var kept, given TopicPartition
	for tp, ps := range a.owned {
		for _, p := range ps {
			if aOwned.Contains(tp, p) {
				kept = TopicPartition{Topic: tp, Partition: p}
			} else {
				given = TopicPartition{Topic: tp, Partition: p}
			}
		}
	}
	res, err := c.CommitOffsets(ctx, "g", a.id, "", aEpoch, []OffsetCommitEntry{{TP: kept, Offset: Offset{Offset: 7}}, {TP: given, Offset: Offset{Offset: 7}}})
	if err != nil || res[kept] != nil || errs.Code(res[given]) != sluicev1.ErrorCode_STALE_MEMBER_EPOCH {
		t.Fatalf("a commits %v and %v at epoch %d (now %d): %v %v", kept, given, aEpoch, a.epoch, res, err)
	}
	fetched, err := c.FetchOffsets("g", "", -1, []TopicPartition{kept, given}, false)
	if err != nil || fetched[0].Offset.Offset != 7 || fetched[1].Offset.Offset == 7 {
		t.Fatalf("offsets after the partly stale commit: %+v %v", fetched, err)
	}
	// The leave is in the log too: after another failover b is unknown
	// and a goes on with both partitions.
	l.mu.Lock()
	l.epochs[0] = 3
	l.mu.Unlock()
	c.Resigned(offsetsTP0, 2)
	c.BecameLeader(offsetsTP0, 3)
	waitGroupsLoaded(t, c)
	if _, err := c.Heartbeat(ctx, "g", HeartbeatRequest{MemberID: b.id, MemberEpoch: b.epoch}); errs.Code(err) != sluicev1.ErrorCode_UNKNOWN_MEMBER_ID {
		t.Fatalf("b after it left and a failover: %v", err)
	}
	epoch := a.epoch
	if resp := hb(a); resp.MemberEpoch != epoch || a.owned.Len() != 2 {
		t.Fatalf("a after the second failover: %+v", resp)
	}
}
