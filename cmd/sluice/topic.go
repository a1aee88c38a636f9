package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

const topicUsage = `usage: sluice topic create NAME --partitions N --replication-factor R [--config k=v]...
       sluice topic list
       sluice topic describe NAME
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

func (e *env) topicList(ctx context.Context, args []string) error {
	fs := e.newFlags("topic list", "topic list")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	md, err := c.Metadata(ctx)
	if err != nil {
		return fmt.Errorf("topic list: %w", err)
	}
	type row struct {
		Name       string `json:"name"`
		Partitions int    `json:"partitions"`
	}
	rows := []row{}
	for _, t := range md.Topics {
		rows = append(rows, row{t.Name, len(t.Partitions)})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(rows)
	}
	for _, r := range rows {
		fmt.Fprintln(e.stdout, r.Name)
	}
	return nil
}

// The CLI's JSON documents are defined in cmd/sluice/output (the e2e
// suites decode them with the same types).
type (
	partitionJSON = output.Partition
	topicJSON     = output.Topic
)

// describeOffsetsBudget bounds the time topic describe spends asking
// leaders for offsets, so that a cluster with a leader down still gets
// described (its partitions' offsets shown as unknown).
const describeOffsetsBudget = 3 * time.Second

func (e *env) topicDescribe(ctx context.Context, args []string) error {
	fs := e.newFlags("topic describe", "topic describe NAME")
	pos, err := e.parse(fs, args, 1)
	if err != nil {
		return err
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	md, err := c.Metadata(ctx, pos[0])
	if err != nil {
		return fmt.Errorf("topic describe: %w", err)
	}
	var tm *sluicev1.TopicMetadata
	for _, t := range md.Topics {
		if t.Name == pos[0] {
			tm = t
		}
	}
	if tm == nil {
		return fmt.Errorf("topic describe: topic %q: not in the metadata response", pos[0])
	}
	if tm.ErrorCode != sluicev1.ErrorCode_NONE {
		return fmt.Errorf("topic describe: topic %q: %w", pos[0], &errs.Error{Code: tm.ErrorCode, Message: tm.ErrorMessage})
	}
	out := topicJSON{Name: tm.Name, Partitions: []partitionJSON{}, Configs: tm.Configs}
	if out.Configs == nil {
		out.Configs = map[string]string{}
	}
	reassigning := false
	for _, p := range tm.Partitions {
		out.Partitions = append(out.Partitions, partitionJSON{Partition: p.Partition, Leader: p.LeaderId, LeaderEpoch: p.LeaderEpoch,
			Replicas: nonNil(p.Replicas), ISR: nonNil(p.Isr), AddingReplicas: nonNil(p.AddingReplicas), RemovingReplicas: nonNil(p.RemovingReplicas)})
		reassigning = reassigning || len(p.AddingReplicas)+len(p.RemovingReplicas) > 0
	}
	octx, cancel := context.WithTimeout(ctx, describeOffsetsBudget)
	var unknown []string
	for i := range out.Partitions {
		p := &out.Partitions[i]
		hw, lso, err := c.Watermarks(octx, out.Name, p.Partition)
		if err != nil {
			unknown = append(unknown, fmt.Sprintf("%d (%v)", p.Partition, err))
			continue
		}
		p.HighWatermark, p.LastStableOffset = &hw, &lso
	}
	cancel()
	if len(unknown) > 0 {
		fmt.Fprintf(e.stderr, "sluice: topic describe: offsets unknown for partition %s\n", strings.Join(unknown, ", "))
	}
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(out)
	}
	fmt.Fprintf(e.stdout, "Topic: %s\tPartitions: %d\n", out.Name, len(out.Partitions))
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	// The reassignment columns appear only while one runs.
	if reassigning {
		fmt.Fprintln(tw, "PARTITION\tLEADER\tLEADER_EPOCH\tREPLICAS\tISR\tHIGH_WATERMARK\tLAST_STABLE_OFFSET\tADDING\tREMOVING")
	} else {
		fmt.Fprintln(tw, "PARTITION\tLEADER\tLEADER_EPOCH\tREPLICAS\tISR\tHIGH_WATERMARK\tLAST_STABLE_OFFSET")
	}
	for _, p := range out.Partitions {
		if reassigning {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Partition, p.Leader, p.LeaderEpoch, ints(p.Replicas), ints(p.ISR),
				offset(p.HighWatermark), offset(p.LastStableOffset), orDash(ints(p.AddingReplicas)), orDash(ints(p.RemovingReplicas)))
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\n", p.Partition, p.Leader, p.LeaderEpoch, ints(p.Replicas), ints(p.ISR),
			offset(p.HighWatermark), offset(p.LastStableOffset))
	}
	tw.Flush()
	if len(out.Configs) > 0 {
		keys := make([]string, 0, len(out.Configs))
		for k := range out.Configs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(e.stdout, "Configs:")
		for _, k := range keys {
			fmt.Fprintf(e.stdout, "  %s=%s\n", k, out.Configs[k])
		}
	}
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
