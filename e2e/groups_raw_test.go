package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Consumer-group offsets driven with nothing but the generated gRPC stubs,
// as a client in any language would (docs/groups.md): FindCoordinator with
// a group key, OffsetCommit / OffsetFetch, and TxnOffsetCommit inside a
// transaction (KIP-447).

// groupCoordinator finds the coordinator of group (retrying retriable
// answers for up to 60 s) and returns its address.
func (r *rawTxn) groupCoordinator(group string) string {
	r.t.Helper()
	var addr string
	r.c.eventually(60*time.Second, "coordinator of group "+group, func() error {
		ctx, cancel := rpcCtx()
		defer cancel()
		resp, err := sluicev1.NewTransactionsClient(r.conn(r.anyAddr())).FindCoordinator(ctx, &sluicev1.FindCoordinatorRequest{
			KeyType: sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP, Keys: []string{group}})
		if err != nil {
			return err
		}
		co := resp.Coordinators[0]
		if co.ErrorCode != sluicev1.ErrorCode_NONE {
			if !retriable(co.ErrorCode) {
				r.t.Fatalf("FindCoordinator group %s: %v %s", group, co.ErrorCode, co.ErrorMessage)
			}
			return fmt.Errorf("%v: %s", co.ErrorCode, co.ErrorMessage)
		}
		addr = co.Address
		return nil
	})
	return addr
}

// groupsCall runs call against group's coordinator until it answers a
// non-retriable code, and returns that code.
func (r *rawTxn) groupsCall(group string, call func(cl sluicev1.GroupsClient) (sluicev1.ErrorCode, string, error)) sluicev1.ErrorCode {
	r.t.Helper()
	var code sluicev1.ErrorCode
	r.c.eventually(60*time.Second, "group request to "+group, func() error {
		c, msg, err := call(sluicev1.NewGroupsClient(r.conn(r.groupCoordinator(group))))
		if err != nil {
			return err
		}
		if retriable(c) && c != sluicev1.ErrorCode_UNSTABLE_OFFSET_COMMIT {
			return fmt.Errorf("%v: %s", c, msg)
		}
		code = c
		return nil
	})
	return code
}

func offsetTopics(topic string, partition int32, offset int64, metadata string) []*sluicev1.OffsetCommitTopic {
	return []*sluicev1.OffsetCommitTopic{{Name: topic, Partitions: []*sluicev1.OffsetCommitPartition{
		{Partition: partition, CommittedOffset: offset, CommittedLeaderEpoch: -1, CommittedMetadata: metadata}}}}
}

// commitOffset commits one offset from outside the membership (epoch -1)
// and returns the partition's code.
func (r *rawTxn) commitOffset(group, memberID string, memberEpoch int32, topic string, partition int32, offset int64, metadata string) sluicev1.ErrorCode {
	r.t.Helper()
	return r.groupsCall(group, func(cl sluicev1.GroupsClient) (sluicev1.ErrorCode, string, error) {
		ctx, cancel := rpcCtx()
		defer cancel()
		resp, err := cl.OffsetCommit(ctx, &sluicev1.OffsetCommitRequest{GroupId: group, MemberId: memberID, MemberEpoch: memberEpoch,
			Topics: offsetTopics(topic, partition, offset, metadata)})
		if err != nil {
			return 0, "", err
		}
		if resp.ErrorCode != sluicev1.ErrorCode_NONE {
			return resp.ErrorCode, resp.ErrorMessage, nil
		}
		p := resp.Topics[0].Partitions[0]
		return p.ErrorCode, p.ErrorMessage, nil
	})
}

// fetchOffset returns the group's committed offset of topic/partition and
// the partition's code.
func (r *rawTxn) fetchOffset(group, topic string, partition int32, requireStable bool) (int64, sluicev1.ErrorCode) {
	r.t.Helper()
	var off int64 = -2
	code := r.groupsCall(group, func(cl sluicev1.GroupsClient) (sluicev1.ErrorCode, string, error) {
		ctx, cancel := rpcCtx()
		defer cancel()
		resp, err := cl.OffsetFetch(ctx, &sluicev1.OffsetFetchRequest{GroupId: group, RequireStable: requireStable, MemberEpoch: -1,
			Topics: []*sluicev1.OffsetFetchTopic{{Name: topic, Partitions: []int32{partition}}}})
		if err != nil {
			return 0, "", err
		}
		if resp.ErrorCode != sluicev1.ErrorCode_NONE {
			return resp.ErrorCode, resp.ErrorMessage, nil
		}
		p := resp.Topics[0].Partitions[0]
		off = p.CommittedOffset
		return p.ErrorCode, p.ErrorMessage, nil
	})
	return off, code
}

// txnCommitOffset commits one offset inside the transaction of id at p.
func (r *rawTxn) txnCommitOffset(id string, p pidEpoch, group, topic string, partition int32, offset int64) sluicev1.ErrorCode {
	r.t.Helper()
	return r.groupsCall(group, func(cl sluicev1.GroupsClient) (sluicev1.ErrorCode, string, error) {
		ctx, cancel := rpcCtx()
		defer cancel()
		resp, err := cl.TxnOffsetCommit(ctx, &sluicev1.TxnOffsetCommitRequest{TransactionalId: id, GroupId: group,
			ProducerId: p.ID, ProducerEpoch: p.Epoch, MemberEpoch: -1, Topics: offsetTopics(topic, partition, offset, "")})
		if err != nil {
			return 0, "", err
		}
		if resp.ErrorCode != sluicev1.ErrorCode_NONE {
			return resp.ErrorCode, resp.ErrorMessage, nil
		}
		pr := resp.Topics[0].Partitions[0]
		return pr.ErrorCode, pr.ErrorMessage, nil
	})
}

// waitOffset waits until the group's stable committed offset is want.
func (r *rawTxn) waitOffset(group, topic string, partition int32, want int64) {
	r.t.Helper()
	r.c.eventually(60*time.Second, fmt.Sprintf("group %s offset %s-%d = %d", group, topic, partition, want), func() error {
		off, code := r.fetchOffset(group, topic, partition, true)
		if code != sluicev1.ErrorCode_NONE || off != want {
			return fmt.Errorf("offset %d (%v)", off, code)
		}
		return nil
	})
}

// TestGroupOffsetsCommitWithTheirTransaction: KIP-447 on three real
// nodes. Offsets committed inside a transaction are invisible (and
// UNSTABLE_OFFSET_COMMIT to a require_stable fetch) until the transaction
// commits, dropped when it aborts, survive the group coordinator's SIGKILL
// while pending, and a fenced producer epoch cannot commit offsets. Plain
// commits, bad input and group deletion are checked on the way.
func TestGroupOffsetsCommitWithTheirTransaction(t *testing.T) {
	c := startTestCluster(t, 3, "--offsets-topic-partitions", "3", "--transaction-state-partitions", "3")
	r := newRawTxn(t, c)
	const group, in = "copier-group", "input"

	// Plain commits from outside any membership.
	if code := r.commitOffset(group, "", -1, in, 0, 5, "m"); code != sluicev1.ErrorCode_NONE {
		t.Fatalf("plain commit: %v", code)
	}
	if off, code := r.fetchOffset(group, in, 0, true); off != 5 || code != sluicev1.ErrorCode_NONE {
		t.Fatalf("fetch after plain commit: %d %v", off, code)
	}
	if off, code := r.fetchOffset(group, in, 9, true); off != -1 || code != sluicev1.ErrorCode_NONE {
		t.Fatalf("a partition never committed: %d %v, want -1", off, code)
	}
	for _, bad := range []struct {
		name     string
		member   string
		epoch    int32
		offset   int64
		metadata string
		want     sluicev1.ErrorCode
	}{
		{"metadata too large", "", -1, 1, strings.Repeat("x", 4097), sluicev1.ErrorCode_OFFSET_METADATA_TOO_LARGE},
		{"negative offset", "", -1, -3, "", sluicev1.ErrorCode_INVALID_REQUEST},
		{"unknown member", "nobody", 4, 1, "", sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
	} {
		if code := r.commitOffset(group, bad.member, bad.epoch, in, 0, bad.offset, bad.metadata); code != bad.want {
			t.Errorf("%s: %v, want %v", bad.name, code, bad.want)
		}
	}
	if off, _ := r.fetchOffset(group, in, 0, true); off != 5 {
		t.Fatalf("a refused commit changed the offset to %d", off)
	}

	// Transaction 1 commits its offsets.
	const id = "copier-1"
	p, code, _ := r.initPID(id, 60000)
	if code != sluicev1.ErrorCode_NONE {
		t.Fatalf("InitProducerId: %v", code)
	}
	if code := r.txnCommitOffset(id, p, group, in, 0, 10); code != sluicev1.ErrorCode_NONE {
		t.Fatalf("TxnOffsetCommit: %v", code)
	}
	if _, code := r.fetchOffset(group, in, 0, true); code != sluicev1.ErrorCode_UNSTABLE_OFFSET_COMMIT {
		t.Fatalf("require_stable fetch during the transaction: %v, want UNSTABLE_OFFSET_COMMIT", code)
	}
	if off, _ := r.fetchOffset(group, in, 0, false); off != 5 {
		t.Fatalf("an open transaction's offset is visible: %d", off)
	}
	p, code = r.endTxn(id, p, true)
	if code != sluicev1.ErrorCode_NONE {
		t.Fatalf("EndTxn commit: %v", code)
	}
	r.waitOffset(group, in, 0, 10)
	// The coordinator reports the group in its metrics (the input topic
	// does not exist, so there is no lag series for it).
	coordAddr := r.groupCoordinator(group)
	for _, nid := range c.ids() {
		if c.addrs([]int32{nid})[0] != coordAddr {
			continue
		}
		resp, err := http.Get("http://" + c.node(nid).HTTP + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `sluice_group_coordinator_groups{partition=`) || !strings.Contains(string(body), `state="Empty"} 1`) {
			t.Errorf("the coordinator's metrics do not show the empty group:\n%s", grepLines(string(body), "sluice_group"))
		}
	}

	// Transaction 2 aborts: its offsets are dropped.
	if code := r.txnCommitOffset(id, p, group, in, 0, 20); code != sluicev1.ErrorCode_NONE {
		t.Fatalf("TxnOffsetCommit 2: %v", code)
	}
	old := p
	p, code = r.endTxn(id, p, false)
	if code != sluicev1.ErrorCode_NONE {
		t.Fatalf("EndTxn abort: %v", code)
	}
	r.waitOffset(group, in, 0, 10)

	// A fenced epoch cannot commit offsets.
	if code := r.txnCommitOffset(id, old, group, in, 0, 99); code == sluicev1.ErrorCode_NONE {
		t.Fatal("a stale producer epoch committed offsets")
	}

	// Transaction 3: the group coordinator is killed while its offsets
	// are pending; the next coordinator loads them pending and the commit
	// applies them.
	if code := r.txnCommitOffset(id, p, group, in, 0, 30); code != sluicev1.ErrorCode_NONE {
		t.Fatalf("TxnOffsetCommit 3: %v", code)
	}
	victim := r.groupCoordinator(group)
	var victimID int32 = -1
	for _, nid := range c.ids() {
		if c.addrs([]int32{nid})[0] == victim {
			victimID = nid
		}
	}
	if victimID < 0 {
		t.Fatalf("coordinator %s is not a node of the cluster", victim)
	}
	c.kill(victimID)
	c.eventually(60*time.Second, "a new group coordinator", func() error {
		if a := r.groupCoordinator(group); a == victim {
			return fmt.Errorf("still %s", a)
		}
		return nil
	})
	if _, code := r.fetchOffset(group, in, 0, true); code != sluicev1.ErrorCode_UNSTABLE_OFFSET_COMMIT {
		t.Fatalf("after failover the pending offset is not pending: %v", code)
	}
	if _, code := r.endTxn(id, p, true); code != sluicev1.ErrorCode_NONE {
		t.Fatalf("EndTxn commit 3: %v", code)
	}
	r.waitOffset(group, in, 0, 30)
	c.restart(victimID)

	// Deleting the (member-less) group deletes its offsets.
	code = r.groupsCall(group, func(cl sluicev1.GroupsClient) (sluicev1.ErrorCode, string, error) {
		ctx, cancel := rpcCtx()
		defer cancel()
		resp, err := cl.DeleteGroups(ctx, &sluicev1.DeleteGroupsRequest{GroupIds: []string{group}})
		if err != nil {
			return 0, "", err
		}
		return resp.Results[0].ErrorCode, resp.Results[0].ErrorMessage, nil
	})
	if code != sluicev1.ErrorCode_NONE {
		t.Fatalf("DeleteGroups: %v", code)
	}
	if off, code := r.fetchOffset(group, in, 0, true); off != -1 || code != sluicev1.ErrorCode_NONE {
		t.Fatalf("after delete: %d %v, want -1", off, code)
	}
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
