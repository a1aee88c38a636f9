package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// sessionRig is node 2 leading m-0..m-3, each replicated to node 3, with
// node 3 fetching in a session.
type sessionRig struct {
	t           *testing.T
	m           *ReplicaManager
	im          *controller.Image
	brokerEpoch int64 // node 3's
	now         time.Time
	id, epoch   int32
}

func newSessionRig(t *testing.T) *sessionRig {
	now := time.Unix(5000, 0)
	m := newManager(t, t.TempDir(), 2)
	im := newImage(t, "c1").apply(createTopic("m", "id-m", []int32{2, 3}, []int32{2, 3}, []int32{2, 3}, []int32{2, 3})).snapshot()
	cache := NewMetadataCache()
	if err := cache.Update(im.Offset, im, nil); err != nil {
		t.Fatal(err)
	}
	m.repl.Store(&ReplicationConfig{Metadata: cache, LagTimeMax: DefaultReplicaLagTimeMax})
	applyImage(t, m, im, now)
	return &sessionRig{t: t, m: m, im: im, brokerEpoch: im.Brokers[3].Epoch, now: now}
}

func mp(partition int32, offset int64) FetchPartition {
	return FetchPartition{TopicPartition: TopicPartition{Topic: "m", Partition: partition}, FetchOffset: offset, PartitionMaxBytes: 1 << 20}
}

// fetch runs one fetch of node 3 in the rig's session (a full one while
// it has none) and returns the answer, or fails the test.
func (r *sessionRig) fetch(wait time.Duration, forgotten []TopicPartition, parts ...FetchPartition) SessionFetchResult {
	r.t.Helper()
	res, err := r.try(wait, forgotten, parts...)
	if err != nil {
		r.t.Fatal(err)
	}
	return res
}

func (r *sessionRig) try(wait time.Duration, forgotten []TopicPartition, parts ...FetchPartition) (SessionFetchResult, error) {
	p := FetchParams{ReplicaID: 3, BrokerEpoch: r.brokerEpoch, Isolation: FetchLogEnd, MinBytes: 1, MaxWait: wait, MaxBytes: 1 << 20, Partitions: parts}
	sr := FetchSessionRequest{ID: r.id, Epoch: r.epoch, Forgotten: forgotten}
	res, err := r.m.FetchInSession(context.Background(), p, sr)
	if err == nil {
		if r.epoch == FetchSessionInitial {
			r.id = res.SessionID
		}
		r.epoch++
	}
	return res, err
}

// answered lists the partitions of res as "partition:batches:hw" (or
// "partition:CODE").
func answered(res SessionFetchResult) []string {
	var out []string
	for _, p := range res.Partitions {
		if p.Err != nil {
			out = append(out, fmt.Sprintf("%d:%v", p.Partition, errs.Code(p.Err)))
			continue
		}
		out = append(out, fmt.Sprintf("%d:%d:%d", p.Partition, len(p.Batches), p.HighWatermark))
	}
	slices.Sort(out)
	return out
}

// waitServing waits until a fetch is being served in the rig's session
// (started in another goroutine), so that what the test does next
// happens while it waits rather than before it began.
func (r *sessionRig) waitServing() {
	r.t.Helper()
	wait.Until(r.t, 5*time.Second, "a fetch served in the session", func() bool {
		r.m.sessions.mu.Lock()
		s := r.m.sessions.byID[r.id]
		r.m.sessions.mu.Unlock()
		if s == nil {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.busy
	})
}

func (r *sessionRig) append(partition int32) {
	r.t.Helper()
	if _, err := r.m.Append("m", partition, plainBatch(1), r.now); err != nil {
		r.t.Fatal(err)
	}
}

// An idle session costs nothing to poll: the follower lists no partition
// and the leader answers none. An append to one partition wakes the poll
// and is the only partition answered; the follower then lists only that
// partition, and the high watermark its fetch moved is told once.
func TestFetchSessionAnswersOnlyNews(t *testing.T) {
	r := newSessionRig(t)
	full := r.fetch(0, nil, mp(0, 0), mp(1, 0), mp(2, 0), mp(3, 0))
	if !full.Full || full.SessionID == 0 || len(full.Partitions) != 4 {
		t.Fatalf("full fetch: %+v", full)
	}
	for i, p := range full.Partitions {
		if p.Partition != int32(i) || p.Err != nil {
			t.Fatalf("full fetch answers in request order: %d is %+v", i, p)
		}
	}
	if got := answered(r.fetch(20*time.Millisecond, nil)); len(got) != 0 {
		t.Fatalf("idle incremental fetch answered %v", got)
	}

	done := make(chan SessionFetchResult, 1)
	go func() {
		res, _ := r.try(10*time.Second, nil)
		done <- res
	}()
	r.waitServing()
	r.append(2)
	select {
	case res := <-done:
		if got := answered(res); !slices.Equal(got, []string{"2:1:0"}) {
			t.Fatalf("woken fetch answered %v, want the appended partition alone", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an append did not wake the session's fetch")
	}
	// The follower has it: it lists m-2 at 1, which moves the HW.
	if got := answered(r.fetch(20*time.Millisecond, nil, mp(2, 1))); !slices.Equal(got, []string{"2:0:1"}) {
		t.Fatalf("after the follower's fetch at 1: %v, want the new high watermark", got)
	}
	if got := answered(r.fetch(20*time.Millisecond, nil)); len(got) != 0 {
		t.Fatalf("the high watermark was told again: %v", got)
	}
	if n := r.m.FetchSessions(); n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
}

// A forgotten partition is no longer answered; a session out of step is
// refused with the errors that make the follower start over; a full fetch
// replaces the follower's session.
func TestFetchSessionForgetsAndRefuses(t *testing.T) {
	r := newSessionRig(t)
	r.fetch(0, nil, mp(0, 0), mp(1, 0))
	r.fetch(0, []TopicPartition{{Topic: "m", Partition: 1}})
	r.append(1)
	if got := answered(r.fetch(50*time.Millisecond, nil)); len(got) != 0 {
		t.Fatalf("forgotten partition answered: %v", got)
	}
	r.append(0)
	if got := answered(r.fetch(time.Second, nil)); !slices.Equal(got, []string{"0:1:0"}) {
		t.Fatalf("answered %v, want m-0's append", got)
	}

	r.epoch += 5
	_, err := r.try(0, nil)
	wantCode(t, "wrong epoch", err, sluicev1.ErrorCode_INVALID_FETCH_SESSION_EPOCH)
	r.id++
	_, err = r.try(0, nil)
	wantCode(t, "unknown session", err, sluicev1.ErrorCode_FETCH_SESSION_ID_NOT_FOUND)
	r.id--
	r.brokerEpoch--
	_, err = r.try(0, nil)
	wantCode(t, "stale broker epoch", err, sluicev1.ErrorCode_STALE_BROKER_EPOCH)
	r.brokerEpoch++

	old := r.id
	r.id, r.epoch = 0, FetchSessionInitial
	if res := r.fetch(0, nil, mp(0, 1)); res.SessionID == old || len(res.Partitions) != 1 {
		t.Fatalf("new full fetch: %+v", res)
	}
	r.id, r.epoch = old, 3
	_, err = r.try(0, nil)
	wantCode(t, "replaced session", err, sluicev1.ErrorCode_FETCH_SESSION_ID_NOT_FOUND)
	if n := r.m.FetchSessions(); n != 1 {
		t.Fatalf("%d sessions after the follower's new one, want 1", n)
	}
}

// A leadership change reaches a session's partition that the follower
// does not list: its fetch is answered with the error at once.
func TestFetchSessionAnswersLeadershipChange(t *testing.T) {
	r := newSessionRig(t)
	r.fetch(0, nil, mp(0, 0), mp(1, 0), mp(2, 0), mp(3, 0))
	done := make(chan SessionFetchResult, 1)
	go func() {
		res, _ := r.try(10*time.Second, nil)
		done <- res
	}()
	r.waitServing()
	ps := r.im.Topics["m"].Partitions[3]
	ed := controller.EditImage(r.im)
	if _, err := ed.Apply(controller.PartitionChange{Topic: "m", Partition: 3, PartitionEpoch: ps.PartitionEpoch, LeaderEpoch: ps.LeaderEpoch,
		Leader: 3, ISR: []int32{2, 3}}, r.im.Offset+1); err != nil {
		t.Fatal(err)
	}
	applyImage(t, r.m, ed.Image(), r.now)
	select {
	case res := <-done:
		if got := answered(res); !slices.Equal(got, []string{"3:NOT_LEADER_OR_FOLLOWER"}) {
			t.Fatalf("answered %v, want m-3's leadership change", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a leadership change did not end the session's fetch")
	}
}

// The follower's side lists a partition only when the session does not
// hold it as it is, and forgets those it no longer wants.
func TestSessionClientListsChangesOnly(t *testing.T) {
	r := newSessionRig(t)
	var states []*fetchState
	for i := range int32(4) {
		p, err := r.m.Replica("m", i)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, &fetchState{p: p})
	}
	listedOf := func(req *internalv1.ReplicaFetchRequest) (listed, forgotten []string) {
		for _, p := range req.Partitions {
			listed = append(listed, fmt.Sprintf("%d@%d", p.Partition, p.FetchOffset))
		}
		for _, p := range req.Forgotten {
			forgotten = append(forgotten, fmt.Sprint(p.Partition))
		}
		return listed, forgotten
	}
	// every is a round that walks every partition, as a full fetch and a
	// rescan do.
	every := func(ss []*fetchState) fetchRound { return fetchRound{fetch: ss, all: true} }
	var c sessionClient
	req := &internalv1.ReplicaFetchRequest{}
	if got := c.build(req, every(states)); len(got) != 4 || req.SessionEpoch != FetchSessionInitial || req.SessionId != 0 {
		t.Fatalf("first fetch is full: %d listed, session %d epoch %d", len(got), req.SessionId, req.SessionEpoch)
	}
	c.answered(req, &internalv1.ReplicaFetchResponse{SessionId: 7})

	req = &internalv1.ReplicaFetchRequest{}
	c.build(req, every(states))
	if l, f := listedOf(req); len(l)+len(f) != 0 || req.SessionId != 7 || req.SessionEpoch != 1 {
		t.Fatalf("nothing changed: listed %v forgotten %v, session %d epoch %d", l, f, req.SessionId, req.SessionEpoch)
	}
	c.answered(req, &internalv1.ReplicaFetchResponse{})

	r.append(1) // the "follower's" log end moves
	states[2] = &fetchState{p: states[2].p, leaderEpoch: 1}
	req = &internalv1.ReplicaFetchRequest{}
	c.build(req, every(states[:3]))
	if l, f := listedOf(req); !slices.Equal(l, []string{"1@1", "2@0"}) || !slices.Equal(f, []string{"3"}) || req.SessionEpoch != 2 {
		t.Fatalf("listed %v forgotten %v epoch %d, want m-1 (moved), m-2 (new state) and m-3 forgotten at epoch 2", l, f, req.SessionEpoch)
	}
	if s := c.stateOf("m", 2); s != states[2] {
		t.Fatal("an answer for m-2 is not taken for its new state")
	}
	// Cancelled before its answer (a partition was added): the next fetch
	// has the same epoch and lists and forgets the same again.
	c.undo()
	req = &internalv1.ReplicaFetchRequest{}
	c.build(req, every(states[:3]))
	if l, f := listedOf(req); !slices.Equal(l, []string{"1@1", "2@0"}) || !slices.Equal(f, []string{"3"}) || req.SessionEpoch != 2 {
		t.Fatalf("after undo: listed %v forgotten %v epoch %d, want the same fetch again", l, f, req.SessionEpoch)
	}
	c.answered(req, &internalv1.ReplicaFetchResponse{})
	req = &internalv1.ReplicaFetchRequest{}
	c.build(req, every(states[:3]))
	if l, f := listedOf(req); len(l)+len(f) != 0 || req.SessionEpoch != 3 {
		t.Fatalf("then: listed %v forgotten %v epoch %d, want nothing at epoch 3", l, f, req.SessionEpoch)
	}

	// A partition whose answer was an error is no longer held: the leader
	// forgets a listed one that fails. Backed off (not wanted), it is
	// forgotten; wanted again, it is listed even at the same offset.
	c.drop(TopicPartition{Topic: "m", Partition: 0})
	req = &internalv1.ReplicaFetchRequest{}
	c.build(req, every(states[1:3]))
	if l, f := listedOf(req); len(l) != 0 || !slices.Equal(f, []string{"0"}) {
		t.Fatalf("after a drop, backed off: listed %v forgotten %v, want m-0 forgotten", l, f)
	}
	c.answered(req, &internalv1.ReplicaFetchResponse{})
	req = &internalv1.ReplicaFetchRequest{}
	c.build(req, every(states[:3]))
	if l, f := listedOf(req); !slices.Equal(l, []string{"0@0"}) || len(f) != 0 {
		t.Fatalf("wanted again: listed %v forgotten %v, want m-0 listed at its unchanged offset", l, f)
	}
	c.answered(req, &internalv1.ReplicaFetchResponse{})

	c.reset()
	req = &internalv1.ReplicaFetchRequest{}
	if got := c.build(req, every(states)); len(got) != 4 || req.SessionEpoch != FetchSessionInitial {
		t.Fatal("after a reset the next fetch is not a full one")
	}
}

// A fetch the follower cancels while it waits did not happen: its epoch
// is the next again, and the follower's same fetch is served.
func TestFetchSessionCancelledFetchKeepsItsEpoch(t *testing.T) {
	r := newSessionRig(t)
	r.fetch(0, nil, mp(0, 0), mp(1, 0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		p := FetchParams{ReplicaID: 3, BrokerEpoch: r.brokerEpoch, Isolation: FetchLogEnd, MinBytes: 1, MaxWait: 10 * time.Second, MaxBytes: 1 << 20,
			Partitions: []FetchPartition{mp(1, 0)}}
		_, err := r.m.FetchInSession(ctx, p, FetchSessionRequest{ID: r.id, Epoch: r.epoch, Forgotten: []TopicPartition{{Topic: "m", Partition: 0}}})
		done <- err
	}()
	r.waitServing()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled fetch answered")
	}
	// The same fetch again, at the same epoch.
	if _, err := r.try(0, []TopicPartition{{Topic: "m", Partition: 0}}, mp(1, 0)); err != nil {
		t.Fatalf("the cancelled fetch's epoch again: %v", err)
	}
	r.append(0)
	if got := answered(r.fetch(50*time.Millisecond, nil)); len(got) != 0 {
		t.Fatalf("a forgotten partition answered: %v", got)
	}
}

// An incremental fetch examines only the partitions marked changed (so
// an idle fetcher costs nothing per partition), and each kind of change
// is marked: an answer, an add or remove, a truncate flag, a back-off
// passing, a fetch taken back; a rescan walks every partition.
func TestFetcherIncrementalRoundsExamineChangesOnly(t *testing.T) {
	r := newSessionRig(t)
	f := newFetcher(&fetcherManager{rm: r.m, log: r.m.log}, fetcherKey{source: 2})
	tp := func(i int32) TopicPartition { return TopicPartition{Topic: "m", Partition: i} }
	states := map[int32]*fetchState{}
	for i := range int32(4) {
		p, err := r.m.Replica("m", i)
		if err != nil {
			t.Fatal(err)
		}
		states[i] = &fetchState{p: p}
		f.add(states[i])
	}
	now := time.Now()
	// round builds the next fetch at now and returns what it lists and
	// forgets, as "partition@offset" and "partition", and truncates.
	round := func(wantAll bool) (listed, forgotten, truncate []string) {
		t.Helper()
		rd := f.snapshot(now)
		if rd.all != wantAll {
			t.Fatalf("round walks every partition: %v, want %v", rd.all, wantAll)
		}
		for _, s := range rd.truncate {
			truncate = append(truncate, fmt.Sprint(s.p.Partition))
		}
		req := &internalv1.ReplicaFetchRequest{}
		f.noteRescan(rd, f.session.build(req, rd))
		for _, p := range req.Partitions {
			listed = append(listed, fmt.Sprintf("%d@%d", p.Partition, p.FetchOffset))
		}
		for _, p := range req.Forgotten {
			forgotten = append(forgotten, fmt.Sprint(p.Partition))
		}
		slices.Sort(listed)
		slices.Sort(forgotten)
		f.session.answered(req, &internalv1.ReplicaFetchResponse{SessionId: 9})
		return listed, forgotten, truncate
	}
	expect := func(what string, wantAll bool, listed, forgotten []string) {
		t.Helper()
		l, fg, _ := round(wantAll)
		if !slices.Equal(l, listed) || !slices.Equal(fg, forgotten) {
			t.Fatalf("%s: listed %v forgotten %v, want %v and %v", what, l, fg, listed, forgotten)
		}
	}
	expect("full fetch", true, []string{"0@0", "1@0", "2@0", "3@0"}, nil)
	f.rescanAt = now.Add(time.Hour)
	expect("nothing changed", false, nil, nil)

	r.append(1) // the "follower's" log end moves, unmarked
	expect("an unmarked change is not looked at", false, nil, nil)
	f.markChanged([]TopicPartition{tp(1)}) // as an answer for it does
	expect("answered", false, []string{"1@1"}, nil)

	f.remove(tp(3))
	expect("removed", false, nil, []string{"3"})
	f.add(states[3])
	expect("added again", false, []string{"3@0"}, nil)

	f.retry(states[0], now.Add(time.Minute))
	f.markChanged([]TopicPartition{tp(0)})
	expect("backed off", false, nil, []string{"0"})
	now = now.Add(2 * time.Minute)
	expect("back-off passed", false, []string{"0@0"}, nil)

	f.setTruncate(states[2], true)
	if _, fg, tr := round(false); !slices.Equal(fg, []string{"2"}) || !slices.Equal(tr, []string{"2"}) {
		t.Fatalf("truncating: forgotten %v truncate %v, want m-2 both", fg, tr)
	}
	f.setTruncate(states[2], false)
	expect("truncated", false, []string{"2@0"}, nil)

	// A fetch taken back (cancelled for an add) is listed again.
	f.markChanged([]TopicPartition{tp(1)})
	r.append(1)
	expect("moved again", false, []string{"1@2"}, nil)
	f.session.epoch-- // the answer did not come: undo
	f.session.undo()
	expect("after undo", false, []string{"1@2"}, nil)
	// A partition dropped by the session (its answer failed) is listed
	// again when wanted.
	f.session.drop(tp(0))
	expect("dropped", false, []string{"0@0"}, nil)

	// A rescan compares every partition: an unmarked change is listed,
	// and counted; a marked one is listed and not counted.
	r.append(3)
	expect("unmarked", false, nil, nil)
	r.append(1)
	f.markChanged([]TopicPartition{tp(1)})
	f.rescanAt = now
	if n := r.m.FetchRescanFound(); n != 0 {
		t.Fatalf("%d changes counted as missed before the rescan", n)
	}
	expect("rescan", true, []string{"1@3", "3@1"}, nil)
	if !f.rescanAt.After(now) {
		t.Fatal("a rescan does not schedule the next one")
	}
	if n := r.m.FetchRescanFound(); n != 1 {
		t.Fatalf("the rescan counted %d changes with no mark, want 1 (m-3)", n)
	}
}
