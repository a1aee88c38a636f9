package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// metadataPageSize is the page_size of the CLI's topic listings: at most
// this many partitions (or topics, for topic list) per Metadata answer,
// about 125 KB at replication factor 3 (issue 31). A variable only so
// that tests page through small listings.
var metadataPageSize int32 = 2000

// topicSelection is the flags that choose topics out of a listing of all
// of them: topic list's and topic describe's.
type topicSelection struct {
	prefix, match   string
	excludeInternal bool
}

func (sel *topicSelection) register(fs *flag.FlagSet) {
	fs.StringVar(&sel.prefix, "prefix", "", "only topics whose name starts with `P`")
	fs.StringVar(&sel.match, "match", "", "only topics whose name matches the shell `GLOB` (*, ?, [a-z]; quote it)")
	fs.BoolVar(&sel.excludeInternal, "exclude-internal", false, "leave out Sluice's own topics (__consumer_offsets, __transaction_state)")
}

// set reports whether any of the selection flags is given.
func (sel *topicSelection) set() bool {
	return sel.prefix != "" || sel.match != "" || sel.excludeInternal
}

// check refuses a malformed --match pattern.
func (sel *topicSelection) check() error {
	if _, err := path.Match(sel.match, ""); err != nil {
		return fmt.Errorf("--match %q is not a valid glob pattern: %w", sel.match, err)
	}
	return nil
}

// request is the Metadata listing the selection asks for; the broker
// applies --prefix and --exclude-internal, keep the rest.
func (sel *topicSelection) request() *sluicev1.MetadataRequest {
	return &sluicev1.MetadataRequest{TopicPrefix: sel.prefix, ExcludeInternal: sel.excludeInternal, PageSize: metadataPageSize}
}

// keep reports whether t is selected. It checks --prefix and
// --exclude-internal again: a broker from before those fields answers
// every topic.
func (sel *topicSelection) keep(t *sluicev1.TopicMetadata) bool {
	if !strings.HasPrefix(t.Name, sel.prefix) || sel.excludeInternal && t.Internal {
		return false
	}
	ok, _ := path.Match(sel.match, t.Name) // checked by check
	return sel.match == "" || ok
}

// listTopics pages through req's listing and returns the topics sel keeps,
// with the live brokers of the last answer.
func listTopics(ctx context.Context, c *client.Client, req *sluicev1.MetadataRequest, sel *topicSelection) ([]*sluicev1.TopicMetadata, []*sluicev1.BrokerMetadata, error) {
	var topics []*sluicev1.TopicMetadata
	var brokers []*sluicev1.BrokerMetadata
	for page, err := range c.MetadataPages(ctx, req) {
		if err != nil {
			return nil, nil, err
		}
		brokers = page.Brokers
		for _, t := range page.Topics {
			if sel.keep(t) {
				topics = append(topics, t)
			}
		}
	}
	return topics, brokers, nil
}

func (e *env) topicList(ctx context.Context, args []string) error {
	fs := e.newFlags("topic list", "topic list [--prefix P] [--match GLOB] [--exclude-internal]\n\n"+
		"One line per topic, by name: its partitions, replication factor, min.insync.replicas and the partitions\n"+
		"under-replicated, under min.insync.replicas and unavailable. Internal topics are listed unless\n"+
		"--exclude-internal. The broker answers counts, not partitions: cheap at any number of partitions.")
	var sel topicSelection
	sel.register(fs)
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if err := sel.check(); err != nil {
		return fmt.Errorf("topic list: %w", err)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	req := sel.request()
	req.ExcludePartitions, req.ExcludeConfigs = true, true
	topics, _, err := listTopics(ctx, c, req, &sel)
	if err != nil {
		return fmt.Errorf("topic list: %w", err)
	}
	rows := []output.TopicListing{}
	for _, t := range topics {
		rows = append(rows, topicListing(t))
	}
	slices.SortFunc(rows, func(a, b output.TopicListing) int { return strings.Compare(a.Name, b.Name) })
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(rows)
	}
	if len(rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tRF\tMIN_ISR\tUNDER_REPLICATED\tUNDER_MIN_ISR\tUNAVAILABLE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Name, r.Partitions, r.ReplicationFactor, r.MinInsyncReplicas,
			r.UnderReplicatedPartitions, r.UnderMinISRPartitions, r.UnavailablePartitions)
	}
	return tw.Flush()
}

// topicListing is t's line of topic list. A broker from before the
// counts answers the partitions instead: they give the partition count
// and replication factor.
func topicListing(t *sluicev1.TopicMetadata) output.TopicListing {
	r := output.TopicListing{Name: t.Name, Partitions: t.PartitionCount, ReplicationFactor: t.ReplicationFactor, MinInsyncReplicas: t.MinInsyncReplicas,
		Internal: t.Internal, UnderReplicatedPartitions: t.UnderReplicatedPartitions, UnderMinISRPartitions: t.UnderMinIsrPartitions,
		AtMinISRPartitions: t.AtMinIsrPartitions, UnavailablePartitions: t.UnavailablePartitions}
	if r.Partitions == 0 && len(t.Partitions) > 0 {
		r.Partitions, r.ReplicationFactor = int32(len(t.Partitions)), int32(len(t.Partitions[0].Replicas))
	}
	return r
}
