package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/codec"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// Replica fetch tuning.
const (
	// replicaFetchWait is how long a leader holds a follower's fetch when
	// there is nothing new (replica.fetch.wait.max.ms).
	replicaFetchWait = 500 * time.Millisecond
	// replicaFetchMaxBytes bounds one fetch response (replica.fetch.response.max.bytes).
	replicaFetchMaxBytes = 16 << 20
	// replicaFetchPartitionBytes bounds one partition in it (replica.fetch.max.bytes).
	replicaFetchPartitionBytes = 4 << 20
	// fetchBackoff is the pause after a failed fetch (replica.fetch.backoff.ms).
	fetchBackoff = 100 * time.Millisecond
	// fetchAnswerGrace is how long past replicaFetchWait a fetch's answer
	// may take before the fetch fails (and its stream is closed).
	fetchAnswerGrace = 5 * time.Second
	// streamRetryAfter is how long a fetcher whose leader does not serve
	// ReplicaFetchStream (an older version) uses ReplicaFetch before it
	// tries the stream again.
	streamRetryAfter = time.Minute
)

// Causes of a replica fetch stream's cancellation.
var (
	errPartitionAdded = errors.New("partition added to the fetcher")
	errFetchTimeout   = errors.New("replica fetch answer overdue")
)

// fetcherManager runs the fetchers of a follower (DESIGN §8): a follower
// partition is fetched by its leader's fetcher of the partition's lane.
// Safe for concurrent use.
type fetcherManager struct {
	rm   *ReplicaManager
	pool *ConnPool
	log  *slog.Logger

	mu       sync.Mutex // guards the following
	fetchers map[fetcherKey]*fetcher
	closed   bool

	// goroutines are the fetchers' run loops.
	goroutines goroutine.Group
}

func newFetcherManager(rm *ReplicaManager, pool *ConnPool, log *slog.Logger) *fetcherManager {
	return &fetcherManager{rm: rm, pool: pool, log: log, fetchers: map[fetcherKey]*fetcher{}}
}

// fetchLane separates a follower's partitions of one leader into fetchers
// of their own (decision 78): the internal topics' records — a
// transaction's state, a group's offsets — are small, and a coordinator
// waits for each one's replication before it answers; in the fetch that
// carries megabytes of a busy topic's data they waited for it.
type fetchLane uint8

const (
	// laneData is the user topics': one fetch session per leader.
	laneData fetchLane = iota
	// laneInternal is the internal topics' (IsInternalTopic): fetched
	// without a session (a fetch session is per follower at a leader, and
	// the data lane's holds it), which costs a little per partition per
	// poll — the internal topics have a bounded number of partitions —
	// and needs nothing new of the leader, so an older one serves it too.
	laneInternal
)

// laneOf is the lane a topic's partitions are fetched in.
func laneOf(topic string) fetchLane {
	if IsInternalTopic(topic) {
		return laneInternal
	}
	return laneData
}

func (l fetchLane) String() string {
	if l == laneInternal {
		return "internal"
	}
	return "data"
}

// fetcherKey names a fetcher: the leader it fetches from and its lane.
type fetcherKey struct {
	source int32
	lane   fetchLane
}

// follow makes p fetched from leader at leaderEpoch, first truncating to
// the divergence point with the leader (KIP-101/279). It replaces any
// earlier assignment of p.
func (fm *fetcherManager) follow(p *Replica, leader, leaderEpoch int32) {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	if fm.closed {
		return
	}
	key := fetcherKey{source: leader, lane: laneOf(p.Topic)}
	for k, f := range fm.fetchers {
		if k != key {
			f.remove(p.TopicPartition)
		}
	}
	f := fm.fetchers[key]
	if f == nil {
		f = newFetcher(fm, key)
		fm.fetchers[key] = f
		fm.goroutines.Go(f.run)
	}
	f.add(&fetchState{p: p, leaderEpoch: leaderEpoch, truncate: true})
}

// unfollow stops fetching p.
func (fm *fetcherManager) unfollow(tp TopicPartition) {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	for _, f := range fm.fetchers {
		f.remove(tp)
	}
}

// close stops every fetcher and waits for them.
func (fm *fetcherManager) close() {
	fm.mu.Lock()
	fm.closed = true
	fs := make([]*fetcher, 0, len(fm.fetchers))
	for _, f := range fm.fetchers {
		fs = append(fs, f)
	}
	fm.fetchers = map[fetcherKey]*fetcher{}
	fm.mu.Unlock()
	for _, f := range fs {
		f.stop()
	}
	fm.goroutines.Wait()
}

// fetchState is one follower partition in a fetcher.
type fetchState struct {
	p           *Replica
	leaderEpoch int32
	// truncate: ask the leader for the divergence point before fetching
	// (guarded by the fetcher's mu).
	truncate bool
	// retryAt delays a partition after a partition-level error (the
	// fetcher's run goroutine alone reads and writes it).
	retryAt time.Time
}

// fetcher pulls every partition it holds from one source broker, in one
// long-polled ReplicaFetch at a time.
type fetcher struct {
	fm     *fetcherManager
	source int32
	lane   fetchLane

	mu    sync.Mutex // guards parts, changed, truncating, cancelPoll, lastCancel, cancelLater and the truncate flags of the states
	parts map[TopicPartition]*fetchState
	// changed is the partitions whose state changed since the fetch
	// session last looked at them (added, removed, truncate flag set or
	// cleared, answered, backed off or back from it): an incremental
	// fetch examines these alone, not every partition (issue 31).
	changed map[TopicPartition]struct{}
	// truncating is the states whose truncate flag is set.
	truncating map[TopicPartition]*fetchState
	wake       chan struct{} // capacity 1: a partition was added
	// cancelPoll cancels the fetch in flight (nil when none): a partition
	// added meanwhile is then fetched soon instead of after the leader's
	// long poll (up to replicaFetchWait) for the others ends.
	cancelPoll func()
	// lastCancel is when an add last cancelled the poll; cancelLater is
	// the pending cancel of adds that came sooner than addCancelEvery
	// after it (one fetch listing every partition per add made creating
	// thousands of partitions quadratic: issue 31).
	lastCancel  time.Time
	cancelLater *time.Timer

	// The open ReplicaFetchStream to the source (nil when none), the
	// connection it runs on and its cancel; used by run's goroutine only.
	stream       grpc.ClientStream
	streamCC     *grpc.ClientConn
	streamCtx    context.Context
	streamCancel context.CancelCauseFunc
	// unaryUntil: the source did not serve the stream; use ReplicaFetch
	// until then.
	unaryUntil time.Time
	// session is the fetch session with the source; retrying is the
	// states backed off from (retryAt ahead), which become changed when
	// it passes; rescanAt is when the next incremental fetch compares
	// every partition with the session, a check for a change not marked
	// (counted in the ReplicaManager's fetchRescanFound). Used by run's
	// goroutine only.
	session  sessionClient
	retrying map[TopicPartition]*fetchState
	rescanAt time.Time

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func newFetcher(fm *fetcherManager, key fetcherKey) *fetcher {
	ctx, cancel := context.WithCancel(context.Background())
	return &fetcher{fm: fm, source: key.source, lane: key.lane, session: sessionClient{none: key.lane == laneInternal},
		parts:   map[TopicPartition]*fetchState{},
		changed: map[TopicPartition]struct{}{}, truncating: map[TopicPartition]*fetchState{},
		retrying: map[TopicPartition]*fetchState{},
		wake:     make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

func (f *fetcher) stop() {
	f.cancel()
	<-f.done
	f.mu.Lock()
	if f.cancelLater != nil {
		f.cancelLater.Stop()
		f.cancelLater = nil
	}
	f.mu.Unlock()
}

func (f *fetcher) add(s *fetchState) {
	f.mu.Lock()
	f.parts[s.p.TopicPartition] = s
	f.changed[s.p.TopicPartition] = struct{}{}
	if s.truncate {
		f.truncating[s.p.TopicPartition] = s
	} else {
		delete(f.truncating, s.p.TopicPartition)
	}
	if f.cancelPoll != nil && f.cancelLater == nil {
		if wait := addCancelEvery - time.Since(f.lastCancel); wait <= 0 {
			f.cancelPoll()
			f.lastCancel = time.Now()
		} else {
			f.cancelLater = time.AfterFunc(wait, f.cancelForAdds)
		}
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// addCancelEvery is the least time between two cancels of the poll in
// flight for added partitions: adds that come faster join one new fetch
// (Kafka's fetcher never cancels: an added partition waits for the poll
// in flight, up to replica.fetch.wait.max.ms).
const addCancelEvery = 100 * time.Millisecond

// cancelForAdds is cancelLater's function: the poll in flight, if any,
// ends so that the partitions added since the last cancel are fetched.
func (f *fetcher) cancelForAdds() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelLater = nil
	if f.cancelPoll != nil {
		f.cancelPoll()
		f.lastCancel = time.Now()
	}
}

func (f *fetcher) remove(tp TopicPartition) {
	f.mu.Lock()
	if f.parts[tp] != nil {
		delete(f.parts, tp)
		delete(f.truncating, tp)
		f.changed[tp] = struct{}{}
	}
	f.mu.Unlock()
}

// setTruncate sets or clears s's truncate flag.
func (f *fetcher) setTruncate(s *fetchState, truncate bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.truncate = truncate
	if f.parts[s.p.TopicPartition] != s {
		return // replaced or removed: its successor's flag stands
	}
	if truncate {
		f.truncating[s.p.TopicPartition] = s
	} else {
		delete(f.truncating, s.p.TopicPartition)
	}
	f.changed[s.p.TopicPartition] = struct{}{}
}

// retry backs s off until at (run's goroutine only).
func (f *fetcher) retry(s *fetchState, at time.Time) {
	s.retryAt = at
	f.retrying[s.p.TopicPartition] = s
}

// markChanged marks tps changed (an answer for them came).
func (f *fetcher) markChanged(tps []TopicPartition) {
	if len(tps) == 0 {
		return
	}
	f.mu.Lock()
	for _, tp := range tps {
		f.changed[tp] = struct{}{}
	}
	f.mu.Unlock()
}

// current returns s if it is still the state of its partition.
func (f *fetcher) current(s *fetchState) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parts[s.p.TopicPartition] == s
}

// sessionRescanEvery is how often an incremental fetch compares every
// partition with what the session holds rather than the changed ones
// alone: a change that was not marked costs at most this much delay
// (and is logged).
const sessionRescanEvery = 30 * time.Second

// fetchRound is what one round of run fetches: the partitions to truncate
// first, the states the fetch wants (all of them when all is set,
// otherwise those changed) and, when not all, the changed partitions it
// does not want (removed, backed off or truncating).
type fetchRound struct {
	truncate, fetch []*fetchState
	gone            []TopicPartition
	all             bool
	// marked is, in a rescan (all, in a session), the partitions marked
	// changed: what it lists beyond them is a change with no mark.
	marked map[TopicPartition]struct{}
	// due is the earliest end of a partition's back-off (zero: none
	// backed off): the fetch's long poll ends by then (pollWait), so the
	// partition is fetched again when its back-off ends rather than when
	// a poll with nothing new times out.
	due time.Time
}

// pollWait is how long the leader may hold the round's fetch with
// nothing new: replicaFetchWait, cut to the end of the earliest back-off
// (at least a millisecond: 0 would be an answer at once, a busy loop).
// Without the cut a partition refused for a moment — a new topic's
// follower asking before its leader learnt the partition — waited out
// the whole poll of an idle fetcher: half a second on the first acks=all
// produce to a new topic.
func (r *fetchRound) pollWait(now time.Time) time.Duration {
	wait := replicaFetchWait
	if !r.due.IsZero() {
		wait = min(wait, max(r.due.Sub(now), time.Millisecond))
	}
	return wait
}

func (r *fetchRound) empty() bool {
	return len(r.truncate) == 0 && len(r.fetch) == 0 && len(r.gone) == 0
}

// snapshot takes the round's partitions at now (run's goroutine only).
// A full fetch (no session), and a rescan every sessionRescanEvery, walk
// every partition; an incremental fetch examines only the changed ones,
// those whose back-off passed and those the session itself must list
// again (so an idle fetcher costs nothing per partition).
func (f *fetcher) snapshot(now time.Time) fetchRound {
	f.mu.Lock()
	defer f.mu.Unlock()
	var r fetchRound
	for tp, s := range f.retrying {
		switch {
		case f.parts[tp] != s:
			delete(f.retrying, tp)
		case !now.Before(s.retryAt):
			delete(f.retrying, tp)
			f.changed[tp] = struct{}{}
		case r.due.IsZero() || s.retryAt.Before(r.due):
			r.due = s.retryAt
		}
	}
	for _, s := range f.truncating {
		if !now.Before(s.retryAt) {
			r.truncate = append(r.truncate, s)
		}
	}
	wanted := func(s *fetchState) bool { return !s.truncate && !now.Before(s.retryAt) }
	r.all = f.session.id == 0 || !now.Before(f.rescanAt)
	if r.all {
		f.rescanAt = now.Add(sessionRescanEvery)
		if f.session.id != 0 {
			r.marked = maps.Clone(f.changed)
			for tp := range f.session.pending {
				r.marked[tp] = struct{}{}
			}
		}
		clear(f.changed)
		clear(f.session.pending)
		for _, s := range f.parts {
			if wanted(s) {
				r.fetch = append(r.fetch, s)
			}
		}
		return r
	}
	for tp := range f.session.pending {
		f.changed[tp] = struct{}{}
	}
	clear(f.session.pending)
	for tp := range f.changed {
		if s := f.parts[tp]; s != nil && wanted(s) {
			r.fetch = append(r.fetch, s)
		} else {
			r.gone = append(r.gone, tp)
		}
	}
	clear(f.changed)
	return r
}

// merge adds a later snapshot's partitions to fetch (the truncation of r
// done): the later one's alone when it walked every partition.
func (r *fetchRound) merge(later fetchRound) {
	if !later.due.IsZero() && (r.due.IsZero() || later.due.Before(r.due)) {
		r.due = later.due
	}
	if later.all {
		r.fetch, r.gone, r.all, r.marked = later.fetch, nil, true, later.marked
		return
	}
	r.fetch = append(r.fetch, later.fetch...)
	r.gone = append(r.gone, later.gone...)
}

func (f *fetcher) client() (*grpc.ClientConn, error) {
	addr := ""
	if b := f.fm.rm.metadata().Image().Brokers[f.source]; b != nil {
		addr = b.InterBrokerAddress() // the leader's internal listener (decision 41)
	}
	if addr == "" {
		return nil, errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "no address for broker %d", f.source)
	}
	return f.fm.pool.Get(addr)
}

func (f *fetcher) run() {
	defer close(f.done)
	defer f.closeStream()
	backoff := fetchBackoff
	for f.ctx.Err() == nil {
		if f.fm.rm.fetchPaused.Load() || !f.busy() {
			select {
			case <-f.ctx.Done():
				return
			case <-f.wake:
			case <-time.After(fetchBackoff):
			}
			continue
		}
		round := f.snapshot(time.Now())
		if round.empty() && len(f.session.sent) == 0 {
			// Nothing wanted now (every partition backed off): wait.
			select {
			case <-f.ctx.Done():
				return
			case <-f.wake:
			case <-time.After(fetchBackoff):
			}
			continue
		}
		cc, err := f.client()
		if err == nil && len(round.truncate) > 0 {
			err = f.truncate(internalv1.NewReplicaClient(cc), round.truncate)
			if err == nil && !f.fm.rm.fetchPaused.Load() {
				// The partitions just truncated join this round's fetch
				// instead of waiting for its long poll to end.
				round.merge(f.snapshot(time.Now()))
			}
		}
		if err == nil && (len(round.fetch) > 0 || len(round.gone) > 0 || len(f.session.sent) > 0) {
			err = f.fetch(cc, round)
		}
		if err != nil {
			// The round's changes were taken from the marks: the next
			// fetch is a full one, which looks at every partition again.
			f.session.reset()
			if f.ctx.Err() != nil {
				return
			}
			f.fm.log.Debug("replica fetch failed", "source", f.source, "lane", f.lane.String(), "err", err)
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(backoff):
			}
			if backoff < time.Second {
				backoff *= 2
			}
			continue
		}
		backoff = fetchBackoff
	}
}

// noteRescan counts and logs what a rescan round lists with no mark of
// a change: a change missed, fetched now but up to sessionRescanEvery
// late.
func (f *fetcher) noteRescan(round fetchRound, listed []*fetchState) {
	if round.marked == nil {
		return // not a rescan
	}
	var unmarked []TopicPartition
	for _, s := range listed {
		if _, ok := round.marked[s.p.TopicPartition]; !ok {
			unmarked = append(unmarked, s.p.TopicPartition)
		}
	}
	if len(unmarked) > 0 {
		f.fm.rm.fetchRescanFound.Add(int64(len(unmarked)))
		f.fm.log.Info("fetch session rescan found partitions changed without a mark", "source", f.source,
			"partitions", len(unmarked), "first", unmarked[0])
	}
}

// busy reports whether the fetcher holds any partition.
func (f *fetcher) busy() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.parts) > 0
}

// truncate asks the leader where each partition's log diverges from its
// own and truncates there (KIP-279).
func (f *fetcher) truncate(cl internalv1.ReplicaClient, states []*fetchState) error {
	req := &internalv1.OffsetForLeaderEpochRequest{ReplicaId: f.fm.rm.cfg.NodeID}
	for _, s := range states {
		req.Partitions = append(req.Partitions, &internalv1.EpochQuery{Topic: s.p.Topic, Partition: s.p.Partition,
			CurrentLeaderEpoch: s.leaderEpoch, LeaderEpoch: s.p.log.LatestEpoch()})
	}
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	resp, err := cl.OffsetForLeaderEpoch(ctx, req)
	if err != nil {
		return err
	}
	for i, r := range resp.Partitions {
		if i >= len(states) {
			break
		}
		s := states[i]
		if !f.current(s) {
			continue
		}
		if r.ErrorCode != sluicev1.ErrorCode_NONE {
			f.fm.log.Debug("offset for leader epoch refused", s.p.LogAttr(), "code", r.ErrorCode, "msg", r.ErrorMessage)
			f.retry(s, time.Now().Add(fetchBackoff))
			continue
		}
		var again bool
		var err error
		if !s.p.lockAsFollower(f.source, s.leaderEpoch) {
			continue // the partition's role changed; its new state is elsewhere
		}
		again, err = f.fm.rm.truncateFollower(s.p, r.LeaderEpoch, r.EndOffset, r.LogStartOffset)
		s.p.roleMu.Unlock()
		if err != nil {
			// An offline replica's failure is logged once (offline.go), a
			// resource error by resourceError, rate-limited.
			if !s.p.Offline() && !storage.IsResourceError(err) {
				f.fm.log.Error("follower truncation failed", s.p.LogAttr(), "err", err)
			}
			f.retry(s, time.Now().Add(time.Second))
			continue
		}
		if !again {
			f.setTruncate(s, false)
		}
	}
	return nil
}

// sessionClient is a fetcher's side of its fetch session with the source
// (fetchsession.go): what the leader holds of each partition.
type sessionClient struct {
	// none: every fetch is a full one without a session
	// (FetchSessionNone: the internal lane's).
	none  bool
	id    int32 // 0: the next fetch is a full one
	epoch int32 // the next incremental fetch's epoch
	round uint64
	sent  map[TopicPartition]*sentPartition
	// listed and forgotten are what the last fetch built listed and
	// forgot (undo sends them again); toForget is forgotten partitions to
	// send again.
	listed, forgotten, toForget []TopicPartition
	// pending is partitions taken out of sent (undo, drop) that the next
	// incremental fetch must examine although nothing marked them
	// changed: the fetcher's snapshot adds them to its changed ones.
	pending map[TopicPartition]struct{}
}

// sentPartition is a partition as the session holds it.
type sentPartition struct {
	s      *fetchState
	offset int64
	round  uint64 // the last fetch that wanted it
}

// reset makes the next fetch a full one (a new session).
func (c *sessionClient) reset() { *c = sessionClient{none: c.none} }

// undo takes back the last fetch, which the follower cancelled before its
// answer (a partition was added): the leader either never saw it or
// undid its epoch (FetchInSession), and the next fetch, at the same
// epoch, lists and forgets again what it did.
func (c *sessionClient) undo() {
	if c.id == 0 {
		return // a full fetch: the next one is full again
	}
	for _, tp := range c.listed {
		delete(c.sent, tp)
		c.repend(tp)
	}
	c.toForget = append(c.toForget, c.forgotten...)
	c.listed, c.forgotten = nil, nil
}

// build fills req for round: in a full fetch every wanted partition; in
// an incremental one those of round.fetch the session does not hold as
// they are (new, another state, another fetch offset), and as forgotten
// the session's partitions round no longer wants (round.gone, or when
// round.all every partition the session holds that round.fetch lacks).
// It returns the states listed, in request order.
func (c *sessionClient) build(req *internalv1.ReplicaFetchRequest, round fetchRound) []*fetchState {
	c.round++
	full := c.id == 0
	if full {
		req.SessionId, req.SessionEpoch = 0, FetchSessionInitial
		if c.none {
			req.SessionEpoch = FetchSessionNone
		}
		c.sent = make(map[TopicPartition]*sentPartition, len(round.fetch))
	} else {
		req.SessionId, req.SessionEpoch = c.id, c.epoch
	}
	listed := round.fetch[:0:0]
	c.listed, c.forgotten = c.listed[:0], c.forgotten[:0]
	for _, s := range round.fetch {
		off := s.p.log.EndOffset()
		e := c.sent[s.p.TopicPartition]
		if e == nil {
			e = &sentPartition{}
			c.sent[s.p.TopicPartition] = e
		}
		if e.round == c.round && e.s == s {
			continue // twice in the round (merged snapshots)
		}
		e.round = c.round
		if !full && e.s == s && e.offset == off {
			continue
		}
		e.s, e.offset = s, off
		listed = append(listed, s)
		c.listed = append(c.listed, s.p.TopicPartition)
		req.Partitions = append(req.Partitions, &internalv1.ReplicaFetchPartition{Topic: s.p.Topic, Partition: s.p.Partition,
			FetchOffset: off, CurrentLeaderEpoch: s.leaderEpoch, PartitionMaxBytes: replicaFetchPartitionBytes})
	}
	if !full {
		forget := func(tp TopicPartition) {
			if e := c.sent[tp]; e != nil && e.round != c.round {
				delete(c.sent, tp)
				c.forgotten = append(c.forgotten, tp)
			}
		}
		if round.all {
			for tp := range c.sent {
				forget(tp)
			}
		} else {
			for _, tp := range round.gone {
				forget(tp)
			}
		}
		// Forgets of a fetch taken back, unless wanted again meanwhile.
		for _, tp := range c.toForget {
			if c.sent[tp] == nil && !slices.Contains(c.forgotten, tp) {
				c.forgotten = append(c.forgotten, tp)
			}
		}
		for _, tp := range c.forgotten {
			req.Forgotten = append(req.Forgotten, &internalv1.ForgottenPartition{Topic: tp.Topic, Partition: tp.Partition})
		}
	}
	c.toForget = c.toForget[:0]
	return listed
}

// answered takes in a successful answer to req: the session's id after a
// full fetch, the next epoch after an incremental one.
func (c *sessionClient) answered(req *internalv1.ReplicaFetchRequest, resp *internalv1.ReplicaFetchResponse) {
	if req.SessionEpoch == FetchSessionNone {
		c.sent = nil // no session: the next fetch is full again
		return
	}
	if req.SessionEpoch == FetchSessionInitial {
		c.id, c.epoch = resp.SessionId, 1
		if c.id == 0 {
			c.sent = nil // the leader opened no session: full fetches
		}
		return
	}
	if c.epoch == math.MaxInt32 {
		c.epoch = 1
	} else {
		c.epoch++
	}
}

// drop takes tp out of what the session holds, as the leader may have
// (it forgets a listed partition that failed) or should (a partition the
// follower backs off from or must truncate): its next fetch lists it
// anew, and forgets it until then.
func (c *sessionClient) drop(tp TopicPartition) {
	if c.id == 0 || c.sent[tp] == nil {
		return
	}
	delete(c.sent, tp)
	c.toForget = append(c.toForget, tp)
	c.repend(tp)
}

// repend makes the next incremental fetch examine tp.
func (c *sessionClient) repend(tp TopicPartition) {
	if c.pending == nil {
		c.pending = map[TopicPartition]struct{}{}
	}
	c.pending[tp] = struct{}{}
}

// stateOf is the fetch state an incremental answer's partition is for
// (nil: not one the session holds).
func (c *sessionClient) stateOf(topic string, partition int32) *fetchState {
	if e := c.sent[TopicPartition{Topic: topic, Partition: partition}]; e != nil {
		return e.s
	}
	return nil
}

// fetch runs one ReplicaFetch, in the fetcher's fetch session, and
// appends what it returns. The response is decoded by codec.Codec in
// place (its batches are slices of the received buffer, appended
// verbatim), and the buffer is released once every batch is in its log.
// Any failure ends the session: the next fetch is a full one.
func (f *fetcher) fetch(cc *grpc.ClientConn, round fetchRound) error {
	rm := f.fm.rm
	req := &internalv1.ReplicaFetchRequest{ReplicaId: rm.cfg.NodeID, BrokerEpoch: rm.brokerEpoch(),
		MaxWaitMs: int32(round.pollWait(time.Now()).Milliseconds()), MinBytes: 1, MaxBytes: replicaFetchMaxBytes}
	listed := f.session.build(req, round)
	f.noteRescan(round, listed)
	resp := &codec.ReplicaFetchResponse{}
	defer resp.Release()
	var err error
	if time.Now().Before(f.unaryUntil) {
		err = f.callUnary(cc, req, resp)
	} else {
		err = f.callStream(cc, req, resp)
		if status.Code(err) == codes.Unimplemented {
			f.fm.log.Info("source broker does not serve the replica fetch stream; fetching with unary calls",
				"source", f.source, "retry_stream_in", streamRetryAfter)
			f.unaryUntil = time.Now().Add(streamRetryAfter)
			err = f.callUnary(cc, req, resp)
		}
	}
	if errors.Is(err, errPartitionAdded) {
		f.session.undo()
		return nil // fetch again at once, with the new partition
	}
	if err != nil {
		f.session.reset()
		return err
	}
	if resp.ErrorCode != sluicev1.ErrorCode_NONE {
		// The session is gone (the leader restarted or dropped it) or out
		// of step: start a new one at once.
		f.fm.log.Debug("replica fetch session refused", "source", f.source, "code", resp.ErrorCode, "msg", resp.ErrorMessage)
		f.session.reset()
		return nil
	}
	full := req.SessionEpoch == FetchSessionInitial || req.SessionEpoch == FetchSessionNone
	f.session.answered(req, &resp.ReplicaFetchResponse)
	now := time.Now()
	// Every partition answered is looked at again by the next fetch (its
	// offset moved, or it failed and is backed off or truncating).
	answered := make([]TopicPartition, 0, len(resp.Partitions))
	defer func() { f.markChanged(answered) }()
	for i, r := range resp.Partitions {
		var s *fetchState
		switch {
		case full && i < len(listed) && listed[i].p.Topic == r.Topic && listed[i].p.Partition == r.Partition:
			s = listed[i]
		case !full:
			s = f.session.stateOf(r.Topic, r.Partition)
		}
		if s == nil || !f.current(s) {
			continue
		}
		answered = append(answered, s.p.TopicPartition)
		if !f.apply(s, r, now) {
			f.session.drop(s.p.TopicPartition)
		}
	}
	return nil
}

// apply takes in one partition's answer: its batches appended, its high
// watermark taken, or its error acted on. It reports whether the answer
// was taken in whole (false: an error, or an append that failed).
func (f *fetcher) apply(s *fetchState, r *internalv1.ReplicaFetchPartitionData, now time.Time) bool {
	rm := f.fm.rm
	switch r.ErrorCode {
	case sluicev1.ErrorCode_NONE:
	case sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE:
		// Behind the leader's log start: start over there. Ahead of its
		// end: the logs diverged; find the divergence point again.
		if s.p.log.EndOffset() < r.LogStartOffset {
			// Under the role lock, as every follower log change: a
			// partition that became leader meanwhile is left alone.
			if s.p.lockAsFollower(f.source, s.leaderEpoch) {
				if err := rm.restartFollowerAt(s.p, r.LogStartOffset); err != nil && !s.p.Offline() {
					f.fm.log.Error("follower reset failed", s.p.LogAttr(), "err", err)
				}
				s.p.roleMu.Unlock()
			}
		} else {
			f.setTruncate(s, true)
		}
		return false
	default:
		// Not the leader (yet or any more), stale epochs: wait for the
		// metadata to move this partition.
		f.retry(s, now.Add(fetchBackoff))
		return false
	}
	// Append under the role lock, so a partition that became leader
	// (or moved to another leader) meanwhile never takes these bytes.
	if !s.p.lockAsFollower(f.source, s.leaderEpoch) {
		return false
	}
	taken := true
	for _, b := range r.Batches {
		if _, err := s.p.log.AppendVerbatim(b, now); err != nil {
			if storage.IsResourceError(err) {
				// Out of file descriptors (a roll): logged by
				// resourceError; fetch again after a pause.
				f.retry(s, now.Add(resourceRetryBackoff))
			} else if !s.p.Offline() { // an offline replica's failure is logged once (offline.go)
				f.fm.log.Warn("follower append failed", s.p.LogAttr(), "err", err)
			}
			f.setTruncate(s, true)
			taken = false
			break
		}
	}
	s.p.log.SetHighWatermark(min(r.HighWatermark, s.p.log.EndOffset()))
	s.p.roleMu.Unlock()
	return taken
}

// setCancelPoll publishes (or, with nil, withdraws) the cancel of the
// fetch in flight for add.
func (f *fetcher) setCancelPoll(cancel func()) {
	f.mu.Lock()
	f.cancelPoll = cancel
	f.mu.Unlock()
}

// callUnary runs one ReplicaFetch call. It returns errPartitionAdded when
// add cancelled it.
func (f *fetcher) callUnary(cc *grpc.ClientConn, req *internalv1.ReplicaFetchRequest, resp *codec.ReplicaFetchResponse) error {
	ctx, cancel := context.WithCancelCause(f.ctx)
	defer cancel(nil)
	ctx, cancelTimeout := context.WithTimeout(ctx, replicaFetchWait+fetchAnswerGrace)
	defer cancelTimeout()
	f.setCancelPoll(func() { cancel(errPartitionAdded) })
	defer f.setCancelPoll(nil)
	err := cc.Invoke(ctx, internalv1.Replica_ReplicaFetch_FullMethodName, req, resp, grpc.ForceCodecV2(codec.Codec{}))
	if err != nil && f.ctx.Err() == nil && errors.Is(context.Cause(ctx), errPartitionAdded) {
		return errPartitionAdded
	}
	return err
}

// callStream sends req on the fetcher's ReplicaFetchStream to the source,
// opening it on cc first if needed, and receives the answer into resp. On
// any error the stream is closed (the next call opens a new one); it
// returns errPartitionAdded when add cancelled the fetch, and an
// UNIMPLEMENTED status when the source does not serve the stream.
func (f *fetcher) callStream(cc *grpc.ClientConn, req *internalv1.ReplicaFetchRequest, resp *codec.ReplicaFetchResponse) error {
	if f.stream != nil && f.streamCC != cc {
		f.closeStream() // the source's address changed
	}
	if f.stream == nil {
		ctx, cancel := context.WithCancelCause(f.ctx)
		st, err := cc.NewStream(ctx, &internalv1.Replica_ServiceDesc.Streams[0],
			internalv1.Replica_ReplicaFetchStream_FullMethodName, grpc.ForceCodecV2(codec.Codec{}))
		if err != nil {
			cancel(nil)
			return err
		}
		f.stream, f.streamCC, f.streamCtx, f.streamCancel = st, cc, ctx, cancel
	}
	cancel := f.streamCancel
	f.setCancelPoll(func() { cancel(errPartitionAdded) })
	defer f.setCancelPoll(nil)
	overdue := time.AfterFunc(replicaFetchWait+fetchAnswerGrace, func() { cancel(errFetchTimeout) })
	err := f.stream.SendMsg(req)
	if err == nil {
		err = f.stream.RecvMsg(resp)
	}
	if !overdue.Stop() && err == nil {
		// The answer came as the timer fired: the stream is cancelled
		// already; the next fetch opens a new one.
		f.closeStream()
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) {
		// SendMsg reports the stream's end as io.EOF; RecvMsg has its status.
		if rerr := f.stream.RecvMsg(resp); rerr != nil && !errors.Is(rerr, io.EOF) {
			err = rerr
		}
	}
	cause := context.Cause(f.streamCtx)
	f.closeStream()
	switch {
	case f.ctx.Err() != nil:
		return f.ctx.Err()
	case errors.Is(cause, errPartitionAdded):
		return errPartitionAdded
	case errors.Is(cause, errFetchTimeout):
		return status.Errorf(codes.DeadlineExceeded, "replica fetch from broker %d: no answer within %v", f.source, replicaFetchWait+fetchAnswerGrace)
	}
	return err
}

// closeStream closes the fetcher's stream, if any.
func (f *fetcher) closeStream() {
	if f.stream == nil {
		return
	}
	f.streamCancel(nil)
	f.stream, f.streamCC, f.streamCtx, f.streamCancel = nil, nil, nil, nil
}
