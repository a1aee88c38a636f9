package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A tls+scram+acl run (SecurityTLSSCRAMACL): every node runs
// --authorizer acl with User:chaos-admin, the harness's client
// certificate, the only super user. The harness's own admin calls (topic
// creation, metadata and watermarks, coordinators for the phase faults,
// the per-node samplers) are made as chaos-admin; the workload's clients
// (producers, consumers, transactional producers, copier members, the
// final reader, the copier's committed positions) authenticate with SCRAM
// as User:chaos, which gets exactly the ACLs below (docs/security.md,
// "What each request needs"), and any denial fails the run.

// workloadAcls are the ACLs User:chaos needs for the workload wc:
//
//   - READ and WRITE on each of its topics (literal): the idempotent and
//     transactional producers and the copier write them (Produce,
//     InitProducerId's "WRITE on any topic" instead of IDEMPOTENT_WRITE on
//     the cluster), the consumers, copiers and final reader read them
//     (Fetch, OffsetCommit/TxnOffsetCommit); both imply the DESCRIBE of
//     Metadata and ListOffsets;
//   - WRITE on the transactional ids (chaos-txn-N: prefixed; the single
//     copier's chaos-copier literal, the group copier's chaos-copier-N
//     prefixed): InitProducerId, Produce, EndTxn, TxnOffsetCommit, and the
//     DESCRIBE of FindCoordinator;
//   - READ on the copier group (chaos-copiers) with copier members:
//     ConsumerGroupHeartbeat, TxnOffsetCommit, and the DESCRIBE of
//     FindCoordinator and OffsetFetch.
//
// The Kafka-client workload, through the Kafka door (same authorizer,
// same operations as Kafka's), adds:
//
//   - its topics (Topic-kafka, ..., Topic-kafka-out, Topic-rdk-out), in
//     Topics like the others, READ and WRITE as above (its consumer reads
//     every workload topic: Fetch, ListOffsets, OffsetForLeaderEpoch);
//   - WRITE on the Kafka transactional producers' ids (chaos-kafka-txn-N:
//     prefixed), the Kafka copier's (chaos-kafka-copier-N: prefixed) and
//     the librdkafka copier's (chaos-rdk-N: prefixed): InitProducerId,
//     Produce, EndTxn, TxnOffsetCommit, with transaction version 1 (the
//     librdkafka copier) AddPartitionsToTxn and AddOffsetsToTxn too, and
//     the DESCRIBE of FindCoordinator;
//   - READ on the Kafka copier's group (chaos-kafka-copiers) and on the
//     librdkafka copier's (chaos-rdk): ConsumerGroupHeartbeat or
//     JoinGroup, SyncGroup, Heartbeat, LeaveGroup (the classic protocol),
//     OffsetCommit/TxnOffsetCommit, AddOffsetsToTxn, and the DESCRIBE of
//     FindCoordinator and OffsetFetch (the harness reads both groups'
//     offsets as User:chaos too).
//
// None of the prefixes covers another's ids (chaos-txn- is not a prefix
// of chaos-kafka-txn-N). Nothing on the cluster: no workload client
// creates a topic or calls an admin RPC (the harness does, as
// chaos-admin).
func workloadAcls(wc WorkloadConfig) []*sluicev1.AclBinding {
	allow := func(rt sluicev1.ResourceType, name string, pt sluicev1.PatternType, op sluicev1.AclOperation) *sluicev1.AclBinding {
		return &sluicev1.AclBinding{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: "User:" + chaosScramUser,
			Host: "*", Operation: op, Permission: sluicev1.AclPermission_ACL_PERMISSION_ALLOW}
	}
	const (
		topic   = sluicev1.ResourceType_RESOURCE_TYPE_TOPIC
		txnID   = sluicev1.ResourceType_RESOURCE_TYPE_TRANSACTIONAL_ID
		group   = sluicev1.ResourceType_RESOURCE_TYPE_GROUP
		literal = sluicev1.PatternType_PATTERN_TYPE_LITERAL
		prefix  = sluicev1.PatternType_PATTERN_TYPE_PREFIXED
		read    = sluicev1.AclOperation_ACL_OPERATION_READ
		write   = sluicev1.AclOperation_ACL_OPERATION_WRITE
	)
	var out []*sluicev1.AclBinding
	for _, t := range wc.Topics() {
		out = append(out, allow(topic, t, literal, read), allow(topic, t, literal, write))
	}
	if wc.TxnProducers > 0 {
		out = append(out, allow(txnID, "chaos-txn-", prefix, write))
	}
	if wc.Copier {
		if wc.CopierMembers > 0 {
			out = append(out, allow(txnID, copierID+"-", prefix, write), allow(group, copierGroupID, literal, read))
		} else {
			out = append(out, allow(txnID, copierID, literal, write))
		}
	}
	if wc.KafkaTxnProducers > 0 {
		out = append(out, allow(txnID, kafkaTxnID+"-", prefix, write))
	}
	if wc.kafkaCopier() {
		out = append(out, allow(txnID, kafkaCopierTxnID+"-", prefix, write), allow(group, kafkaCopierGroup, literal, read))
	}
	if wc.rdkCopier() {
		out = append(out, allow(txnID, rdkCopierTxnID+"-", prefix, write), allow(group, rdkCopierGroup, literal, read))
	}
	return out
}

// createAcls creates the workload's ACLs as the harness (r.admin:
// chaos-admin), then waits until every node holds them all (each node's
// DescribeAcls answers from its own metadata), so that no workload call
// meets a node that does not enforce them yet.
func (r *runner) createAcls() error {
	acls := workloadAcls(r.cfg.Workload)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		res, err := r.admin.CreateAcls(ctx, acls)
		if err == nil {
			for i, e := range res {
				if e != nil {
					return fmt.Errorf("chaos: create ACL %v: %w", acls[i], e)
				}
			}
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("chaos: create ACLs: %w", err)
		}
		r.log.Info("ACLs not created yet", "err", err)
		time.Sleep(500 * time.Millisecond) // retry pacing within ctx (the controller may still be electing)
	}
	for _, id := range r.cluster.IDs() {
		for {
			resp, err := r.nodeAdmins[id].DescribeAcls(ctx, &sluicev1.DescribeAclsRequest{Filter: &sluicev1.AclBindingFilter{Principal: "User:" + chaosScramUser}})
			if err == nil && resp.GetErrorCode() == sluicev1.ErrorCode_NONE && len(resp.GetAcls()) == len(acls) {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("chaos: node %d does not hold the %d ACLs (%d, %v)", id, len(acls), len(resp.GetAcls()), err)
			}
			time.Sleep(100 * time.Millisecond) // retry pacing within ctx (the metadata stream: well under a second)
		}
	}
	var names []string
	for _, a := range acls {
		names = append(names, fmt.Sprintf("%s %s:%s:%s", strings.TrimPrefix(a.Operation.String(), "ACL_OPERATION_"),
			strings.TrimPrefix(a.ResourceType.String(), "RESOURCE_TYPE_"), strings.TrimPrefix(a.PatternType.String(), "PATTERN_TYPE_"), a.ResourceName))
	}
	r.log.Info("ACLs created and held by every node", "principal", "User:"+chaosScramUser, "acls", strings.Join(names, ", "))
	return nil
}

// denialLines returns the nodes' "authorization denied" log lines (every
// incarnation's: a restart resets the counter, not the log), up to n of
// them, and how many there are.
func (r *runner) denialLines(n int) ([]string, int) {
	var out []string
	total := 0
	for _, node := range r.cluster.Nodes {
		data, err := os.ReadFile(node.LogPath)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "authorization denied") {
				total++
				if len(out) < n {
					out = append(out, fmt.Sprintf("node %d: %s", node.ID, l))
				}
			}
		}
	}
	return out, total
}

// aclProbeTopic is a topic the harness creates and User:chaos has no ACL
// for: every node must leave it out of the user's topic listing.
const aclProbeTopic = "acl-probe"

// checkAuthorizing checks that every node authorizes, without a denial
// (which would fail the run): a listing of every topic (Metadata with no
// name) leaves out quietly what the caller may not describe, so User:chaos
// must see each workload topic and not aclProbeTopic, which chaos-admin
// creates first.
func (r *runner) checkAuthorizing() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		err := r.admin.CreateTopic(ctx, aclProbeTopic, 1, 3, nil)
		var e *errs.Error
		if err == nil || errors.As(err, &e) && e.Code == sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("chaos: create topic %s: %w", aclProbeTopic, err)
		}
		time.Sleep(500 * time.Millisecond) // retry pacing within ctx
	}
	for _, id := range r.cluster.IDs() {
		var last string
		for {
			seen, err := r.topicsListed(ctx, id)
			want := append([]string{}, r.cfg.Workload.Topics()...)
			if err == nil && !slices.Contains(seen, aclProbeTopic) && !slices.ContainsFunc(want, func(t string) bool { return !slices.Contains(seen, t) }) {
				if !r.adminSees(ctx, id) {
					return fmt.Errorf("chaos: node %d: chaos-admin does not see topic %s", id, aclProbeTopic)
				}
				r.log.Info("node authorizes", "node", id, "user_chaos_sees", seen)
				break
			}
			last = fmt.Sprintf("User:%s sees %v (%v)", chaosScramUser, seen, err)
			if ctx.Err() != nil {
				return fmt.Errorf("chaos: node %d does not authorize as it should: %s", id, last)
			}
			time.Sleep(200 * time.Millisecond) // retry pacing within ctx (topics and ACLs reach every node within moments)
		}
	}
	return nil
}

// topicsListed is the topics node id lists to User:chaos.
func (r *runner) topicsListed(ctx context.Context, id int32) ([]string, error) {
	cl, err := r.cfg.Workload.newClient(r.cluster.Addrs(id), client.WithRequestTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	md, err := cl.Metadata(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range md.GetTopics() {
		out = append(out, t.GetName())
	}
	return out, nil
}

// adminSees reports whether node id lists aclProbeTopic to chaos-admin.
func (r *runner) adminSees(ctx context.Context, id int32) bool {
	md, err := r.nodeAdmins[id].Metadata(ctx, &sluicev1.MetadataRequest{})
	if err != nil {
		return false
	}
	for _, t := range md.GetTopics() {
		if t.GetName() == aclProbeTopic {
			return true
		}
	}
	return false
}
