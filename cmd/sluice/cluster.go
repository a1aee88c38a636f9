package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/sluice-io/sluice/cmd/sluice/output"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

const clusterUsage = `usage: sluice cluster status
`

func (e *env) cluster(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, clusterUsage)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	switch args[0] {
	case "status":
		return e.clusterStatus(ctx, args[1:])
	}
	fmt.Fprintf(e.stderr, "sluice: unknown cluster command %q\n\n%s", args[0], clusterUsage)
	return errUsage
}

func (e *env) clusterStatus(ctx context.Context, args []string) error {
	fs := e.newFlags("cluster status", "cluster status")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := c.DescribeCluster(ctx)
	if err != nil {
		return fmt.Errorf("cluster status: %w", err)
	}
	return writeClusterStatus(e.stdout, resp, e.g.json())
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
		out.Brokers = append(out.Brokers, brokerJSON{
			ID: b.NodeId, Address: b.Address, Rack: b.Rack, Epoch: b.Epoch, Fenced: b.Fenced, LeaderPartitions: b.LeaderPartitions,
		})
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
	fmt.Fprintln(tw, "ID\tADDRESS\tRACK\tEPOCH\tSTATUS\tLEADERS")
	for _, b := range s.Brokers {
		status := "active"
		if b.Fenced {
			status = "fenced"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%d\n", b.ID, dash(b.Address), dash(b.Rack), b.Epoch, status, b.LeaderPartitions)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(w, "\noffline partitions: %d\n", s.OfflinePartitions)
	_, err := fmt.Fprintf(w, "under-replicated partitions: %d\n", s.UnderReplicatedPartitions)
	return err
}

// dash stands in for an empty table cell so columns stay readable.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
