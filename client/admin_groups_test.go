package client

import (
	"fmt"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// ListGroups merges every broker's groups, sorted; DescribeGroups and
// DeleteGroups go to each group's coordinator.
func TestAdminListDescribeDeleteGroups(t *testing.T) {
	f := startFakeCluster(t, map[string]int{"t": 1}, 2)
	f.mu.Lock()
	f.txn.owner = map[string]int32{"a": 2, "b": 1, "c": 2}
	f.grp.listed = []*sluicev1.ListedGroup{{GroupId: "c", State: "Stable", Members: 2}, {GroupId: "a", State: "Empty"}, {GroupId: "b", State: "Reconciling", Members: 1}}
	f.grp.described = map[string]*sluicev1.DescribedGroup{"c": {GroupId: "c", State: "Stable", GroupEpoch: 3, CoordinatorId: 2}}
	f.mu.Unlock()
	c, err := New([]string{f.addr})
	mustOK(t, "New", err)
	defer c.Close()
	ctx := ctxT(t)
	ls, err := c.ListGroups(ctx)
	mustOK(t, "ListGroups", err)
	var got []string
	for _, l := range ls {
		got = append(got, fmt.Sprintf("%s=%s@%d", l.GroupId, l.State, l.CoordinatorId))
	}
	if fmt.Sprint(got) != "[a=Empty@2 b=Reconciling@1 c=Stable@2]" {
		t.Errorf("listing %v", got)
	}
	ds, err := c.DescribeGroups(ctx, "c", "zz")
	mustOK(t, "DescribeGroups", err)
	if len(ds) != 2 || ds[0].State != "Stable" || ds[0].GroupEpoch != 3 || ds[1].State != "Dead" {
		t.Errorf("describe %v", ds)
	}
	res, err := c.DeleteGroups(ctx, "a")
	mustOK(t, "DeleteGroups", err)
	if res["a"] != nil {
		t.Errorf("delete a: %v", res["a"])
	}
	f.mu.Lock()
	deleted := fmt.Sprint(f.grp.deleted)
	f.mu.Unlock()
	if deleted != "[a]" {
		t.Errorf("deleted %s", deleted)
	}
}

// Offsets committed from outside the membership carry member epoch -1
// and an empty member id; the coordinator refuses them while members
// remain. FetchOffsets and GroupLag read them back, the lag measured to
// the last stable offset.
func TestAdminCommitFetchOffsetsAndLag(t *testing.T) {
	f := startFake(t, map[string]int{"t": 2})
	produceN(t, f, "t", []int32{0, 1}, 6)
	c, err := New([]string{f.addr})
	mustOK(t, "New", err)
	defer c.Close()
	ctx := ctxT(t)
	mustOK(t, "CommitOffsets", c.CommitOffsets(ctx, "g", map[TopicPartition]int64{{Topic: "t", Partition: 0}: 4}))
	f.mu.Lock()
	r := f.grp.commitReqs[0]
	f.grp.members = map[string]*fakeMember{"m": {epoch: 1}}
	f.mu.Unlock()
	if r.MemberEpoch != -1 || r.MemberId != "" || r.GroupId != "g" {
		t.Errorf("commit request %v", r)
	}
	if err := c.CommitOffsets(ctx, "g", map[TopicPartition]int64{{Topic: "t", Partition: 0}: 1}); errs.Code(err) != sluicev1.ErrorCode_UNKNOWN_MEMBER_ID {
		t.Errorf("commit with members: %v", err)
	}
	offs, err := c.FetchOffsets(ctx, "g", "t")
	mustOK(t, "FetchOffsets", err)
	if len(offs) != 1 || offs[TopicPartition{Topic: "t", Partition: 0}].Offset != 4 {
		t.Errorf("offsets %v", offs)
	}
	lag, err := c.GroupLag(ctx, "g", ReadCommitted, TopicPartition{Topic: "t", Partition: 1})
	mustOK(t, "GroupLag", err)
	if len(lag) != 2 || lag[0].Committed != 4 || lag[0].LastStableOffset != 6 || lag[0].HighWatermark != 6 || lag[0].Lag != 2 ||
		lag[1].Committed != -1 || lag[1].Lag != -1 {
		t.Errorf("lag %+v", lag)
	}
}
