package client

import (
	"context"
	"fmt"
	"sort"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the consumer-group admin calls: list (every broker),
// describe and delete (each group's coordinator), committed offsets read
// and written from outside the membership, and lag.

// ListGroups asks every broker for the groups it coordinates and returns
// the merged listings sorted by group id. states keeps only groups in
// those states (Empty, Assigning, Reconciling, Stable, Dead; none: all).
// Every broker must answer: a broker that fails fails the call (the error
// names it), since a partial list would look complete.
func (c *Client) ListGroups(ctx context.Context, states ...string) ([]*sluicev1.ListedGroup, error) {
	md, err := c.Metadata(ctx)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	req := &sluicev1.ListGroupsRequest{StatesFilter: states}
	var out []*sluicev1.ListedGroup
	err = askEveryBroker(ctx, c, md.Brokers,
		func(ctx context.Context, cc *grpc.ClientConn) (*sluicev1.ListGroupsResponse, sluicev1.ErrorCode, string, error) {
			resp, err := sluicev1.NewGroupsClient(cc).ListGroups(ctx, req)
			return resp, resp.GetErrorCode(), resp.GetErrorMessage(), err
		},
		func(node int32, resp *sluicev1.ListGroupsResponse) error {
			for _, g := range resp.Groups {
				if g.CoordinatorId == 0 {
					g.CoordinatorId = node
				}
			}
			out = append(out, resp.Groups...)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GroupId < out[j].GroupId })
	return out, nil
}

// DescribeGroups describes each group, in the order given, from its
// coordinator (retriable failures retried for up to the request timeout
// per group). A failure for one group is reported in its entry's
// error_code and error_message and does not fail the others; an unknown
// group answers state Dead (or GROUP_ID_NOT_FOUND). The error is for ctx
// ending only.
func (c *Client) DescribeGroups(ctx context.Context, groupIDs ...string) ([]*sluicev1.DescribedGroup, error) {
	out := make([]*sluicev1.DescribedGroup, len(groupIDs))
	for i, id := range groupIDs {
		var got *sluicev1.DescribedGroup
		coord := &groupCoordinator{c: c, group: id}
		err := coord.call(ctx, "describe group", func(ctx context.Context, cc *grpc.ClientConn) error {
			resp, err := sluicev1.NewGroupsClient(cc).DescribeGroups(ctx, &sluicev1.DescribeGroupsRequest{GroupIds: []string{id}})
			if err != nil {
				return err
			}
			for _, g := range resp.Groups {
				if g.GroupId == id {
					got = g
					// NOT_COORDINATOR and the like are retried.
					if retry, _ := coordinatorRetriable(codeError(g.ErrorCode, g.ErrorMessage)); retry {
						return codeError(g.ErrorCode, g.ErrorMessage)
					}
					return nil
				}
			}
			return errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "no answer for the group")
		})
		if ctx.Err() != nil {
			return nil, fmt.Errorf("describe groups: %w", ctx.Err())
		}
		if err != nil {
			got = &sluicev1.DescribedGroup{GroupId: id, ErrorCode: errs.Code(err), ErrorMessage: err.Error()}
		}
		out[i] = got
	}
	return out, nil
}

// DeleteGroups deletes groups and their committed offsets, each at its
// coordinator. The map has one entry per group: nil when deleted, else
// the group's error (NON_EMPTY_GROUP while members remain,
// GROUP_ID_NOT_FOUND) as an *errs.Error. The error is for ctx ending only.
func (c *Client) DeleteGroups(ctx context.Context, groupIDs ...string) (map[string]error, error) {
	out := make(map[string]error, len(groupIDs))
	for _, id := range groupIDs {
		coord := &groupCoordinator{c: c, group: id}
		out[id] = coord.call(ctx, "delete group", func(ctx context.Context, cc *grpc.ClientConn) error {
			resp, err := sluicev1.NewGroupsClient(cc).DeleteGroups(ctx, &sluicev1.DeleteGroupsRequest{GroupIds: []string{id}})
			if err != nil {
				return err
			}
			for _, r := range resp.Results {
				if r.GroupId == id {
					return codeError(r.ErrorCode, r.ErrorMessage)
				}
			}
			return errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "no answer for the group")
		})
		if ctx.Err() != nil {
			return nil, fmt.Errorf("delete groups: %w", ctx.Err())
		}
	}
	return out, nil
}

// FetchOffsets returns a group's committed offsets for the partitions of
// topics (none named: every partition the group has an offset for), read
// from outside the membership (no member check, not require_stable:
// offsets pending in an open transaction are not shown).
func (c *Client) FetchOffsets(ctx context.Context, groupID string, topics ...string) (map[TopicPartition]CommittedOffset, error) {
	coord := &groupCoordinator{c: c, group: groupID}
	all, err := coord.fetchOffsets(ctx, "", -1, false, nil)
	if err != nil {
		return nil, fmt.Errorf("group %q: %w", groupID, err)
	}
	if len(topics) == 0 {
		return all, nil
	}
	keep := map[string]bool{}
	for _, t := range topics {
		keep[t] = true
	}
	for tp := range all {
		if !keep[tp.Topic] {
			delete(all, tp)
		}
	}
	return all, nil
}

// CommitOffsets commits offsets (each the next offset to consume, >= 0)
// for groupID from outside its membership (member epoch -1), as a tool
// resetting offsets does. The coordinator allows it only while the group
// has no members: otherwise the error (an *errs.Error inside) is
// NON_EMPTY_GROUP or UNKNOWN_MEMBER_ID — stop the group's consumers first.
func (c *Client) CommitOffsets(ctx context.Context, groupID string, offsets map[TopicPartition]int64) error {
	coord := &groupCoordinator{c: c, group: groupID}
	if err := coord.commitOffsets(ctx, "", -1, offsets); err != nil {
		return fmt.Errorf("group %q: %w", groupID, err)
	}
	return nil
}

// PartitionLag is how far a group is behind on one partition.
type PartitionLag struct {
	TopicPartition
	// Committed is the group's committed offset; -1: none.
	Committed int64
	// HighWatermark and LastStableOffset are the leader's (ListOffsets
	// LATEST read_uncommitted / read_committed); -1 when it did not
	// answer (Err says why).
	HighWatermark    int64
	LastStableOffset int64
	// Lag is End - Committed, where End is the LastStableOffset for
	// ReadCommitted and the HighWatermark for ReadUncommitted; -1 when
	// either is unknown.
	Lag int64
	Err error
}

// GroupLag returns the lag of a group on every partition it has a
// committed offset for, plus the partitions in also (e.g. assigned ones
// with no commit yet), sorted by topic and partition. isolation says
// which end the lag is measured to: the last stable offset for
// ReadCommitted (what a read_committed consumer can reach), the high
// watermark for ReadUncommitted. A partition whose leader does not answer
// has its Err set; the call fails only if the offsets cannot be fetched.
func (c *Client) GroupLag(ctx context.Context, groupID string, isolation Isolation, also ...TopicPartition) ([]PartitionLag, error) {
	committed, err := c.FetchOffsets(ctx, groupID)
	if err != nil {
		return nil, err
	}
	set := map[TopicPartition]bool{}
	for tp := range committed {
		set[tp] = true
	}
	for _, tp := range also {
		set[tp] = true
	}
	parts := setList(set)
	out := make([]PartitionLag, len(parts))
	for i, tp := range parts {
		l := PartitionLag{TopicPartition: tp, Committed: -1, Lag: -1}
		if co, ok := committed[tp]; ok {
			l.Committed = co.Offset
		}
		l.HighWatermark, l.LastStableOffset, l.Err = c.Watermarks(ctx, tp.Topic, tp.Partition)
		end := l.LastStableOffset
		if isolation == ReadUncommitted {
			end = l.HighWatermark
		}
		if l.Err == nil && l.Committed >= 0 && end >= 0 {
			l.Lag = max(end-l.Committed, 0)
		}
		out[i] = l
	}
	return out, nil
}
