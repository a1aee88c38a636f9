package controller

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// HeartbeatRequest is one broker heartbeat (BrokerHeartbeat RPC).
type HeartbeatRequest struct {
	BrokerID    int32
	BrokerEpoch int64
	// MetadataOffset is the metadata offset the broker has applied.
	MetadataOffset uint64
	// WantUnfence: the broker has caught up and wants to serve.
	WantUnfence bool
	// WantShutdown: controlled shutdown; move its leaderships away.
	WantShutdown bool
	// OfflineReplicas are every replica whose log failed on the broker's
	// disk since it registered (decision 42): the whole set each time.
	OfflineReplicas []OfflineReplica
}

// HeartbeatResponse is the controller's answer.
type HeartbeatResponse struct {
	Fenced bool
	// ShutdownReady: the broker is fenced and leads nothing; it may stop.
	ShutdownReady  bool
	MetadataOffset uint64
}

// Heartbeat handles a broker heartbeat on the active controller: it renews
// the broker's session, unfences a broker that has caught up with its own
// registration (and asks for it), and runs controlled shutdown (fence,
// then move its leaderships and ISR memberships away). Errors:
// NOT_CONTROLLER, STALE_BROKER_EPOCH (the broker must re-register).
func (c *Controller) Heartbeat(ctx context.Context, req HeartbeatRequest) (HeartbeatResponse, error) {
	if !c.IsLeader() {
		return HeartbeatResponse{}, c.notController()
	}
	var b Broker
	var found bool
	c.fsm.view(func(im *Image) {
		if p := im.Brokers[req.BrokerID]; p != nil {
			b, found = *p, true
		}
	})
	if !found {
		return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_STALE_BROKER_EPOCH, "broker %d is not registered", req.BrokerID)
	}
	if req.BrokerEpoch != b.Epoch {
		return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_STALE_BROKER_EPOCH,
			"broker %d epoch %d is not the current epoch %d; register again", req.BrokerID, req.BrokerEpoch, b.Epoch)
	}
	c.livenessMu.Lock()
	c.liveness.Heartbeat(req.BrokerID, req.BrokerEpoch, time.Now())
	c.livenessMu.Unlock()

	// Offline replicas first: a broker that restarts on a disk that still
	// fails must not be elected for them when it is unfenced below.
	if err := c.syncOfflineReplicas(ctx, b, req); err != nil {
		return HeartbeatResponse{}, err
	}
	switch {
	case req.WantShutdown && !b.Fenced:
		if err := c.FenceBroker(ctx, req.BrokerID, req.BrokerEpoch); err != nil {
			return HeartbeatResponse{}, err
		}
	case req.WantShutdown:
		// Already fenced: finish any re-election a failed attempt left.
		c.proposeMu.Lock()
		err := c.reelectLocked(ctx)
		c.proposeMu.Unlock()
		if err != nil {
			return HeartbeatResponse{}, err
		}
	case req.WantUnfence && b.Fenced && req.MetadataOffset >= uint64(b.Epoch):
		if err := c.UnfenceBroker(ctx, req.BrokerID, req.BrokerEpoch); err != nil {
			return HeartbeatResponse{}, err
		}
	}
	var resp HeartbeatResponse
	c.fsm.view(func(im *Image) {
		resp.MetadataOffset = im.Offset
		cur := im.Brokers[req.BrokerID]
		resp.Fenced = cur == nil || cur.Fenced
		if req.WantShutdown && resp.Fenced {
			resp.ShutdownReady = !leadsAny(im, req.BrokerID)
		}
	})
	return resp, nil
}

// syncOfflineReplicas brings the image's offline replicas of broker b
// (as it was before this heartbeat) in line with the heartbeat's report
// (decision 42): a different set is proposed (OfflineReplicas) and the
// leaderships and ISR memberships of the offline replicas moved away
// (ReelectChanges). While the set is unchanged and not empty, re-elections
// that a failed attempt left are finished, as a fenced broker's shutdown
// heartbeats do.
func (c *Controller) syncOfflineReplicas(ctx context.Context, b Broker, req HeartbeatRequest) error {
	want := SortOfflineReplicas(req.OfflineReplicas)
	if slices.Equal(want, b.OfflineReplicas) {
		if len(want) == 0 {
			return nil
		}
		var pending bool
		c.fsm.view(func(im *Image) { pending = len(ReelectChanges(im)) > 0 })
		if !pending {
			return nil
		}
		c.proposeMu.Lock()
		defer c.proposeMu.Unlock()
		return c.reelectLocked(ctx)
	}
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	if _, err := c.Propose(ctx, OfflineReplicas{BrokerID: req.BrokerID, BrokerEpoch: req.BrokerEpoch, Replicas: want}); err != nil {
		return err
	}
	// A set of the reports already known: the lists may hold thousands
	// (issue 29), and a scan of one for each of the other was quadratic.
	known := make(map[OfflineReplica]struct{}, len(b.OfflineReplicas))
	for _, r := range b.OfflineReplicas {
		known[r] = struct{}{}
	}
	for _, r := range want {
		if _, ok := known[r]; !ok {
			c.log.Warn("controller: broker reports a replica offline after a disk error; moving its leadership and ISR membership away",
				"broker", req.BrokerID, "topic", r.Topic, "partition", r.Partition, "path", r.Path, "err", r.Error)
		}
	}
	if err := c.reelectLocked(ctx); err != nil {
		return err
	}
	return c.completeReassignmentsLocked(ctx)
}

// leadsAny reports whether broker id leads any partition in im.
func leadsAny(im *Image, id int32) bool {
	for _, t := range im.Topics {
		for _, p := range t.Partitions {
			if p.Leader == id {
				return true
			}
		}
	}
	return false
}

// MemberGone tells the controller that membership (gossip) lost node id.
// Every voter records it; the active controller fences the broker after
// GoneGrace unless it heartbeats meanwhile.
func (c *Controller) MemberGone(id int32) {
	c.livenessMu.Lock()
	c.liveness.Gone(id, time.Now())
	c.livenessMu.Unlock()
}

// MemberJoined clears a MemberGone mark.
func (c *Controller) MemberJoined(id int32) {
	c.livenessMu.Lock()
	c.liveness.Joined(id)
	c.livenessMu.Unlock()
}

// onLeadership resets broker sessions when this node becomes leader.
func (c *Controller) onLeadership(isLeader bool) {
	c.livenessMu.Lock()
	defer c.livenessMu.Unlock()
	if !isLeader {
		c.leaderSince = time.Time{}
		return
	}
	now := time.Now()
	c.leaderSince = now
	c.fsm.view(func(im *Image) { c.liveness.Reset(im, now) })
}

// sessionLoop fences brokers whose sessions expired, on the active
// controller, every SessionCheckInterval until Shutdown. It also
// completes any partition reassignment that is ready but was not
// completed where it became ready (see maybeCompleteReassignments).
func (c *Controller) sessionLoop() {
	t := time.NewTicker(c.cfg.SessionCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		if !c.IsLeader() {
			continue
		}
		c.livenessMu.Lock()
		var due []FenceBroker
		if !c.leaderSince.IsZero() {
			c.fsm.view(func(im *Image) { due = c.liveness.Expired(im, time.Now()) })
		}
		c.livenessMu.Unlock()
		for _, f := range due {
			ctx, cancel := context.WithTimeout(c.ctx, c.cfg.ApplyTimeout)
			err := c.FenceBroker(ctx, f.BrokerID, f.BrokerEpoch)
			cancel()
			if err != nil && errs.Code(err) != sluicev1.ErrorCode_STALE_BROKER_EPOCH {
				c.log.Warn("controller: fence expired broker", "broker", f.BrokerID, "err", err)
				continue
			}
			if err == nil {
				c.log.Info("controller: fenced broker: session expired or node gone", "broker", f.BrokerID, "epoch", f.BrokerEpoch)
			}
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.ApplyTimeout)
		c.maybeReelect(ctx)
		c.maybeCompleteReassignments(ctx)
		if c.CaughtUpLeader() {
			c.maybeRebalance(ctx)
		}
		cancel()
	}
}

// maybeReelect is the session loop's safety net for re-elections: when
// the image shows a partition led by (or with an ISR member on) a fenced
// or gone broker, it re-runs them. FenceBroker's own re-election may stop
// part way (its ApplyTimeout ended, a leadership change of the quorum),
// and nothing else would move those partitions while their broker stays
// down. The image is scanned once per change of it, not per tick.
func (c *Controller) maybeReelect(ctx context.Context) {
	ran, err := c.runIfDue(ctx, &c.reelectCheckedAt, func(im *Image) bool { return len(ReelectChanges(im)) > 0 }, c.reelectLocked)
	switch {
	case err != nil:
		c.log.Warn("controller: re-electing partitions of fenced brokers; retried", "err", err)
	case ran:
		c.log.Info("controller: re-elected the partitions a fenced broker still led")
	}
}

// runIfDue runs work with proposeMu held if due says this node's image
// (read without a barrier, so cheaply) needs it. Idle, the image does not
// move: due looks once per change of it (checkedAt holds the offset it
// last found nothing at), not at every tick over every partition (issue
// 31). It reports whether work ran, and its error.
func (c *Controller) runIfDue(ctx context.Context, checkedAt *uint64, due func(im *Image) bool, work func(ctx context.Context) error) (bool, error) {
	needed := false
	var offset uint64
	c.fsm.view(func(im *Image) {
		if offset = im.Offset; offset != *checkedAt {
			needed = due(im)
		}
	})
	if !needed {
		*checkedAt = offset
		return false, nil
	}
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	return true, work(ctx)
}

// QuorumState is this voter's own view of the Raft quorum.
type QuorumState struct {
	NodeID       int32
	RaftAddress  string
	State        string // leader, follower, candidate, shutdown
	Term         uint64
	LastLogIndex uint64
	CommitIndex  uint64
	AppliedIndex uint64
	LeaderID     int32 // -1 when unknown
	Voters       []Voter
}

// QuorumState reports this voter's Raft state and configuration.
func (c *Controller) QuorumState() QuorumState {
	st := c.raft.Stats()
	u := func(k string) uint64 {
		n, _ := strconv.ParseUint(st[k], 10, 64)
		return n
	}
	q := QuorumState{
		NodeID: c.cfg.NodeID, RaftAddress: c.cfg.RaftAdvertise,
		State: stateName(c.raft.State()), Term: u("term"), LastLogIndex: u("last_log_index"),
		CommitIndex: u("commit_index"), AppliedIndex: u("applied_index"),
	}
	q.LeaderID, _ = c.Leader()
	if f := c.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Suffrage != raft.Voter {
				continue
			}
			if id, err := strconv.ParseInt(string(s.ID), 10, 32); err == nil {
				q.Voters = append(q.Voters, Voter{ID: int32(id), Address: string(s.Address)})
			}
		}
	}
	slices.SortFunc(q.Voters, func(a, b Voter) int { return int(a.ID - b.ID) })
	return q
}

func stateName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	}
	return "shutdown"
}

// Voters returns the configured static quorum.
func (c *Controller) Voters() []Voter { return slices.Clone(c.cfg.Voters) }

// NodeID is this voter's id.
func (c *Controller) NodeID() int32 { return c.cfg.NodeID }

// PlanTopic checks a topic creation without proposing it (validate_only):
// the name, that it does not exist, and that a placement over the live
// brokers exists. It reads this node's image.
func (c *Controller) PlanTopic(name string, partitions, rf int32) ([]PartitionAssignment, error) {
	if err := ValidateTopicName(name); err != nil {
		return nil, err
	}
	var assign []PartitionAssignment
	var err error
	c.fsm.view(func(im *Image) {
		if im.Topics[name] != nil {
			err = errs.New(sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS, "topic %q already exists", name)
			return
		}
		assign, err = Place(LivePlacementBrokers(im), PlacementSeed(name), partitions, rf)
	})
	return assign, err
}

// Offset is the metadata offset this node has applied.
func (c *Controller) Offset() uint64 {
	var off uint64
	c.fsm.view(func(im *Image) { off = im.Offset })
	return off
}
