package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

const topicUsage = `usage: sluice topic create NAME --partitions N --replication-factor R [--config k=v]...
       sluice topic list [--prefix P] [--match GLOB] [--exclude-internal]
       sluice topic describe [NAME...] [--prefix P] [--match GLOB] [--exclude-internal]
                             [--under-replicated-partitions | --under-min-isr-partitions |
                              --at-min-isr-partitions | --unavailable-partitions]
       sluice topic delete NAME
       sluice topic reassign NAME --partition P --replicas 1,2,3 [--wait] [--timeout 60s]
`

func (e *env) topic(ctx context.Context, args []string) error {
	return e.subcommand(ctx, "topic", topicUsage, args, map[string]func(context.Context, []string) error{
		"create":   e.topicCreate,
		"list":     e.topicList,
		"describe": e.topicDescribe,
		"delete":   e.topicDelete,
		"reassign": e.topicReassign,
	})
}

func (e *env) topicCreate(ctx context.Context, args []string) error {
	fs := e.newFlags("topic create", "topic create NAME --partitions N [--replication-factor R] [--config k=v]...\n\n"+
		"Without --replication-factor the topic gets the cluster's default (sluiced --default-replication-factor),\n"+
		"and without --config min.insync.replicas=N the cluster's default for that (--default-min-insync-replicas),\n"+
		"capped at the replication factor. Prints what the topic got.")
	partitions := fs.Int("partitions", 1, "number of partitions")
	rf := fs.Int("replication-factor", 0, "replicas per partition (default: the cluster's default replication factor)")
	var configs multiFlag
	fs.Var(&configs, "config", "topic config k=v (repeatable)")
	pos, err := e.parse(fs, args, 1)
	if err != nil {
		return err
	}
	cfg := map[string]string{}
	for _, kv := range configs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("topic create: --config %q is not k=v", kv)
		}
		cfg[k] = v
	}
	if *rf < 0 {
		return fmt.Errorf("topic create: --replication-factor must be >= 1, got %d", *rf)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := c.CreateTopicResult(ctx, pos[0], int32(*partitions), int32(*rf), cfg)
	if err != nil {
		return fmt.Errorf("topic create: topic %q: %w", pos[0], err)
	}
	fmt.Fprintf(e.stdout, "created topic %s: %s, replication factor %d, min.insync.replicas %s\n",
		r.Name, plural(r.NumPartitions, "partition"), r.ReplicationFactor, orDash(r.Configs["min.insync.replicas"]))
	if r.Note != "" {
		fmt.Fprintf(e.stderr, "note: %s\n", r.Note)
	}
	return nil
}

func (e *env) topicDelete(ctx context.Context, args []string) error {
	fs := e.newFlags("topic delete", "topic delete NAME")
	pos, err := e.parse(fs, args, 1)
	if err != nil {
		return err
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.DeleteTopic(ctx, pos[0]); err != nil {
		return fmt.Errorf("topic delete: topic %q: %w", pos[0], err)
	}
	fmt.Fprintf(e.stdout, "deleted topic %q\n", pos[0])
	return nil
}

// reassignJSON is "topic reassign --output json". Leader, LeaderEpoch
// and ISR are present only with --wait (from the final metadata); without
// it, the replica lists are the controller's answer to the request.
type reassignJSON struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Target    []int32 `json:"target"`
	// Done: no reassignment runs and the replicas are the target.
	Done             bool    `json:"done"`
	Replicas         []int32 `json:"replicas"`
	AddingReplicas   []int32 `json:"adding_replicas"`
	RemovingReplicas []int32 `json:"removing_replicas"`
	Leader           *int32  `json:"leader,omitempty"`
	LeaderEpoch      *int32  `json:"leader_epoch,omitempty"`
	ISR              []int32 `json:"isr,omitempty"`
}

// reassignPollInterval is how often "topic reassign --wait" re-reads the
// metadata.
const reassignPollInterval = 250 * time.Millisecond

func (e *env) topicReassign(ctx context.Context, args []string) error {
	fs := e.newFlags("topic reassign", "topic reassign NAME --partition P --replicas 1,2,3 [--wait] [--timeout 60s]")
	partition := fs.Int("partition", -1, "partition to move (required)")
	replicas := fs.String("replicas", "", "target broker ids in preference order, comma separated (required)")
	wait := fs.Bool("wait", false, "wait until the reassignment has completed, then print the partition")
	timeout := fs.Duration("timeout", 60*time.Second, "with --wait: how long to wait")
	pos, err := e.parse(fs, args, 1)
	if err != nil {
		return err
	}
	topic := pos[0]
	if *partition < 0 {
		return fmt.Errorf("topic reassign: --partition is required (>= 0)")
	}
	target, err := parseIDs(*replicas)
	if err != nil {
		return fmt.Errorf("topic reassign: --replicas: %w", err)
	}
	if *wait && *timeout <= 0 {
		return fmt.Errorf("topic reassign: --timeout must be > 0, got %v", *timeout)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	p := int32(*partition)
	resp, err := c.AlterPartitionReassignments(ctx, topic, p, target)
	if err != nil {
		return fmt.Errorf("topic reassign: %s-%d: %w", topic, p, err)
	}
	out := reassignJSON{Topic: topic, Partition: p, Target: target, Replicas: nonNil(resp.Replicas),
		AddingReplicas: nonNil(resp.AddingReplicas), RemovingReplicas: nonNil(resp.RemovingReplicas)}
	out.Done = reassignDone(out.Replicas, out.AddingReplicas, out.RemovingReplicas, target)
	if *wait && !out.Done {
		if !e.g.json() {
			fmt.Fprintf(e.stdout, "reassigning %s-%d to %s: adding %s, removing %s; waiting up to %v\n", topic, p, ints(target),
				orDash(ints(out.AddingReplicas)), orDash(ints(out.RemovingReplicas)), *timeout)
		}
	}
	if *wait {
		pm, err := e.waitReassigned(ctx, c, topic, p, target, *timeout)
		if pm != nil {
			out.Replicas, out.AddingReplicas, out.RemovingReplicas = nonNil(pm.Replicas), nonNil(pm.AddingReplicas), nonNil(pm.RemovingReplicas)
			out.Done = reassignDone(out.Replicas, out.AddingReplicas, out.RemovingReplicas, target)
			out.Leader, out.LeaderEpoch, out.ISR = &pm.LeaderId, &pm.LeaderEpoch, nonNil(pm.Isr)
		}
		if err != nil {
			if e.g.json() {
				_ = json.NewEncoder(e.stdout).Encode(out)
			}
			return fmt.Errorf("topic reassign: %s-%d: %w", topic, p, err)
		}
	}
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(out)
	}
	switch {
	case *wait:
		fmt.Fprintf(e.stdout, "reassigned %s-%d: replicas %s, isr %s, leader %d (leader epoch %d)\n", topic, p,
			ints(out.Replicas), ints(out.ISR), *out.Leader, *out.LeaderEpoch)
	case out.Done:
		fmt.Fprintf(e.stdout, "%s-%d has replicas %s\n", topic, p, ints(out.Replicas))
	default:
		fmt.Fprintf(e.stdout, "reassignment of %s-%d to %s started: replicas %s, adding %s, removing %s\n", topic, p, ints(target),
			ints(out.Replicas), orDash(ints(out.AddingReplicas)), orDash(ints(out.RemovingReplicas)))
	}
	return nil
}

// waitReassigned polls the metadata of topic-partition until no
// reassignment runs and its replicas are target, or timeout passes. It
// returns the last partition metadata seen (nil if none) and, on timeout,
// an error describing where the reassignment stands.
func (e *env) waitReassigned(ctx context.Context, c *client.Client, topic string, partition int32, target []int32, timeout time.Duration) (*sluicev1.PartitionMetadata, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last *sluicev1.PartitionMetadata
	var lastErr error
	for {
		md, err := c.Metadata(ctx, topic)
		if err == nil {
			lastErr = fmt.Errorf("topic %q not in the metadata response", topic)
			for _, t := range md.Topics {
				switch {
				case t.Name != topic:
				case t.ErrorCode != sluicev1.ErrorCode_NONE:
					lastErr = &errs.Error{Code: t.ErrorCode, Message: t.ErrorMessage}
				case int(partition) >= len(t.Partitions):
					lastErr = fmt.Errorf("topic %q has no partition %d", topic, partition)
				default:
					last, lastErr = t.Partitions[partition], nil
				}
			}
		} else {
			lastErr = err
		}
		if last != nil && lastErr == nil && reassignDone(last.Replicas, last.AddingReplicas, last.RemovingReplicas, target) {
			return last, nil
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded && last != nil {
				return last, fmt.Errorf("not complete after %v: replicas %s, isr %s, adding %s, removing %s; it goes on in the background",
					timeout, ints(last.Replicas), ints(last.Isr), orDash(ints(last.AddingReplicas)), orDash(ints(last.RemovingReplicas)))
			}
			if lastErr != nil {
				return last, fmt.Errorf("%w (%v)", ctx.Err(), lastErr)
			}
			return last, ctx.Err()
		case <-time.After(reassignPollInterval):
		}
	}
}

// reassignDone reports whether a partition with these replicas and
// reassignment lists has reached target.
func reassignDone(replicas, adding, removing, target []int32) bool {
	return len(adding) == 0 && len(removing) == 0 && slices.Equal(replicas, target)
}

// parseIDs parses a comma-separated list of broker ids ("1,2,3").
func parseIDs(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("a comma-separated list of broker ids is required")
	}
	var out []int32
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a broker id", f)
		}
		out = append(out, int32(n))
	}
	return out, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func nonNil(v []int32) []int32 {
	if v == nil {
		return []int32{}
	}
	return v
}

func ints(v []int32) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// offset prints an offset, or "-" when it is unknown.
func offset(o *int64) string {
	if o == nil {
		return "-"
	}
	return strconv.FormatInt(*o, 10)
}
