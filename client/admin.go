package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Metadata asks the cluster about topics (all topics when none are named)
// and refreshes the cache from the answer. Per-topic errors stay in the
// response (TopicMetadata.error_code); only request failures are returned.
func (c *Client) Metadata(ctx context.Context, topics ...string) (*sluicev1.MetadataResponse, error) {
	var resp *sluicev1.MetadataResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).Metadata(ctx, &sluicev1.MetadataRequest{Topics: topics})
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	c.storeMetadata(resp)
	return resp, nil
}

// DescribeCluster asks any broker for the controller quorum, the registered
// brokers and partition health, as that broker sees them (node_id and
// metadata_offset in the response say which broker and how current). A
// broker with no cluster metadata yet (metadata_offset 0) counts as
// LEADER_NOT_AVAILABLE and the next one is asked, under invokeAny's retry
// policy; a broker that predates the RPC answers codes.Unimplemented,
// returned wrapped.
func (c *Client) DescribeCluster(ctx context.Context, opts ...DescribeClusterOption) (*sluicev1.DescribeClusterResponse, error) {
	req := &sluicev1.DescribeClusterRequest{}
	for _, o := range opts {
		o(req)
	}
	var resp *sluicev1.DescribeClusterResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).DescribeCluster(ctx, req)
		if err == nil && r.MetadataOffset == 0 {
			// A broker starting up answers an empty cluster: ask another.
			return errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "broker %d has no cluster metadata yet (starting up)", r.NodeId)
		}
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("describe cluster: %w", err)
	}
	return resp, nil
}

// adminTimeoutMs is the timeout_ms sent with an admin request attempt
// whose context is ctx: the time the attempt has left (the request timeout
// on a first attempt; less after a retry at another broker) less a margin
// of a fifth of it, and at least a second (at most half of it), so the
// broker's answer (e.g. NOT_CONTROLLER when no controller quorum is up)
// arrives before the client gives up on the call, even on a loaded
// machine. It is at least 1 ms: 0 would mean the broker's default.
func (c *Client) adminTimeoutMs(ctx context.Context) int32 {
	rt := c.cfg.requestTimeout
	if d, ok := ctx.Deadline(); ok {
		rt = min(rt, time.Until(d))
	}
	margin := max(rt/5, min(rt/2, time.Second))
	return int32(max((rt - margin).Milliseconds(), 1))
}

// CreateTopic creates a topic. A replicationFactor of 0 takes the
// cluster's default (sluiced --default-replication-factor), and configs
// without min.insync.replicas the cluster's default for it. A topic-level
// failure (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, ...) is returned as
// an *errs.Error.
//
// A cluster that is starting, with no broker registered and unfenced yet,
// answers INVALID_REPLICATION_FACTOR ("larger than the 0 live brokers"):
// that answer is retried with backoff until the request timeout, as long
// as the cluster's metadata lists no live broker, and once more when it
// lists some (a broker registered between the refusal and the look).
func (c *Client) CreateTopic(ctx context.Context, name string, partitions, replicationFactor int32, configs map[string]string) error {
	_, err := c.CreateTopicResult(ctx, name, partitions, replicationFactor, configs)
	return err
}

// CreateTopicResult is CreateTopic returning the controller's answer for
// the topic: the partition count and replication factor it was created
// with, its effective configs (min.insync.replicas among them) and a note
// when a cluster default was adjusted for it.
func (c *Client) CreateTopicResult(ctx context.Context, name string, partitions, replicationFactor int32, configs map[string]string) (*sluicev1.CreatableTopicResult, error) {
	deadline := time.Now().Add(c.cfg.requestTimeout)
	sawBrokers := false
	for n := 0; ; n++ {
		r, err := c.createTopic(ctx, name, partitions, replicationFactor, configs)
		if errs.Code(err) != sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR {
			return r, err
		}
		md, merr := c.Metadata(ctx)
		if merr != nil {
			return nil, err
		}
		if len(md.Brokers) > 0 {
			if sawBrokers {
				return nil, err // a real refusal: there are brokers, just too few
			}
			// The broker may have registered between the refusal and
			// this look: ask once more, at once.
			sawBrokers = true
			continue
		}
		pause := retryBackoff(n)
		if time.Until(deadline) < pause {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
	}
}

func (c *Client) createTopic(ctx context.Context, name string, partitions, replicationFactor int32, configs map[string]string) (*sluicev1.CreatableTopicResult, error) {
	var resp *sluicev1.CreateTopicsResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).CreateTopics(ctx, &sluicev1.CreateTopicsRequest{
			Topics:    []*sluicev1.CreatableTopic{{Name: name, NumPartitions: partitions, ReplicationFactor: replicationFactor, Configs: configs}},
			TimeoutMs: c.adminTimeoutMs(ctx),
		})
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create topic %q: %w", name, err)
	}
	c.forget(name)
	for _, t := range resp.Topics {
		if t.Name == name {
			if err := codeError(t.ErrorCode, t.ErrorMessage); err != nil {
				return nil, err
			}
			return t, nil
		}
	}
	return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "create topic %q: no result in the response", name)
}

// DeleteTopic deletes a topic. A topic-level failure is returned as an
// *errs.Error.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	var resp *sluicev1.DeleteTopicsResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).DeleteTopics(ctx, &sluicev1.DeleteTopicsRequest{
			Names: []string{name}, TimeoutMs: c.adminTimeoutMs(ctx),
		})
		resp = r
		return err
	})
	if err != nil {
		return fmt.Errorf("delete topic %q: %w", name, err)
	}
	c.forget(name)
	for _, t := range resp.Topics {
		if t.Name == name {
			return codeError(t.ErrorCode, t.ErrorMessage)
		}
	}
	return errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "delete topic %q: no result in the response", name)
}

// AlterPartitionReassignments starts reassigning topic/partition to the
// replica set replicas (preference order; the first is the preferred
// leader). It returns once the controller has recorded the reassignment,
// with the partition's replicas, adding and removing replicas at that
// moment; the move itself continues in the background (watch it with
// ListPartitionReassignments or Metadata). A partition-level failure
// (INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION,
// REASSIGNMENT_IN_PROGRESS) is returned as an *errs.Error. Asking again for
// the running target, or for the current assignment, changes nothing.
func (c *Client) AlterPartitionReassignments(ctx context.Context, topic string, partition int32, replicas []int32) (*sluicev1.AlterPartitionReassignmentsResponse, error) {
	var resp *sluicev1.AlterPartitionReassignmentsResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).AlterPartitionReassignments(ctx, &sluicev1.AlterPartitionReassignmentsRequest{
			Topic: topic, Partition: partition, Replicas: replicas, TimeoutMs: c.adminTimeoutMs(ctx),
		})
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reassign %s-%d: %w", topic, partition, err)
	}
	c.forget(topic)
	if err := codeError(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return nil, err
	}
	return resp, nil
}

// ListPartitionReassignments lists the running partition reassignments of
// topics (all topics when none are named), as the answering broker knows
// them.
func (c *Client) ListPartitionReassignments(ctx context.Context, topics ...string) ([]*sluicev1.OngoingPartitionReassignment, error) {
	var resp *sluicev1.ListPartitionReassignmentsResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAdminClient(cc).ListPartitionReassignments(ctx, &sluicev1.ListPartitionReassignmentsRequest{Topics: topics})
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list partition reassignments: %w", err)
	}
	return resp.Reassignments, nil
}

// ListOffsets resolves spec (LATEST, EARLIEST, TIMESTAMP with ts in ms,
// MAX_TIMESTAMP) for one partition at its leader, with read_committed
// isolation. It returns -1 with no error when no record matches a
// timestamp. Per-partition failures are *errs.Error.
func (c *Client) ListOffsets(ctx context.Context, topic string, partition int32, spec sluicev1.OffsetSpec, ts int64) (int64, error) {
	return c.listOffsets(ctx, topic, partition, spec, ts, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED)
}

// Watermarks returns a partition's high watermark and last stable offset
// as its leader answers ListOffsets LATEST under read_uncommitted and
// read_committed. It asks for the last stable offset first, so that
// lso <= hw while the leader stays (both only grow). It tries once, without
// ListOffsets' retries: it is for tools that show the offsets beside other
// state and do without them when the leader does not answer.
func (c *Client) Watermarks(ctx context.Context, topic string, partition int32) (hw, lso int64, err error) {
	lso, err = c.listOffsetsOnce(ctx, topic, partition, sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED)
	if err != nil {
		return -1, -1, err
	}
	hw, err = c.listOffsetsOnce(ctx, topic, partition, sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED)
	if err != nil {
		return -1, -1, err
	}
	return hw, lso, nil
}

func (c *Client) listOffsets(ctx context.Context, topic string, partition int32, spec sluicev1.OffsetSpec, ts int64, iso sluicev1.IsolationLevel) (int64, error) {
	for attempt := 0; ; attempt++ {
		off, err := c.listOffsetsOnce(ctx, topic, partition, spec, ts, iso)
		if err == nil || attempt >= 3 || !isRetriable(err) || errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION && attempt >= 1 {
			return off, err
		}
		if needsMetadata(errs.Code(err)) || isTransportError(err) {
			c.forget(topic) // the leader moved, or may be gone: ask again
		}
		if werr := sleepCtx(ctx, backoffFor(attempt)); werr != nil {
			return -1, err
		}
	}
}

func (c *Client) listOffsetsOnce(ctx context.Context, topic string, partition int32, spec sluicev1.OffsetSpec, ts int64, iso sluicev1.IsolationLevel) (int64, error) {
	addr, _, err := c.leader(ctx, topic, partition)
	if err != nil {
		return -1, err
	}
	cc, err := c.conn(addr)
	if err != nil {
		return -1, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
	defer cancel()
	resp, err := sluicev1.NewLogClient(cc).ListOffsets(rctx, &sluicev1.ListOffsetsRequest{
		IsolationLevel: iso,
		Topics: []*sluicev1.ListOffsetsTopic{{Name: topic, Partitions: []*sluicev1.ListOffsetsPartition{
			{Partition: partition, Spec: spec, Timestamp: ts},
		}}},
	})
	if err != nil {
		return -1, rpcError(err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if t.Name == topic && p.Partition == partition {
				if err := codeError(p.ErrorCode, p.ErrorMessage); err != nil {
					return -1, err
				}
				return p.Offset, nil
			}
		}
	}
	return -1, errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "list offsets: no result for %s/%d", topic, partition)
}

// ElectLeaders makes the preferred replica (the first) the leader of the
// named partitions of topic (none named: all of it; topic "": every
// partition of the cluster) wherever it is live, in the ISR and not
// leading already, and returns the partitions whose leader moved.
func (c *Client) ElectLeaders(ctx context.Context, topic string, partitions ...int32) ([]*sluicev1.ElectedLeader, error) {
	var topics []*sluicev1.TopicPartitions
	if topic != "" {
		topics = []*sluicev1.TopicPartitions{{Name: topic, Partitions: partitions}}
	}
	var resp *sluicev1.ElectLeadersResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		req := &sluicev1.ElectLeadersRequest{Topics: topics, TimeoutMs: c.adminTimeoutMs(ctx)}
		r, err := sluicev1.NewAdminClient(cc).ElectLeaders(ctx, req)
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("elect leaders: %w", err)
	}
	for _, e := range resp.Elected {
		c.forget(e.Topic)
	}
	return resp.Elected, nil
}
