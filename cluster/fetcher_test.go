package cluster

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/cluster/controller"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fakeLeader serves sluice.internal.v1.Replica from the logs of a real
// ReplicaManager that leads every partition (no replication of its own).
// With no stream it does not serve ReplicaFetchStream (UNIMPLEMENTED), as
// a broker of an older version. A fetch that finds nothing new is held
// for hold, far past the follower's 500 ms wait, so a test can tell
// whether the follower cancelled it.
type fakeLeader struct {
	internalv1.UnimplementedReplicaServer
	m    *ReplicaManager
	hold time.Duration

	unary, streams, streamMsgs atomic.Int32
	// holding gets a value each time the leader starts holding a fetch.
	holding chan struct{}
	// honorWait: hold a fetch with nothing new for its MaxWaitMs, if
	// shorter than hold, as a real leader does.
	honorWait bool

	mu sync.Mutex // guards the following
	// refuse is topics whose partitions the next fetch answers
	// NOT_LEADER_OR_FOLLOWER, once each.
	refuse map[string]bool
	// refused is set at the first refusal; waits are the MaxWaitMs of
	// the fetches after it.
	refused bool
	waits   []int32
	// stalled is topics whose fetches are held for hold even with data
	// (a fetch carrying megabytes of a busy topic); woken ends the held
	// fetches that are not (appended); fetches is what each fetch listed.
	stalled map[string]bool
	woken   chan struct{}
	fetches []seenFetch
}

// seenFetch is one fetch as the leader saw it.
type seenFetch struct {
	sessionEpoch int32
	topics       []string
}

// stall makes every fetch listing topic be held for the leader's hold.
func (l *fakeLeader) stall(topic string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stalled == nil {
		l.stalled = map[string]bool{}
	}
	l.stalled[topic] = true
}

// appended ends the held fetches that no stalled topic holds, as a real
// leader's long poll ends when a partition gets data.
func (l *fakeLeader) appended() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.woken != nil {
		close(l.woken)
		l.woken = nil
	}
}

// seen returns the fetches the leader has seen.
func (l *fakeLeader) seen() []seenFetch {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.fetches)
}

// refuseOnce makes the next fetch of topic's partitions answer
// NOT_LEADER_OR_FOLLOWER (a leader that has not learnt the partition yet).
func (l *fakeLeader) refuseOnce(topic string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refuse == nil {
		l.refuse = map[string]bool{}
	}
	l.refuse[topic] = true
}

// waitsAfterRefusal returns the MaxWaitMs of the fetches after the first
// refusal.
func (l *fakeLeader) waitsAfterRefusal() []int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.waits)
}

func (l *fakeLeader) OffsetForLeaderEpoch(_ context.Context, req *internalv1.OffsetForLeaderEpochRequest) (*internalv1.OffsetForLeaderEpochResponse, error) {
	resp := &internalv1.OffsetForLeaderEpochResponse{}
	for _, q := range req.Partitions {
		p, err := l.m.Replica(q.Topic, q.Partition)
		if err != nil {
			return nil, err
		}
		resp.Partitions = append(resp.Partitions, &internalv1.EpochResult{Topic: q.Topic, Partition: q.Partition,
			LeaderEpoch: p.LeaderEpoch(), EndOffset: p.log.EndOffset(), LogStartOffset: p.log.StartOffset()})
	}
	return resp, nil
}

func (l *fakeLeader) ReplicaFetch(ctx context.Context, req *internalv1.ReplicaFetchRequest) (*internalv1.ReplicaFetchResponse, error) {
	l.unary.Add(1)
	return l.fetch(ctx, req)
}

func (l *fakeLeader) fetch(ctx context.Context, req *internalv1.ReplicaFetchRequest) (*internalv1.ReplicaFetchResponse, error) {
	resp := &internalv1.ReplicaFetchResponse{}
	found, stalled := false, false
	seen := seenFetch{sessionEpoch: req.SessionEpoch}
	l.mu.Lock()
	if l.refused {
		l.waits = append(l.waits, req.MaxWaitMs)
	}
	for _, fp := range req.Partitions {
		seen.topics = append(seen.topics, fp.Topic)
		stalled = stalled || l.stalled[fp.Topic]
	}
	l.fetches = append(l.fetches, seen)
	if l.woken == nil {
		l.woken = make(chan struct{})
	}
	woken := l.woken
	if stalled {
		woken = nil // held whatever is appended
	}
	l.mu.Unlock()
	for _, fp := range req.Partitions {
		l.mu.Lock()
		refuse := l.refuse[fp.Topic]
		if refuse {
			delete(l.refuse, fp.Topic)
			l.refused = true
		}
		l.mu.Unlock()
		if refuse {
			found = true // an error is answered at once
			resp.Partitions = append(resp.Partitions, &internalv1.ReplicaFetchPartitionData{Topic: fp.Topic, Partition: fp.Partition,
				ErrorCode: sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER})
			continue
		}
		p, err := l.m.Replica(fp.Topic, fp.Partition)
		if err != nil {
			return nil, err
		}
		res, err := p.log.Read(fp.FetchOffset, 1<<20, p.log.EndOffset())
		if err != nil {
			return nil, err
		}
		found = found || len(res.Batches) > 0
		resp.Partitions = append(resp.Partitions, &internalv1.ReplicaFetchPartitionData{Topic: fp.Topic, Partition: fp.Partition,
			HighWatermark: p.log.EndOffset(), LogStartOffset: p.log.StartOffset(), LogEndOffset: p.log.EndOffset(), Batches: res.Batches})
	}
	if !found || stalled {
		select {
		case l.holding <- struct{}{}:
		default:
		}
		hold := l.hold
		if l.honorWait {
			hold = min(hold, time.Duration(req.MaxWaitMs)*time.Millisecond)
		}
		t := time.NewTimer(hold)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		case <-woken:
			if !found {
				return l.fetch(ctx, req) // read again: the new data
			}
		}
	}
	return resp, nil
}

// streamingLeader is a fakeLeader that serves ReplicaFetchStream.
type streamingLeader struct{ *fakeLeader }

func (l streamingLeader) ReplicaFetchStream(st grpc.BidiStreamingServer[internalv1.ReplicaFetchRequest, internalv1.ReplicaFetchResponse]) error {
	l.streams.Add(1)
	for {
		req, err := st.Recv()
		if err != nil {
			return err
		}
		l.streamMsgs.Add(1)
		resp, err := l.fetch(st.Context(), req)
		if err != nil {
			return err
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

// fetchRig is a follower (node 2) of partitions led by a fake leader
// (node 1) on loopback.
type fetchRig struct {
	t        *testing.T
	img      *imageBuilder
	leader   *ReplicaManager
	follower *ReplicaManager
	cache    *MetadataCache
	fake     *fakeLeader
}

func newFetchRig(t *testing.T, stream bool, hold time.Duration) *fetchRig {
	t.Helper()
	r := &fetchRig{t: t, leader: newManager(t, t.TempDir(), 1), follower: newManager(t, t.TempDir(), 2), cache: NewMetadataCache()}
	r.fake = &fakeLeader{m: r.leader, hold: hold, holding: make(chan struct{}, 1)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	if stream {
		internalv1.RegisterReplicaServer(srv, streamingLeader{r.fake})
	} else {
		internalv1.RegisterReplicaServer(srv, r.fake)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); wg.Wait() })

	r.img = &imageBuilder{t: t, im: controller.NewImage()}
	r.img.apply(controller.BootstrapCluster{ClusterID: "c1"})
	for id, addr := range map[int32]string{1: lis.Addr().String(), 2: "127.0.0.1:1"} {
		r.img.apply(controller.RegisterBroker{BrokerID: id, Address: addr, IncarnationID: "i"})
		r.img.apply(controller.UnfenceBroker{BrokerID: id, BrokerEpoch: int64(r.img.off)})
	}
	pool := NewConnPool()
	t.Cleanup(func() { pool.Close() })
	r.follower.StartReplication(ReplicationConfig{Metadata: r.cache, Pool: pool})
	return r
}

// create adds a topic of one partition, replicas 1 and 2 (leader 1),
// with n batches of 2 records already in the leader's log, and lets both
// nodes apply the image.
func (r *fetchRig) create(name string, n int) *Replica {
	r.t.Helper()
	r.img.apply(createTopic(name, "id-"+name, []int32{1, 2}))
	now := time.Now()
	if err := r.leader.Apply(r.img.snapshot(), now, true); err != nil {
		r.t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		r.leaderAppend(name)
	}
	if err := r.cache.Update(r.img.off, r.img.snapshot(), nil); err != nil {
		r.t.Fatal(err)
	}
	if err := r.follower.Apply(r.img.snapshot(), now, true); err != nil {
		r.t.Fatal(err)
	}
	p, err := r.follower.Replica(name, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

// leaderAppend appends a batch of 2 records to the leader's name-0 (to
// its log directly: an internal topic refuses a producer's append).
func (r *fetchRig) leaderAppend(name string) {
	r.t.Helper()
	p, err := r.leader.Replica(name, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := p.log.Append(plainBatch(2), p.LeaderEpoch(), time.Now()); err != nil {
		r.t.Fatal(err)
	}
}

// caughtUp waits (bounded by within) until the follower's copy of name-0
// ends where the leader's does.
func (r *fetchRig) caughtUp(name string, within time.Duration) {
	r.t.Helper()
	lp, _ := r.leader.Replica(name, 0)
	fp, _ := r.follower.Replica(name, 0)
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		changed := fp.log.Changed() // before the check: no append is missed
		if fp.log.EndOffset() == lp.log.EndOffset() {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			r.t.Fatalf("%s: follower at %d, leader at %d after %v", name, fp.log.EndOffset(), lp.log.EndOffset(), within)
		}
	}
}

// A follower fetches on one long-lived ReplicaFetchStream; a partition it
// starts following while a fetch is held by the leader is fetched at once
// (the held fetch is cancelled and the stream reopened), not after the
// leader lets the held fetch go.
func TestFetcherUsesOneStreamAndCancelsOnAdd(t *testing.T) {
	r := newFetchRig(t, true, time.Minute)
	r.create("a", 3)
	r.caughtUp("a", 5*time.Second)
	if r.fake.unary.Load() != 0 || r.fake.streams.Load() != 1 {
		t.Fatalf("unary fetches %d, streams %d; want 0 and 1", r.fake.unary.Load(), r.fake.streams.Load())
	}
	// More data for a: fetched on the same stream.
	lp, _ := r.leader.Replica("a", 0)
	before := r.fake.streamMsgs.Load()
	if _, err := r.leader.Append("a", 0, plainBatch(2), time.Now()); err != nil {
		t.Fatal(err)
	}
	// The leader holds the fetch in flight for a minute: the follower only
	// sees the new batch through the next one, so wake it with a new
	// partition (this is the cancel-on-add path).
	select {
	case <-r.fake.holding:
	case <-time.After(5 * time.Second):
		t.Fatal("no fetch held by the leader within 5s")
	}
	r.create("b", 2)
	r.caughtUp("b", 5*time.Second)
	r.caughtUp("a", 5*time.Second)
	if lp.log.EndOffset() != 8 {
		t.Fatalf("leader a at %d, want 8", lp.log.EndOffset())
	}
	if got := r.fake.streams.Load(); got != 2 {
		t.Fatalf("streams opened %d, want 2 (one more after the cancel)", got)
	}
	if r.fake.streamMsgs.Load() <= before || r.fake.unary.Load() != 0 {
		t.Fatalf("stream messages %d (before %d), unary %d", r.fake.streamMsgs.Load(), before, r.fake.unary.Load())
	}
}

// A partition its leader refuses for a moment (a new topic's follower
// asking before the leader learnt the partition) is backed off for
// fetchBackoff; the poll sent meanwhile asks the leader to hold it no
// longer than the back-off, so the partition is fetched again when its
// back-off ends, not when an idle poll times out (replicaFetchWait: the
// first acks=all produce to a new topic waited half a second).
func TestFetcherPollEndsWhenABackOffDoes(t *testing.T) {
	r := newFetchRig(t, true, time.Minute)
	r.fake.honorWait = true
	r.create("a", 1)
	r.caughtUp("a", 5*time.Second)
	r.fake.refuseOnce("b")
	r.create("b", 2)
	r.caughtUp("b", 5*time.Second)
	waits := r.fake.waitsAfterRefusal()
	if len(waits) == 0 {
		t.Fatal("no fetch after the refusal")
	}
	if limit := int32(fetchBackoff / time.Millisecond); waits[0] < 1 || waits[0] > limit {
		t.Fatalf("the poll after the refusal asked to be held %d ms, want 1..%d (the back-off), not %v (fetches after it: %v)",
			waits[0], limit, replicaFetchWait, waits)
	}
}

// A leader that does not serve the stream (an older version) is fetched
// from with unary ReplicaFetch calls.
func TestFetcherFallsBackToUnary(t *testing.T) {
	r := newFetchRig(t, false, 20*time.Millisecond)
	r.create("a", 3)
	r.caughtUp("a", 5*time.Second)
	if _, err := r.leader.Append("a", 0, plainBatch(2), time.Now()); err != nil {
		t.Fatal(err)
	}
	r.caughtUp("a", 5*time.Second)
	if r.fake.unary.Load() < 2 {
		t.Fatalf("unary fetches %d, want >= 2", r.fake.unary.Load())
	}
}

// Decision 41: a follower fetches from the leader's internal listener,
// not from its client address (nothing listens there in this rig). The
// other tests register the leader without an internal address, as a
// registration logged before decision 41 did, and so fetch from its one
// address: the fallback.
func TestFetcherDialsTheLeadersInternalAddress(t *testing.T) {
	r := newFetchRig(t, true, 20*time.Millisecond)
	served := r.img.im.Brokers[1].Address
	// The same incarnation registering again keeps its epoch and takes
	// the new addresses.
	r.img.apply(controller.RegisterBroker{BrokerID: 1, Address: "127.0.0.1:1", InternalAddress: served, IncarnationID: "i"})
	if got := r.img.im.Brokers[1].InterBrokerAddress(); got != served {
		t.Fatalf("leader dialled at %s, want its internal address %s", got, served)
	}
	r.create("a", 3)
	r.caughtUp("a", 5*time.Second)
}

// Decision 78: a follower fetches the internal topics' partitions in a
// fetch of their own, without a fetch session, and the user topics' in
// its session: a record of __transaction_state is replicated while the
// data fetch is held (as behind megabytes of a busy topic), and neither
// fetch lists the other's partitions.
func TestInternalTopicsAreFetchedInALaneOfTheirOwn(t *testing.T) {
	r := newFetchRig(t, true, time.Minute)
	r.create("a", 1)
	r.caughtUp("a", 5*time.Second)
	r.create("__transaction_state", 1)
	r.caughtUp("__transaction_state", 5*time.Second)
	r.fake.stall("a")
	r.leaderAppend("a")
	r.fake.appended()
	r.leaderAppend("__transaction_state")
	r.fake.appended()
	r.caughtUp("__transaction_state", 5*time.Second)

	var internal, data int
	for _, f := range r.fake.seen() {
		var hasInternal, hasData bool
		for _, topic := range f.topics {
			if IsInternalTopic(topic) {
				hasInternal = true
			} else {
				hasData = true
			}
		}
		switch {
		case hasInternal && hasData:
			t.Fatalf("a fetch listed %v: internal and user topics together", f.topics)
		case hasInternal:
			internal++
			if f.sessionEpoch != FetchSessionNone {
				t.Fatalf("an internal topic's fetch had session epoch %d, want %d (no session)", f.sessionEpoch, FetchSessionNone)
			}
		case hasData:
			data++
			if f.sessionEpoch == FetchSessionNone {
				t.Fatalf("a user topic's fetch had no session")
			}
		}
	}
	if internal == 0 || data == 0 {
		t.Fatalf("fetches listing internal topics %d, user topics %d; want both", internal, data)
	}
}
