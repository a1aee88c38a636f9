package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

const topicUsage = `usage: sluice topic create NAME --partitions N --replication-factor R [--config k=v]...
       sluice topic list
       sluice topic describe NAME
       sluice topic delete NAME
`

func (e *env) topic(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, topicUsage)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	switch args[0] {
	case "create":
		return e.topicCreate(ctx, args[1:])
	case "list":
		return e.topicList(ctx, args[1:])
	case "describe":
		return e.topicDescribe(ctx, args[1:])
	case "delete":
		return e.topicDelete(ctx, args[1:])
	}
	fmt.Fprintf(e.stderr, "sluice: unknown topic command %q\n\n%s", args[0], topicUsage)
	return errUsage
}

func (e *env) topicCreate(ctx context.Context, args []string) error {
	fs := e.newFlags("topic create", "topic create NAME --partitions N --replication-factor R [--config k=v]...")
	partitions := fs.Int("partitions", 1, "number of partitions")
	rf := fs.Int("replication-factor", 1, "replicas per partition")
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
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, pos[0], int32(*partitions), int32(*rf), cfg); err != nil {
		return fmt.Errorf("topic create: topic %q: %w", pos[0], err)
	}
	fmt.Fprintf(e.stdout, "created topic %q with %d partitions\n", pos[0], *partitions)
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

// partitionJSON is one partition in "topic describe --output json".
type partitionJSON struct {
	Partition   int32   `json:"partition"`
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
}

type topicJSON struct {
	Name       string            `json:"name"`
	Partitions []partitionJSON   `json:"partitions"`
	Configs    map[string]string `json:"configs"`
}

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
	for _, p := range tm.Partitions {
		out.Partitions = append(out.Partitions, partitionJSON{p.Partition, p.LeaderId, p.LeaderEpoch, nonNil(p.Replicas), nonNil(p.Isr)})
	}
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(out)
	}
	fmt.Fprintf(e.stdout, "Topic: %s\tPartitions: %d\n", out.Name, len(out.Partitions))
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tLEADER\tLEADER_EPOCH\tREPLICAS\tISR")
	for _, p := range out.Partitions {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\n", p.Partition, p.Leader, p.LeaderEpoch, ints(p.Replicas), ints(p.ISR))
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
