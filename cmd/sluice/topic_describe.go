package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/proto/topic"
)

// The CLI's JSON documents are defined in cmd/sluice/output (the e2e
// suites decode them with the same types).
type (
	partitionJSON = output.Partition
	topicJSON     = output.Topic
)

// describeOffsetsBudget bounds the time topic describe spends asking
// leaders for offsets (all leaders at once, whatever the number of
// partitions), so that a cluster with a leader down still gets described
// (its partitions' offsets shown as unknown).
const describeOffsetsBudget = 3 * time.Second

// partitionFilters are topic describe's filter flags (kafka-topics.sh
// --describe's), with the broker-side filter each asks for.
var partitionFilters = []struct {
	flag, usage string
	filter      sluicev1.PartitionFilter
}{
	{"under-replicated-partitions", "only partitions with a replica out of the ISR", sluicev1.PartitionFilter_PARTITION_FILTER_UNDER_REPLICATED},
	{"under-min-isr-partitions", "only partitions with fewer in-sync replicas than min.insync.replicas (acks=all produce fails)", sluicev1.PartitionFilter_PARTITION_FILTER_UNDER_MIN_ISR},
	{"at-min-isr-partitions", "only partitions with exactly min.insync.replicas in sync (one more loss and acks=all fails)", sluicev1.PartitionFilter_PARTITION_FILTER_AT_MIN_ISR},
	{"unavailable-partitions", "only partitions without a live leader", sluicev1.PartitionFilter_PARTITION_FILTER_UNAVAILABLE},
}

const topicDescribeSynopsis = `topic describe [NAME...] [--prefix P] [--match GLOB] [--exclude-internal]
       [--under-replicated-partitions | --under-min-isr-partitions | --at-min-isr-partitions | --unavailable-partitions]

Partitions with leader, leader epoch, replicas, ISR, high watermark and last stable offset. One NAME: that
topic and its configs (--output json: one object). Several NAMEs, or none (every topic, or those --prefix,
--match and --exclude-internal select): one table with a TOPIC column, no configs (--output json: an array of
objects). A filter flag keeps only the partitions in that state, over every topic when no NAME is given: what
an operator looks for at thousands of partitions.`

func (e *env) topicDescribe(ctx context.Context, args []string) error {
	fs := e.newFlags("topic describe", topicDescribeSynopsis)
	var sel topicSelection
	sel.register(fs)
	chosen := make([]*bool, len(partitionFilters))
	for i, f := range partitionFilters {
		chosen[i] = fs.Bool(f.flag, false, f.usage)
	}
	names, err := e.parse(fs, args, -1)
	if err != nil {
		return err
	}
	filter, flagName := sluicev1.PartitionFilter_PARTITION_FILTER_UNSPECIFIED, ""
	for i, f := range partitionFilters {
		if !*chosen[i] {
			continue
		}
		if flagName != "" {
			return fmt.Errorf("topic describe: --%s and --%s cannot be used together", flagName, f.flag)
		}
		filter, flagName = f.filter, f.flag
	}
	if len(names) > 0 && sel.set() {
		return fmt.Errorf("topic describe: name topics or select them with --prefix, --match and --exclude-internal, not both")
	}
	if err := sel.check(); err != nil {
		return fmt.Errorf("topic describe: %w", err)
	}
	names = uniq(names)
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	req := sel.request()
	if len(names) > 0 {
		req = &sluicev1.MetadataRequest{Topics: names}
	}
	req.PartitionFilter = filter
	topics, brokers, err := listTopics(ctx, c, req, &sel)
	if err != nil {
		return fmt.Errorf("topic describe: %w", err)
	}
	for _, t := range topics {
		if t.ErrorCode != sluicev1.ErrorCode_NONE {
			return fmt.Errorf("topic describe: topic %q: %w", t.Name, &errs.Error{Code: t.ErrorCode, Message: t.ErrorMessage})
		}
	}
	for _, n := range names {
		if !slices.ContainsFunc(topics, func(t *sluicev1.TopicMetadata) bool { return t.Name == n }) {
			return fmt.Errorf("topic describe: topic %q: not in the metadata response", n)
		}
	}
	out, unknown := describeTopics(ctx, c, brokers, topics)
	if len(unknown) > 0 {
		fmt.Fprintf(e.stderr, "sluice: topic describe: offsets unknown for %s\n", unknownSummary(unknown, len(names) == 1))
	}
	if len(names) == 1 {
		if e.g.json() {
			return json.NewEncoder(e.stdout).Encode(out[0])
		}
		return writeTopic(e.stdout, out[0])
	}
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(out)
	}
	if filter != sluicev1.PartitionFilter_PARTITION_FILTER_UNSPECIFIED && len(out) == 0 {
		fmt.Fprintf(e.stderr, "sluice: topic describe: no partition matches --%s\n", flagName)
	}
	return writeTopics(e.stdout, out)
}

// uniq returns names without repeats, in their first order.
func uniq(names []string) []string {
	var out []string
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// describeTopics converts topics into topic describe's documents, with
// the offsets their leaders answer within describeOffsetsBudget; unknown
// lists the partitions whose offsets are missing, with why.
func describeTopics(ctx context.Context, c *client.Client, brokers []*sluicev1.BrokerMetadata, topics []*sluicev1.TopicMetadata) (out []topicJSON, unknown []string) {
	var marks map[topic.Partition]client.Watermark
	if len(topics) > 0 {
		octx, cancel := context.WithTimeout(ctx, describeOffsetsBudget)
		marks = c.WatermarksOf(octx, brokers, topics)
		cancel()
	}
	out = []topicJSON{}
	for _, tm := range topics {
		t := topicJSON{Name: tm.Name, Partitions: []partitionJSON{}, Configs: tm.Configs}
		if t.Configs == nil {
			t.Configs = map[string]string{}
		}
		for _, p := range tm.Partitions {
			pj := partitionJSON{Partition: p.Partition, Leader: p.LeaderId, LeaderEpoch: p.LeaderEpoch,
				Replicas: nonNil(p.Replicas), ISR: nonNil(p.Isr), AddingReplicas: nonNil(p.AddingReplicas), RemovingReplicas: nonNil(p.RemovingReplicas)}
			if m := marks[topic.Partition{Topic: tm.Name, Partition: p.Partition}]; m.Err == nil {
				pj.HighWatermark, pj.LastStableOffset = &m.HighWatermark, &m.LastStableOffset
			} else {
				unknown = append(unknown, fmt.Sprintf("%s\x00%d (%v)", tm.Name, p.Partition, m.Err))
			}
			t.Partitions = append(t.Partitions, pj)
		}
		out = append(out, t)
	}
	return out, unknown
}

// unknownSummary names the partitions of unknown (entries "topic\x00n
// (why)"): "partition n (why), ..." for one topic, else "topic-n (why),
// ...", the first ten and how many more.
func unknownSummary(unknown []string, oneTopic bool) string {
	const shown = 10
	var parts []string
	for _, u := range unknown[:min(shown, len(unknown))] {
		name, rest, _ := strings.Cut(u, "\x00")
		if oneTopic {
			parts = append(parts, rest)
		} else {
			parts = append(parts, name+"-"+rest)
		}
	}
	s := strings.Join(parts, ", ")
	if oneTopic {
		s = "partition " + s
	}
	if len(unknown) > shown {
		s += fmt.Sprintf(" and %d more", len(unknown)-shown)
	}
	return s
}

// reassigning reports whether any partition of ts is being reassigned:
// the ADDING and REMOVING columns appear only then.
func reassigning(ts ...topicJSON) bool {
	for _, t := range ts {
		for _, p := range t.Partitions {
			if len(p.AddingReplicas)+len(p.RemovingReplicas) > 0 {
				return true
			}
		}
	}
	return false
}

// writeTopic prints one topic as "topic describe NAME" does: a header,
// its partitions' table and its configs.
func writeTopic(w io.Writer, t topicJSON) error {
	fmt.Fprintf(w, "Topic: %s\tPartitions: %d\n", t.Name, len(t.Partitions))
	if err := writePartitions(w, false, t); err != nil {
		return err
	}
	if len(t.Configs) > 0 {
		keys := make([]string, 0, len(t.Configs))
		for k := range t.Configs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(w, "Configs:")
		for _, k := range keys {
			fmt.Fprintf(w, "  %s=%s\n", k, t.Configs[k])
		}
	}
	return nil
}

// writeTopics prints several topics as one table with a TOPIC column,
// nothing when they hold no partition.
func writeTopics(w io.Writer, ts []topicJSON) error {
	if !slices.ContainsFunc(ts, func(t topicJSON) bool { return len(t.Partitions) > 0 }) {
		return nil
	}
	return writePartitions(w, true, ts...)
}

// writePartitions prints the partitions of ts as a table, with a TOPIC
// column first when withTopic.
func writePartitions(w io.Writer, withTopic bool, ts ...topicJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	moving := reassigning(ts...)
	head := "PARTITION\tLEADER\tLEADER_EPOCH\tREPLICAS\tISR\tHIGH_WATERMARK\tLAST_STABLE_OFFSET"
	if withTopic {
		head = "TOPIC\t" + head
	}
	if moving {
		head += "\tADDING\tREMOVING"
	}
	fmt.Fprintln(tw, head)
	for _, t := range ts {
		for _, p := range t.Partitions {
			if withTopic {
				fmt.Fprintf(tw, "%s\t", t.Name)
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s", p.Partition, p.Leader, p.LeaderEpoch, ints(p.Replicas), ints(p.ISR),
				offset(p.HighWatermark), offset(p.LastStableOffset))
			if moving {
				fmt.Fprintf(tw, "\t%s\t%s", orDash(ints(p.AddingReplicas)), orDash(ints(p.RemovingReplicas)))
			}
			fmt.Fprintln(tw)
		}
	}
	return tw.Flush()
}
