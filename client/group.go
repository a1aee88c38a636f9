package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/proto/topic"
)

// This file holds the consumer-group options and types, and the requests
// to a group's coordinator (proto/sluice/v1/groups.proto is the contract,
// docs/groups.md the guide). group_member.go is the membership loop.

// TopicPartition names one partition of a topic: topic.Partition, the server's name too.
type TopicPartition = topic.Partition

// sortPartitions sorts by topic, then partition.
func sortPartitions(tps []TopicPartition) {
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
}

// GroupMetadata identifies a consumer's membership, as its last heartbeat
// answered it: what a transactional producer passes to
// SendOffsetsToTransaction so that the group coordinator can fence a
// zombie member (KIP-447).
type GroupMetadata struct {
	GroupID     string
	MemberID    string // "" before the first heartbeat answer
	MemberEpoch int32  // 0 while joining; -1 for "no member check"
	InstanceID  string // static membership; "" for a dynamic member
}

// RebalanceListener is told when the consumer's share of its group
// changes. Its methods run on the consumer's group goroutine, one at a
// time and never concurrently with each other, but concurrently with Poll;
// they may call Commit, CommitOffsets, Position and Seek, but not Close
// (which waits for the goroutine they run on). No heartbeat is sent while
// one runs, so each must return well within the session timeout.
type RebalanceListener interface {
	// OnAssigned is called once newly assigned partitions are positioned
	// (at their committed offsets, or the auto offset reset policy) and
	// before Poll returns their records.
	OnAssigned(ctx context.Context, partitions []TopicPartition)
	// OnRevoked is called when partitions are taken away in a rebalance
	// or by Close: fetching them has stopped (records fetched and not yet
	// returned by Poll are dropped) and, with auto-commit, their positions
	// are committed. Commit here to commit them yourself. The coordinator
	// hands them to their next owner only after OnRevoked has returned.
	OnRevoked(ctx context.Context, partitions []TopicPartition)
	// OnLost is called when the member was fenced (FENCED_MEMBER_EPOCH,
	// UNKNOWN_MEMBER_ID: its session expired or it was too slow to
	// release partitions): the partitions may already belong to another
	// member, so they were dropped without committing. The consumer joins
	// again by itself.
	OnLost(partitions []TopicPartition)
}

// RebalanceCallbacks is a RebalanceListener made of functions; nil ones
// are skipped.
type RebalanceCallbacks struct {
	Assigned func(ctx context.Context, partitions []TopicPartition)
	Revoked  func(ctx context.Context, partitions []TopicPartition)
	Lost     func(partitions []TopicPartition)
}

// OnAssigned calls Assigned.
func (r RebalanceCallbacks) OnAssigned(ctx context.Context, p []TopicPartition) {
	if r.Assigned != nil {
		r.Assigned(ctx, p)
	}
}

// OnRevoked calls Revoked.
func (r RebalanceCallbacks) OnRevoked(ctx context.Context, p []TopicPartition) {
	if r.Revoked != nil {
		r.Revoked(ctx, p)
	}
}

// OnLost calls Lost.
func (r RebalanceCallbacks) OnLost(p []TopicPartition) {
	if r.Lost != nil {
		r.Lost(p)
	}
}

// ErrNotGroupMember is returned by Commit and CommitOffsets while the
// consumer has no membership to commit under: before its first
// heartbeat answer, and between being fenced and joining again.
var ErrNotGroupMember = errors.New("sluice: the consumer is not a member of its group (joining, or fenced and joining again)")

// groupConfig is the consumer's group membership configuration; id ""
// means no group.
type groupConfig struct {
	id                 string
	instanceID         string
	rack               string
	sessionTimeout     time.Duration // 0: the broker's default
	rebalanceTimeout   time.Duration // 0: the broker's default
	assignor           string        // "", "uniform" or "range"
	autoCommit         bool
	autoCommitInterval time.Duration
	listener           RebalanceListener
	closeTimeout       time.Duration
	// noLeaveOnClose: Close neither revokes nor leaves (WithLeaveGroupOnClose).
	noLeaveOnClose bool
	// groupOnly names a group-only option given, to refuse it without
	// WithGroup.
	groupOnly string
}

// WithGroup makes the consumer a member of the consumer group groupID:
// call Subscribe instead of Assign, and the group's coordinator assigns
// the consumer its share of the subscribed topics' partitions. Positions
// start at the group's committed offsets (WithAutoOffsetReset where none
// is committed) and are committed every 5 s (WithAutoCommit).
func WithGroup(groupID string) ConsumerOption {
	return func(c *consumerConfig) error {
		if groupID == "" {
			return errors.New("sluice: group id must not be empty")
		}
		c.group.id = groupID
		return nil
	}
}

func groupOption(name string, set func(g *groupConfig) error) ConsumerOption {
	return func(c *consumerConfig) error {
		c.group.groupOnly = name
		return set(&c.group)
	}
}

// WithInstanceID makes the member static (group.instance.id): a consumer
// that restarts with the same instance id within its session timeout gets
// its assignment back without a rebalance. Needs WithGroup.
func WithInstanceID(id string) ConsumerOption {
	return groupOption("WithInstanceID", func(g *groupConfig) error {
		g.instanceID = id
		return nil
	})
}

// WithRack tells the coordinator the consumer's rack, for rack-aware
// assignment. Needs WithGroup.
func WithRack(rack string) ConsumerOption {
	return groupOption("WithRack", func(g *groupConfig) error {
		g.rack = rack
		return nil
	})
}

// WithSessionTimeout sets how long the coordinator waits for a heartbeat
// before fencing the member (default: the broker's, 45 s; the broker
// bounds it). Needs WithGroup.
func WithSessionTimeout(d time.Duration) ConsumerOption {
	return groupOption("WithSessionTimeout", func(g *groupConfig) error {
		if d <= 0 || d.Milliseconds() > 1<<31-1 {
			return fmt.Errorf("sluice: session timeout must be positive, got %v", d)
		}
		g.sessionTimeout = d
		return nil
	})
}

// WithRebalanceTimeout sets how long the member has to release revoked
// partitions (OnRevoked included) before it is fenced (default: the
// broker's, 60 s). Needs WithGroup.
func WithRebalanceTimeout(d time.Duration) ConsumerOption {
	return groupOption("WithRebalanceTimeout", func(g *groupConfig) error {
		if d <= 0 || d.Milliseconds() > 1<<31-1 {
			return fmt.Errorf("sluice: rebalance timeout must be positive, got %v", d)
		}
		g.rebalanceTimeout = d
		return nil
	})
}

// WithAssignor asks for a server-side assignor, "uniform" or "range"
// (default: the group's, "uniform" for a new group; the group uses the one
// most of its members ask for). Needs WithGroup.
func WithAssignor(name string) ConsumerOption {
	return groupOption("WithAssignor", func(g *groupConfig) error {
		if name != "uniform" && name != "range" {
			return fmt.Errorf("sluice: assignor must be uniform or range, got %q", name)
		}
		g.assignor = name
		return nil
	})
}

// WithAutoCommit turns the periodic commit of the positions of owned
// partitions on or off (default on), and sets its interval (0: the
// default, 5 s). With it on, positions are also committed before
// partitions are revoked and on Close. Needs WithGroup.
func WithAutoCommit(enabled bool, interval time.Duration) ConsumerOption {
	return groupOption("WithAutoCommit", func(g *groupConfig) error {
		if interval < 0 {
			return fmt.Errorf("sluice: auto-commit interval must be >= 0, got %v", interval)
		}
		g.autoCommit = enabled
		if interval > 0 {
			g.autoCommitInterval = interval
		}
		return nil
	})
}

// WithRebalanceListener sets the listener told of assignment changes.
// Needs WithGroup.
func WithRebalanceListener(l RebalanceListener) ConsumerOption {
	return groupOption("WithRebalanceListener", func(g *groupConfig) error {
		g.listener = l
		return nil
	})
}

// WithGroupCloseTimeout bounds how long Close spends committing and
// leaving the group (default 10 s, or the request timeout if shorter).
// Needs WithGroup.
func WithGroupCloseTimeout(d time.Duration) ConsumerOption {
	return groupOption("WithGroupCloseTimeout", func(g *groupConfig) error {
		if d <= 0 {
			return fmt.Errorf("sluice: close timeout must be positive, got %v", d)
		}
		g.closeTimeout = d
		return nil
	})
}

// WithLeaveGroupOnClose(false) makes Close stop the member silently:
// no commit, no OnRevoked, no leave heartbeat — the coordinator fences the
// member only when its session times out, exactly as after a crash
// (Kafka's internal.leave.group.on.close). Meant for tests that simulate
// crashes, and for a process about to be replaced by a static member
// with the same instance id. Default true.
func WithLeaveGroupOnClose(leave bool) ConsumerOption {
	return groupOption("WithLeaveGroupOnClose", func(g *groupConfig) error {
		g.noLeaveOnClose = !leave
		return nil
	})
}

// FindGroupCoordinator asks any broker which broker coordinates groupID:
// the leader of the group's __consumer_offsets partition. It makes one
// attempt; COORDINATOR_NOT_AVAILABLE (retriable) comes back as an
// *errs.Error.
func (c *Client) FindGroupCoordinator(ctx context.Context, groupID string) (Coordinator, error) {
	return c.findCoordinator(ctx, sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP, groupID)
}

// groupCoordinator is the cached coordinator of one group; safe for
// concurrent use.
type groupCoordinator struct {
	c     *Client
	group string

	mu   sync.Mutex // guards addr
	addr string     // "" unknown
}

func (g *groupCoordinator) forget() {
	g.mu.Lock()
	g.addr = ""
	g.mu.Unlock()
}

// attempt finds the coordinator when it is not known and makes one
// attempt of call there, bounded by the request timeout. call returns the
// transport error or the answer's error code.
func (g *groupCoordinator) attempt(ctx context.Context, call func(ctx context.Context, cc *grpc.ClientConn) error) error {
	g.mu.Lock()
	addr := g.addr
	g.mu.Unlock()
	if addr == "" {
		co, err := g.c.FindGroupCoordinator(ctx, g.group)
		if err != nil {
			return err
		}
		addr = co.Address
		g.mu.Lock()
		g.addr = addr
		g.mu.Unlock()
	}
	cc, err := g.c.conn(addr)
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return err
		}
		return status.Error(codes.Unavailable, err.Error())
	}
	rctx, cancel := context.WithTimeout(ctx, g.c.cfg.requestTimeout)
	defer cancel()
	err = rpcError(call(rctx, cc))
	if retry, refind := coordinatorRetriable(err); retry && refind {
		g.forget()
	}
	return err
}

// call runs one group request until it succeeds, fails for good, ctx
// ends, or the request timeout has passed since the call began:
// NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and transport failures find
// the coordinator again; COORDINATOR_LOAD_IN_PROGRESS,
// UNSTABLE_OFFSET_COMMIT and other retriable codes retry after a pause
// (100 ms doubling to 1 s). A *NoBrokerError from the lookup ends it: the
// lookup retried every address already. The error of the last attempt is
// returned, prefixed with what.
func (g *groupCoordinator) call(ctx context.Context, what string, call func(ctx context.Context, cc *grpc.ClientConn) error) error {
	ctx, cancel := context.WithTimeout(ctx, g.c.cfg.requestTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		err := g.attempt(ctx, call)
		if err == nil {
			return nil
		}
		err = fmt.Errorf("%s: %w", what, err)
		if status.Code(unwrapStatus(err)) == codes.Unimplemented {
			return fmt.Errorf("the broker does not support consumer groups: %w", err)
		}
		if retry, _ := coordinatorRetriable(err); !retry || ctx.Err() != nil || isNoBroker(err) {
			return err
		}
		if sleepCtx(ctx, initBackoff(attempt)) != nil {
			return err
		}
	}
}

// commitTopics builds the topics of an OffsetCommit or TxnOffsetCommit,
// topics and partitions sorted.
func commitTopics(offsets map[TopicPartition]int64) []*sluicev1.OffsetCommitTopic {
	tps := make([]TopicPartition, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	sortPartitions(tps)
	var out []*sluicev1.OffsetCommitTopic
	for _, tp := range tps {
		if len(out) == 0 || out[len(out)-1].Name != tp.Topic {
			out = append(out, &sluicev1.OffsetCommitTopic{Name: tp.Topic})
		}
		t := out[len(out)-1]
		t.Partitions = append(t.Partitions, &sluicev1.OffsetCommitPartition{Partition: tp.Partition, CommittedOffset: offsets[tp], CommittedLeaderEpoch: -1})
	}
	return out
}

// commitError returns the request-level error of an OffsetCommit or
// TxnOffsetCommit answer, else the first partition error (naming the
// partition), else nil.
func commitError(code sluicev1.ErrorCode, msg string, topics []*sluicev1.OffsetCommitTopicResponse) error {
	if err := codeError(code, msg); err != nil {
		return err
	}
	for _, t := range topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != sluicev1.ErrorCode_NONE {
				return &errs.Error{Code: p.ErrorCode, Message: fmt.Sprintf("topic %q partition %d: %s", t.Name, p.Partition, p.ErrorMessage)}
			}
		}
	}
	return nil
}

// commitOffsets sends one OffsetCommit (with retries, see call).
func (g *groupCoordinator) commitOffsets(ctx context.Context, memberID string, epoch int32, offsets map[TopicPartition]int64) error {
	for tp, off := range offsets {
		if off < 0 {
			return fmt.Errorf("sluice: commit %s: offset %d is negative", tp, off)
		}
	}
	req := &sluicev1.OffsetCommitRequest{GroupId: g.group, MemberId: memberID, MemberEpoch: epoch, Topics: commitTopics(offsets)}
	return g.call(ctx, "offset commit", func(ctx context.Context, cc *grpc.ClientConn) error {
		resp, err := sluicev1.NewGroupsClient(cc).OffsetCommit(ctx, req)
		if err != nil {
			return err
		}
		return commitError(resp.ErrorCode, resp.ErrorMessage, resp.Topics)
	})
}

// CommittedOffset is a group's committed offset for one partition.
type CommittedOffset struct {
	// Offset is the next offset to consume; -1: none committed.
	Offset      int64
	LeaderEpoch int32
	Metadata    string
	// CommitTime is when the coordinator stored it (zero if unknown).
	CommitTime time.Time
}

// fetchOffsets sends one OffsetFetch (with retries, see call:
// UNSTABLE_OFFSET_COMMIT is retried) for parts (none: every partition the
// group has an offset for).
func (g *groupCoordinator) fetchOffsets(ctx context.Context, memberID string, epoch int32, requireStable bool, parts []TopicPartition) (map[TopicPartition]CommittedOffset, error) {
	req := &sluicev1.OffsetFetchRequest{GroupId: g.group, RequireStable: requireStable, MemberId: memberID, MemberEpoch: epoch}
	sorted := append([]TopicPartition(nil), parts...)
	sortPartitions(sorted)
	for _, tp := range sorted {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Name != tp.Topic {
			req.Topics = append(req.Topics, &sluicev1.OffsetFetchTopic{Name: tp.Topic})
		}
		t := req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, tp.Partition)
	}
	var out map[TopicPartition]CommittedOffset
	err := g.call(ctx, "offset fetch", func(ctx context.Context, cc *grpc.ClientConn) error {
		resp, err := sluicev1.NewGroupsClient(cc).OffsetFetch(ctx, req)
		if err != nil {
			return err
		}
		if err := codeError(resp.ErrorCode, resp.ErrorMessage); err != nil {
			return err
		}
		out = map[TopicPartition]CommittedOffset{}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != sluicev1.ErrorCode_NONE {
					return &errs.Error{Code: p.ErrorCode, Message: fmt.Sprintf("topic %q partition %d: %s", t.Name, p.Partition, p.ErrorMessage)}
				}
				co := CommittedOffset{Offset: p.CommittedOffset, LeaderEpoch: p.CommittedLeaderEpoch, Metadata: p.CommittedMetadata}
				if p.CommitTimeMs >= 0 && p.CommittedOffset >= 0 {
					co.CommitTime = time.UnixMilli(p.CommitTimeMs)
				}
				out[TopicPartition{Topic: t.Name, Partition: p.Partition}] = co
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
