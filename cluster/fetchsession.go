package cluster

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Replica fetch sessions (Kafka KIP-227, decision 57). A follower fetches
// every partition it follows from one leader in one long poll; without a
// session each poll listed them all, and the leader recorded each one's
// position, read each and waited on a channel per partition: at 10,000
// partitions, idle, that was most of a node's CPU (issue 31). In a
// session the follower lists only the partitions whose fetch offset or
// leader epoch changed (and those that left); the leader keeps the rest,
// learns of appends and high-watermark moves from the logs' change hooks
// (storage.Log.SetChangeHook) instead of channels, and answers only the
// partitions with news. An idle poll costs O(1) on both sides.
//
// Correctness does not depend on the session: a partition the follower
// does not list keeps the fetch offset it last listed, which is its log
// end offset, since the follower lists every partition whose log end
// moved. The leader's view of that follower is thus exact, and the ISR
// rule needs no per-poll refresh: a follower whose log end equals the
// leader's is in sync however long ago it fetched (Tracker.caughtUp), and
// one that is behind and makes no progress is not listed, so its
// lastCaughtUpTime ages and it leaves the ISR, as it should.
//
// Lock order: a log's lock, then Replica.watchMu, then fetchSession.mu
// (the change hook runs under the log's lock); nothing calls into a log or
// a replica's roleMu while holding watchMu or a session's mu.

const (
	// FetchSessionNone is the session epoch of a fetch without a session.
	FetchSessionNone int32 = -1
	// FetchSessionInitial is the session epoch of a full fetch that opens a
	// new session.
	FetchSessionInitial int32 = 0
	// maxFetchSessions bounds the sessions a leader keeps; a full fetch
	// beyond it is answered without opening one. Followers open one per
	// leader, so this is far above a cluster's need.
	maxFetchSessions = 1000
	// fetchSessionIdle is how long a session may go without a fetch before
	// a new session's opening drops it.
	fetchSessionIdle = 2 * time.Minute
)

// FetchSessionRequest is the session part of a follower's fetch.
type FetchSessionRequest struct {
	// ID names the session (0 with Epoch FetchSessionInitial: open one).
	ID int32
	// Epoch is FetchSessionNone, FetchSessionInitial, or the session's
	// next epoch (1, 2, ... wrapping to 1).
	Epoch int32
	// Forgotten partitions leave the session.
	Forgotten []TopicPartition
	// AnswerBudget, if set, bounds the answer's batch bytes given the
	// number of partitions it may hold (the session's) and the bytes of
	// their topic names; the lower of it and FetchParams.MaxBytes counts.
	AnswerBudget func(partitions, nameBytes int) int
}

// SessionFetchResult is the answer to a fetch in a session.
type SessionFetchResult struct {
	// SessionID is the session (a new one after a full fetch; 0 when none
	// was opened).
	SessionID int32
	// Full reports a full fetch's answer: Partitions are every partition
	// asked, in request order. Otherwise only partitions with news.
	Full       bool
	Partitions []SessionPartitionResult
}

// SessionPartitionResult is one partition of a SessionFetchResult.
type SessionPartitionResult struct {
	TopicPartition
	FetchPartitionResult
}

// fetchSessions is a leader's fetch sessions. Safe for concurrent use.
type fetchSessions struct {
	mu         sync.Mutex // guards the following
	byID       map[int32]*fetchSession
	byFollower map[int32]*fetchSession
	lastID     int32
}

// fetchSession is one follower's session.
type fetchSession struct {
	id          int32
	follower    int32
	brokerEpoch int64
	// wake (capacity 1) is signalled when a partition of the session gets
	// new data.
	wake chan struct{}

	mu        sync.Mutex // guards the following
	nextEpoch int32
	parts     map[TopicPartition]*sessionPart
	nameBytes int // of the topic names of parts
	dirty     []*sessionPart
	busy      bool   // a fetch is being served on the session
	fetches   uint64 // fetches served (sessionFetch.gen); used by the one being served
	lastUsed  time.Time
	closed    bool
}

// sessionPart is one partition of a session.
type sessionPart struct {
	s       *fetchSession
	replica *Replica
	// req is the partition as the follower last listed it; sentHW and
	// sentLogStart what the follower was last told. Used only by the fetch
	// being served on the session (busy).
	req                  FetchPartition
	sentHW, sentLogStart int64
	// dirty and removed are guarded by s.mu.
	dirty, removed bool
	// Used by the fetch being served (busy): listedIn is the number of
	// the last fetch that listed the entry, index its place in the answer
	// of fetch indexIn (sessionFetch.gen).
	listedIn, indexIn uint64
	index             int
}

func newFetchSessions() *fetchSessions {
	return &fetchSessions{byID: map[int32]*fetchSession{}, byFollower: map[int32]*fetchSession{}}
}

// open starts a new session for follower, replacing its previous one, or
// returns nil when the leader holds maxFetchSessions already.
func (c *fetchSessions) open(follower int32, brokerEpoch int64, now time.Time) *fetchSession {
	var drop []*fetchSession
	c.mu.Lock()
	if old := c.byFollower[follower]; old != nil {
		drop = append(drop, old)
		c.removeLocked(old)
	}
	if len(c.byID) >= maxFetchSessions/2 {
		for _, s := range c.byID {
			s.mu.Lock()
			idle := !s.busy && now.Sub(s.lastUsed) > fetchSessionIdle
			s.mu.Unlock()
			if idle {
				drop = append(drop, s)
				c.removeLocked(s)
			}
		}
	}
	var s *fetchSession
	if len(c.byID) < maxFetchSessions {
		for {
			c.lastID++
			if c.lastID <= 0 || c.lastID == math.MaxInt32 {
				c.lastID = 1
			}
			if c.byID[c.lastID] == nil {
				break
			}
		}
		s = &fetchSession{id: c.lastID, follower: follower, brokerEpoch: brokerEpoch, wake: make(chan struct{}, 1),
			nextEpoch: 1, parts: map[TopicPartition]*sessionPart{}, busy: true, lastUsed: now}
		c.byID[s.id] = s
		c.byFollower[follower] = s
	}
	c.mu.Unlock()
	for _, old := range drop {
		old.close()
	}
	return s
}

func (c *fetchSessions) removeLocked(s *fetchSession) {
	delete(c.byID, s.id)
	if c.byFollower[s.follower] == s {
		delete(c.byFollower, s.follower)
	}
}

// acquire returns session id for follower's fetch at epoch, marked busy,
// or the session error to answer.
func (c *fetchSessions) acquire(id, follower int32, brokerEpoch int64, epoch int32, now time.Time) (*fetchSession, error) {
	c.mu.Lock()
	s := c.byID[id]
	c.mu.Unlock()
	if s == nil || s.follower != follower || s.brokerEpoch != brokerEpoch {
		return nil, errs.New(sluicev1.ErrorCode_FETCH_SESSION_ID_NOT_FOUND, "replica %d has no fetch session %d here", follower, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, errs.New(sluicev1.ErrorCode_FETCH_SESSION_ID_NOT_FOUND, "fetch session %d was closed", id)
	case s.busy:
		return nil, errs.New(sluicev1.ErrorCode_INVALID_FETCH_SESSION_EPOCH, "fetch session %d is serving another fetch", id)
	case epoch != s.nextEpoch:
		return nil, errs.New(sluicev1.ErrorCode_INVALID_FETCH_SESSION_EPOCH, "fetch session %d epoch %d, expected %d", id, epoch, s.nextEpoch)
	}
	s.busy = true
	s.lastUsed = now
	if s.nextEpoch == math.MaxInt32 {
		s.nextEpoch = 1
	} else {
		s.nextEpoch++
	}
	return s, nil
}

// count is the number of open sessions.
func (c *fetchSessions) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}

// closeAll drops every session (the broker is closing).
func (c *fetchSessions) closeAll() {
	c.mu.Lock()
	all := make([]*fetchSession, 0, len(c.byID))
	for _, s := range c.byID {
		all = append(all, s)
	}
	c.byID, c.byFollower = map[int32]*fetchSession{}, map[int32]*fetchSession{}
	c.mu.Unlock()
	for _, s := range all {
		s.close()
	}
}

// close ends s: its partitions stop watching their replicas.
func (s *fetchSession) close() {
	s.mu.Lock()
	s.closed = true
	parts := make([]*sessionPart, 0, len(s.parts))
	for _, sp := range s.parts {
		sp.removed = true
		parts = append(parts, sp)
	}
	s.parts = map[TopicPartition]*sessionPart{}
	s.nameBytes = 0
	s.dirty = nil
	s.mu.Unlock()
	for _, sp := range parts {
		sp.replica.removeWatcher(sp)
	}
}

// release ends the fetch being served on s.
func (s *fetchSession) release(now time.Time) {
	s.mu.Lock()
	s.busy = false
	s.lastUsed = now
	s.mu.Unlock()
}

// mark records that sp's replica changed (new data when data); it wakes a
// waiting fetch for data only: a high-watermark move is told with the
// next answer, as before sessions (a follower waits for data).
func (s *fetchSession) mark(sp *sessionPart, data bool) {
	s.mu.Lock()
	if !sp.removed && !sp.dirty {
		sp.dirty = true
		s.dirty = append(s.dirty, sp)
	}
	s.mu.Unlock()
	if data {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// takeDirty returns the partitions marked since the last call.
func (s *fetchSession) takeDirty() []*sessionPart {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dirty
	s.dirty = nil
	out := d[:0]
	for _, sp := range d {
		sp.dirty = false
		if !sp.removed {
			out = append(out, sp)
		}
	}
	return out
}

// forget removes tp from s.
func (s *fetchSession) forget(tp TopicPartition) {
	s.mu.Lock()
	sp := s.parts[tp]
	if sp != nil {
		sp.removed = true
		delete(s.parts, tp)
		s.nameBytes -= len(tp.Topic)
	}
	s.mu.Unlock()
	if sp != nil {
		sp.replica.removeWatcher(sp)
	}
}

// upsert makes fp's entry in s current for replica r: a new entry (or one
// for a replaced replica) starts watching r. It returns the entry.
func (s *fetchSession) upsert(r *Replica, fp FetchPartition) *sessionPart {
	s.mu.Lock()
	sp := s.parts[fp.TopicPartition]
	var old *sessionPart
	if sp != nil && sp.replica != r {
		old, sp = sp, nil
		old.removed = true
	}
	added := sp == nil
	if added {
		sp = &sessionPart{s: s, replica: r, sentHW: -1, sentLogStart: -1}
		if old == nil {
			s.nameBytes += len(fp.Topic)
		}
		s.parts[fp.TopicPartition] = sp
	}
	sp.req = fp
	s.mu.Unlock()
	if old != nil {
		old.replica.removeWatcher(old)
	}
	if added {
		r.addWatcher(sp)
	}
	return sp
}

// addWatcher makes sp hear p's log changes.
func (p *Replica) addWatcher(sp *sessionPart) {
	p.watchMu.Lock()
	p.watchers = append(p.watchers, sp)
	p.watchMu.Unlock()
}

// removeWatcher stops sp hearing p's log changes.
func (p *Replica) removeWatcher(sp *sessionPart) {
	p.watchMu.Lock()
	defer p.watchMu.Unlock()
	for i, w := range p.watchers {
		if w == sp {
			last := len(p.watchers) - 1
			p.watchers[i] = p.watchers[last]
			p.watchers[last] = nil
			p.watchers = p.watchers[:last]
			return
		}
	}
}

// signalWatchers tells the sessions watching p that it changed (its log's
// change hook, and leadership changes).
func (p *Replica) signalWatchers(data bool) {
	p.watchMu.Lock()
	for _, sp := range p.watchers {
		sp.s.mark(sp, data)
	}
	p.watchMu.Unlock()
}

// FetchSessions is the number of replica fetch sessions this broker holds
// as a leader.
func (m *ReplicaManager) FetchSessions() int { return m.sessions.count() }

// FetchRescanFound is how many partitions this broker's fetchers found,
// in their periodic rescan, changed with no mark of it: each was fetched
// up to sessionRescanEvery late. It stays 0 unless a change of a
// follower partition is not marked (fetcher.go).
func (m *ReplicaManager) FetchRescanFound() int64 { return m.fetchRescanFound.Load() }

// FetchInSession serves a follower's fetch in a fetch session (the
// ReplicaID of p must be a follower's): with sr.Epoch FetchSessionInitial
// it opens a session holding p.Partitions (a full fetch, answered for
// every partition in order, as Fetch would); otherwise it applies the
// listed and forgotten partitions to session sr.ID and answers only the
// partitions with news: batches, an error, or a high watermark or log
// start offset other than the follower was last told. The long poll is
// Fetch's (MinBytes, MaxWait), woken by the session's partitions' appends.
//
// Errors: STALE_BROKER_EPOCH (as Fetch), FETCH_SESSION_ID_NOT_FOUND and
// INVALID_FETCH_SESSION_EPOCH (the follower starts over with a full
// fetch), ctx's.
func (m *ReplicaManager) FetchInSession(ctx context.Context, p FetchParams, sr FetchSessionRequest) (SessionFetchResult, error) {
	now := time.Now()
	if err := m.checkBrokerEpoch(p.ReplicaID, p.BrokerEpoch); err != nil {
		return SessionFetchResult{}, err
	}
	full := sr.Epoch == FetchSessionInitial
	var s *fetchSession
	if full {
		s = m.sessions.open(p.ReplicaID, p.BrokerEpoch, now)
		if s == nil {
			// Too many sessions: a plain full fetch.
			res, err := m.Fetch(ctx, p)
			if err != nil {
				return SessionFetchResult{}, err
			}
			out := SessionFetchResult{Full: true, Partitions: make([]SessionPartitionResult, len(p.Partitions))}
			for i, fp := range p.Partitions {
				out.Partitions[i] = SessionPartitionResult{TopicPartition: fp.TopicPartition, FetchPartitionResult: res.Partitions[i]}
			}
			return out, nil
		}
	} else {
		var err error
		if s, err = m.sessions.acquire(sr.ID, p.ReplicaID, p.BrokerEpoch, sr.Epoch, now); err != nil {
			return SessionFetchResult{}, err
		}
		for _, tp := range sr.Forgotten {
			s.forget(tp)
		}
	}
	defer func() { s.release(time.Now()) }()

	s.fetches++ // the entries' fetch-scoped fields below belong to this fetch
	f := sessionFetch{m: m, p: p, s: s, full: full, gen: s.fetches}
	// The listed partitions: each one's position is recorded (the HW and
	// ISR may move), then it is read like any partition with news.
	listed := make([]*sessionPart, 0, len(p.Partitions))
	for _, fp := range p.Partitions {
		out := emptyResult(fp)
		r, err := m.followerFetched(p.ReplicaID, fp, &out, now)
		if err != nil {
			s.forget(fp.TopicPartition)
			out.Err = err
			f.add(nil, fp.TopicPartition, out)
			continue
		}
		sp := s.upsert(r, fp)
		f.add(sp, fp.TopicPartition, out)
		listed = append(listed, sp)
		sp.listedIn = f.gen
	}
	if sr.AnswerBudget != nil {
		s.mu.Lock()
		n, names := len(s.parts), s.nameBytes
		s.mu.Unlock()
		// An upper bound: listed partitions that failed are answered
		// too (and are counted twice when they did not fail).
		n += len(f.results)
		for _, r := range f.results {
			names += len(r.Topic)
		}
		f.p.MaxBytes = min(f.p.MaxBytes, sr.AnswerBudget(n, names))
	}
	// The first pass reads the listed partitions and those marked since
	// the last fetch, each once; a later pass (after a wake-up) those
	// marked since. A partition already answered with batches is not
	// read again (its next batches come with the next fetch).
	dirty := s.takeDirty()
	f.pass++
	for _, sp := range listed {
		f.read(sp)
	}
	for _, sp := range dirty {
		f.read(sp)
	}
	deadline := now.Add(p.MaxWait)
	timer := time.NewTimer(p.MaxWait)
	defer timer.Stop()
	for first := true; ; first = false {
		if !first {
			f.pass++
			for _, sp := range s.takeDirty() {
				f.read(sp)
			}
		}
		// An error found while waiting is news too (a partition whose
		// leadership moved is told at once). An error of a partition the
		// follower listed is not: it waits as before (and is answered at
		// the end of the wait), or else partitions refused while the
		// leader's metadata lags (thousands during a creation or a
		// failover) would each cut a poll short.
		if f.total >= max(1, p.MinBytes) || f.failed || time.Until(deadline) <= 0 {
			break
		}
		select {
		case <-s.wake:
		case <-timer.C:
		case <-ctx.Done():
			// The follower cancelled (a partition was added on its side)
			// or went away before any answer: this fetch did not happen,
			// so its epoch stays the next. What it listed and forgot is
			// applied already; the follower sends it again (the same
			// changes again change nothing). An answer that was built
			// and then lost is not undone: the follower's next fetch
			// fails on the epoch and starts over.
			if !full {
				s.mu.Lock()
				s.nextEpoch = sr.Epoch
				s.mu.Unlock()
			}
			return SessionFetchResult{}, ctx.Err()
		}
	}
	out := SessionFetchResult{SessionID: s.id, Full: full, Partitions: f.results[:0]}
	for i, r := range f.results {
		sp := f.parts[i]
		if !full && sp != nil && r.Err == nil && len(r.Batches) == 0 && r.HighWatermark == sp.sentHW && r.LogStartOffset == sp.sentLogStart {
			continue // nothing new for the follower
		}
		if sp != nil && r.Err == nil {
			sp.sentHW, sp.sentLogStart = r.HighWatermark, r.LogStartOffset
		}
		out.Partitions = append(out.Partitions, r)
	}
	return out, nil
}

// sessionFetch is one fetch being served in a session.
type sessionFetch struct {
	m    *ReplicaManager
	p    FetchParams
	s    *fetchSession
	full bool
	// gen is this fetch's number in the session (sessionPart.listedIn,
	// indexIn); pass counts the reading passes (read reads a partition
	// once per pass).
	gen  uint64
	pass int
	// results are the partitions answered so far, parts their session
	// entries (nil for a listed partition that failed), bytes their batch
	// bytes and readIn the pass that last read them; total is the bytes'
	// sum. An entry's place in them is its index (when indexIn is gen).
	results []SessionPartitionResult
	parts   []*sessionPart
	bytes   []int
	readIn  []int
	total   int
	// failed: a partition the follower did not list in this fetch
	// failed (its leadership moved): answer at once.
	failed bool
}

func (f *sessionFetch) add(sp *sessionPart, tp TopicPartition, out FetchPartitionResult) int {
	f.results = append(f.results, SessionPartitionResult{TopicPartition: tp, FetchPartitionResult: out})
	f.parts = append(f.parts, sp)
	f.bytes = append(f.bytes, 0)
	f.readIn = append(f.readIn, 0)
	i := len(f.results) - 1
	if sp != nil {
		sp.index, sp.indexIn = i, f.gen
	}
	return i
}

// read (re)reads sp into the answer, within what is left of the fetch's
// byte budget.
func (f *sessionFetch) read(sp *sessionPart) {
	i := sp.index
	if sp.indexIn != f.gen {
		i = f.add(sp, sp.req.TopicPartition, emptyResult(sp.req))
	}
	if f.readIn[i] == f.pass {
		return
	}
	f.readIn[i] = f.pass
	res := &f.results[i].FetchPartitionResult
	if res.Err != nil {
		return // failed in this fetch: answered as it is
	}
	if f.bytes[i] > 0 {
		// Answered with batches already: only the watermarks move.
		res.HighWatermark = max(res.HighWatermark, sp.replica.log.HighWatermark())
		res.LogStartOffset = sp.replica.log.StartOffset()
		return
	}
	f.total -= f.bytes[i]
	f.bytes[i] = 0
	// A partition listed in this fetch was looked up just now
	// (followerFetched); one woken later may have been replaced since.
	if sp.listedIn != f.gen {
		if cur, err := f.m.Replica(sp.req.Topic, sp.req.Partition); err != nil || cur != sp.replica {
			if err == nil {
				err = errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "%s was replaced on this broker", sp.req.TopicPartition)
			}
			*res = emptyResult(sp.req)
			res.Err = err
			f.failed = true // not listed: news
			return
		}
	}
	hw := res.HighWatermark
	res.Batches, res.NextFetchOffset = nil, sp.req.FetchOffset
	r := partitionRead{req: sp.req, out: res, replica: sp.replica}
	_, n := f.m.readPartition(&r, f.p, true, f.total)
	if res.Err != nil {
		f.failed = f.failed || sp.listedIn != f.gen
	} else if res.HighWatermark < hw {
		res.HighWatermark = hw
	}
	f.bytes[i] = n
	f.total += n
}
