package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

const clusterUsage = `usage: sluice cluster status [--offline-replicas-limit N]
       sluice cluster elect-leaders [--topic T [--partition P]...]
       sluice cluster unregister-broker --broker N
`

func (e *env) cluster(ctx context.Context, args []string) error {
	return e.subcommand(ctx, "cluster", clusterUsage, args, map[string]func(context.Context, []string) error{
		"status":            e.clusterStatus,
		"elect-leaders":     e.clusterElectLeaders,
		"unregister-broker": e.clusterUnregisterBroker,
	})
}

func (e *env) clusterStatus(ctx context.Context, args []string) error {
	fs := e.newFlags("cluster status", "cluster status [--offline-replicas-limit N]\n\n"+
		"A summary whatever the cluster's size: the quorum, per broker its leaders, replicas, replicas out of sync\n"+
		"and offline replicas, and the partitions offline, under-replicated, under and at min.insync.replicas.\n"+
		"To see the partitions behind a count: sluice topic describe --under-replicated-partitions (and its siblings).")
	limit := fs.Int("offline-replicas-limit", 20, "list at most N offline replicas per broker (-1: all); the count covers them all")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if *limit == 0 || *limit < -1 {
		return fmt.Errorf("cluster status: --offline-replicas-limit must be >= 1, or -1 for all; got %d", *limit)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := c.DescribeCluster(ctx, client.OfflineReplicasLimit(int32(min(*limit, math.MaxInt32))))
	if err != nil {
		return fmt.Errorf("cluster status: %w", err)
	}
	s := newClusterJSON(resp)
	if who, err := c.WhoAmI(ctx); err == nil {
		s.Connection = &output.Connection{Principal: who.Principal, AuthenticatedBy: who.AuthenticatedBy, TLS: who.Tls,
			TLSVersion: who.TlsVersion, NodeID: who.NodeId, AuthenticationRequired: who.AuthenticationRequired}
		for _, l := range who.Listeners {
			s.Connection.Listeners = append(s.Connection.Listeners, output.ListenerSecurity{Name: l.Name, Encrypted: l.Encrypted, ClientAuth: l.ClientAuth,
				SaslMechanisms: l.SaslMechanisms})
		}
	}
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(s)
	}
	return writeClusterText(e.stdout, s)
}

// clusterElectLeaders moves leaderships back to the preferred replicas
// (the first of each partition's replica list) where they can lead.
func (e *env) clusterElectLeaders(ctx context.Context, args []string) error {
	fs := e.newFlags("cluster elect-leaders", "cluster elect-leaders [--topic T [--partition P]...]\n\nMakes each partition's preferred replica (its first) the leader where it is live, in the ISR\nand not leading already (after a rolling restart, for instance). Prints the partitions moved.")
	topic := fs.String("topic", "", "only this topic (default: every partition of the cluster)")
	var parts partitionList
	fs.Var(&parts, "partition", "only this partition of --topic (repeatable)")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if len(parts) > 0 && *topic == "" {
		return fmt.Errorf("cluster elect-leaders: --partition needs --topic")
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	elected, err := c.ElectLeaders(ctx, *topic, parts...)
	if err != nil {
		return fmt.Errorf("cluster elect-leaders: %w", err)
	}
	out := make([]output.ElectedLeader, 0, len(elected))
	for _, el := range elected {
		out = append(out, output.ElectedLeader{Topic: el.Topic, Partition: el.Partition, Leader: el.LeaderId})
	}
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(out)
	}
	for _, el := range out {
		fmt.Fprintf(e.stdout, "%s-%d: leader %d\n", el.Topic, el.Partition, el.Leader)
	}
	fmt.Fprintln(e.stderr, movedSummary(len(out)))
	return nil
}

// movedSummary is elect-leaders' closing line for n partitions moved.
func movedSummary(n int) string {
	switch n {
	case 0:
		return "0 partitions moved (each selected partition is led by its preferred replica already, or that replica is not live and in sync)"
	case 1:
		return "1 partition moved to its preferred leader"
	}
	return fmt.Sprintf("%d partitions moved to their preferred leaders", n)
}

// partitionList is a repeatable partition flag.
type partitionList []int32

func (l *partitionList) String() string { return fmt.Sprint([]int32(*l)) }

func (l *partitionList) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return fmt.Errorf("partition %q is not a partition number", v)
	}
	*l = append(*l, int32(n))
	return nil
}

// "cluster status --output json" (cmd/sluice/output).
type (
	clusterJSON = output.Cluster
	voterJSON   = output.Voter
	brokerJSON  = output.Broker
)

// newClusterJSON converts a DescribeCluster answer (nil allowed) into the
// CLI's stable JSON shape: voters and brokers sorted by id, nil entries
// dropped, empty lists as [] rather than null.
func newClusterJSON(resp *sluicev1.DescribeClusterResponse) clusterJSON {
	out := clusterJSON{
		ClusterID:                 resp.GetClusterId(),
		NodeID:                    resp.GetNodeId(),
		MetadataOffset:            resp.GetMetadataOffset(),
		ControllerLeader:          resp.GetControllerLeader(),
		Voters:                    []int32{},
		Quorum:                    []voterJSON{},
		Brokers:                   []brokerJSON{},
		OfflinePartitions:         resp.GetOfflinePartitions(),
		UnderReplicatedPartitions: resp.GetUnderReplicatedPartitions(),
		Topics:                    resp.GetTopics(),
		Partitions:                resp.GetPartitions(),
		UnderMinISRPartitions:     resp.GetUnderMinIsrPartitions(),
		AtMinISRPartitions:        resp.GetAtMinIsrPartitions(),
	}
	for _, v := range resp.GetVoters() {
		if v == nil {
			continue
		}
		out.Quorum = append(out.Quorum, voterJSON{
			ID: v.NodeId, RaftAddress: v.RaftAddress, Address: v.Address, State: v.State,
			Term: v.Term, LastLogIndex: v.LastLogIndex, CommitIndex: v.CommitIndex, AppliedIndex: v.AppliedIndex,
		})
	}
	slices.SortStableFunc(out.Quorum, func(a, b voterJSON) int { return cmp.Compare(a.ID, b.ID) })
	for _, v := range out.Quorum {
		out.Voters = append(out.Voters, v.ID)
	}
	for _, b := range resp.GetBrokers() {
		if b == nil {
			continue
		}
		bj := brokerJSON{
			ID: b.NodeId, Address: b.Address, Rack: b.Rack, Epoch: b.Epoch, Fenced: b.Fenced, LeaderPartitions: b.LeaderPartitions,
			OfflineReplicas: []output.OfflineReplica{}, Replicas: b.Replicas, OutOfSyncReplicas: b.OutOfSyncReplicas,
			// A broker from before the count lists them all.
			OfflineReplicaCount: max(b.OfflineReplicaCount, int32(len(b.OfflineReplicas))),
		}
		for _, r := range b.OfflineReplicas {
			if r != nil {
				bj.OfflineReplicas = append(bj.OfflineReplicas, output.OfflineReplica{Topic: r.Topic, Partition: r.Partition, Path: r.Path, Error: r.Error})
			}
		}
		out.Brokers = append(out.Brokers, bj)
	}
	slices.SortStableFunc(out.Brokers, func(a, b brokerJSON) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// writeClusterStatus prints resp as "cluster status" does: one JSON object
// and a newline when asJSON, the text tables otherwise.
func writeClusterStatus(w io.Writer, resp *sluicev1.DescribeClusterResponse, asJSON bool) error {
	s := newClusterJSON(resp)
	if asJSON {
		return json.NewEncoder(w).Encode(s)
	}
	return writeClusterText(w, s)
}

// writeClusterText prints s as a header line, a voters table, a brokers
// table and the partition health counts.
func writeClusterText(w io.Writer, s clusterJSON) error {
	leader := "none"
	if s.ControllerLeader != 0 {
		leader = fmt.Sprint(s.ControllerLeader)
	}
	fmt.Fprintf(w, "Cluster: %s\tController leader: %s\tAnswered by: node %d at metadata offset %d\n",
		s.ClusterID, leader, s.NodeID, s.MetadataOffset)
	if c := s.Connection; c != nil {
		secured := "plaintext (not encrypted)"
		if c.TLS {
			secured = c.TLSVersion
		}
		required := ""
		if c.AuthenticationRequired {
			required = "; the brokers require authentication"
		}
		fmt.Fprintf(w, "Connection: %s (authenticated by %s) over %s%s\n", c.Principal, c.AuthenticatedBy, secured, required)
		if len(c.Listeners) > 0 {
			var parts []string
			for _, l := range c.Listeners {
				state := "plaintext"
				if l.Encrypted {
					state = "encrypted"
					if l.ClientAuth != "" && l.ClientAuth != "none" {
						state += ", client certificates " + l.ClientAuth
					}
				}
				if len(l.SaslMechanisms) > 0 {
					state += ", SASL " + strings.Join(l.SaslMechanisms, " ")
				}
				parts = append(parts, l.Name+" "+state)
			}
			fmt.Fprintf(w, "Listeners of node %d: %s\n", c.NodeID, strings.Join(parts, "; "))
		}
	}

	fmt.Fprintln(w, "\nVoters:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTERM\tLAST INDEX\tAPPLIED\tRAFT ADDRESS")
	for _, v := range s.Quorum {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s\n", v.ID, dash(v.State), v.Term, v.LastLogIndex, v.AppliedIndex, dash(v.RaftAddress))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nBrokers:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tRACK\tEPOCH\tSTATUS\tLEADERS\tREPLICAS\tOUT_OF_SYNC")
	for _, b := range s.Brokers {
		status := "active"
		if b.Fenced {
			status = "fenced"
		}
		if n := b.OfflineReplicaCount; n > 0 {
			status += fmt.Sprintf(", %d offline replicas", n)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%d\t%d\t%d\n", b.ID, dash(b.Address), dash(b.Rack), b.Epoch, status,
			b.LeaderPartitions, b.Replicas, b.OutOfSyncReplicas)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var offline []string
	for _, b := range s.Brokers {
		for _, r := range b.OfflineReplicas {
			offline = append(offline, fmt.Sprintf("  node %d: %s-%d at %s: %s\n", b.ID, r.Topic, r.Partition, dash(r.Path), dash(r.Error)))
		}
		if more := int(b.OfflineReplicaCount) - len(b.OfflineReplicas); more > 0 {
			offline = append(offline, fmt.Sprintf("  node %d: and %d more (--offline-replicas-limit -1 lists all)\n", b.ID, more))
		}
	}
	if len(offline) > 0 {
		// Decision 42: replicas whose logs failed on a disk; the operator
		// replaces the disk and restarts the node (docs/operations.md).
		fmt.Fprintln(w, "\nOffline replicas (disk failures):")
		for _, l := range offline {
			fmt.Fprint(w, l)
		}
	}

	fmt.Fprintf(w, "\ntopics: %d, partitions: %d\n", s.Topics, s.Partitions)
	fmt.Fprintf(w, "offline partitions: %d\n", s.OfflinePartitions)
	fmt.Fprintf(w, "under-replicated partitions: %d\n", s.UnderReplicatedPartitions)
	fmt.Fprintf(w, "under-min-isr partitions: %d\n", s.UnderMinISRPartitions)
	_, err := fmt.Fprintf(w, "at-min-isr partitions: %d\n", s.AtMinISRPartitions)
	return err
}

// dash stands in for an empty table cell so columns stay readable.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
