package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

const txnUsage = `usage: sluice txn COMMAND [ARGS]

Commands:
  list [--state S]... [--producer-id P]... [--min-duration D]
      every transactional id of the cluster (each broker lists the ids it
      coordinates), sorted by id
  describe ID... [--history]
      the state of transactional ids, from their coordinators; --history:
      every state each went through, from __transaction_state
  describe-producers TOPIC PARTITION
      the producer state of a partition's leader: epochs, sequences, open
      transactions
  find-hanging [--broker N] [--min-duration D]
      open transactions that no coordinator owns, or older than the
      maximum transaction timeout
  abort TOPIC PARTITION --producer-id P --producer-epoch E --coordinator-epoch C [--force]
      writes an ABORT marker for a hanging transaction

Run "sluice txn COMMAND --help" for a command's flags.
`

// txnStates are the coordinator's transaction states (DESIGN §10).
var txnStates = []string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "PrepareEpochFence", "Dead"}

func (e *env) txn(ctx context.Context, args []string) error {
	return e.subcommand(ctx, "txn", txnUsage, args, map[string]func(context.Context, []string) error{
		"list":               e.txnList,
		"describe":           e.txnDescribe,
		"describe-producers": e.txnDescribeProducers,
		"find-hanging":       e.txnFindHanging,
		"abort":              e.txnAbort,
	})
}

// int64sFlag collects a repeated (or comma-separated) int64 flag.
type int64sFlag []int64

func (f *int64sFlag) String() string {
	s := make([]string, len(*f))
	for i, v := range *f {
		s[i] = strconv.FormatInt(v, 10)
	}
	return strings.Join(s, ",")
}

func (f *int64sFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer: %q", part)
		}
		*f = append(*f, n)
	}
	return nil
}

// txnListFilter checks the list flags and turns them into the client's
// filter.
func txnListFilter(states []string, producerIDs []int64, minDuration time.Duration) (client.ListTransactionsFilter, error) {
	var f client.ListTransactionsFilter
	for _, s := range states {
		for _, one := range strings.Split(s, ",") {
			found := ""
			for _, known := range txnStates {
				if strings.EqualFold(one, known) {
					found = known
				}
			}
			if found == "" {
				return f, fmt.Errorf("--state %q is not a transaction state (%s)", one, strings.Join(txnStates, ", "))
			}
			f.States = append(f.States, found)
		}
	}
	if minDuration < 0 {
		return f, fmt.Errorf("--min-duration must be >= 0, got %v", minDuration)
	}
	f.ProducerIDs, f.MinDuration = producerIDs, minDuration
	return f, nil
}

func (e *env) txnList(ctx context.Context, args []string) error {
	fs := e.newFlags("txn list", "txn list [--state S]... [--producer-id P]... [--min-duration D]\n\nLists the transactional ids of every broker, sorted by id.")
	var states multiFlag
	var pids int64sFlag
	fs.Var(&states, "state", "only transactions in this state (repeatable or comma separated): "+strings.Join(txnStates, ", "))
	fs.Var(&pids, "producer-id", "only transactions of this producer id (repeatable or comma separated)")
	minDuration := fs.Duration("min-duration", 0, "only transactions open for at least this long, e.g. 30s (0: no filter)")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	filter, err := txnListFilter(states, pids, *minDuration)
	if err != nil {
		return fmt.Errorf("txn list: %w", err)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	ls, err := c.ListTransactions(ctx, filter)
	if err != nil {
		return fmt.Errorf("txn list: %w", err)
	}
	rows := make([]output.TransactionListing, 0, len(ls))
	for _, l := range ls {
		rows = append(rows, output.TransactionListing{TransactionalID: l.TransactionalId, ProducerID: l.ProducerId, State: l.State, DurationMs: l.DurationMs})
	}
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(rows)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRANSACTIONAL ID\tPRODUCER ID\tSTATE\tOPEN FOR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.TransactionalID, r.ProducerID, r.State, durationText(r.DurationMs))
	}
	return tw.Flush()
}

// durationText prints a duration in milliseconds, "-" for -1 (none open).
func durationText(ms int64) string {
	if ms < 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// timeText prints milliseconds since the Unix epoch as UTC, "-" for -1.
func timeText(ms int64) string {
	if ms < 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

// transactionOutput converts a DescribeTransactions entry.
func transactionOutput(st *sluicev1.TransactionState) output.Transaction {
	t := output.Transaction{TransactionalID: st.TransactionalId, Topics: []output.TxnTopic{}}
	if st.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Error = st.ErrorCode.String()
		if st.ErrorMessage != "" {
			t.Error += ": " + st.ErrorMessage
		}
		return t
	}
	t.State, t.ProducerID, t.ProducerEpoch, t.LastProducerEpoch = st.State, st.ProducerId, st.ProducerEpoch, st.LastProducerEpoch
	t.PreviousProducerID, t.NextProducerID = st.PreviousProducerId, st.NextProducerId
	t.TransactionTimeoutMs, t.TransactionStartTimeMs, t.LastUpdateTimeMs = st.TransactionTimeoutMs, st.TransactionStartTimeMs, st.LastUpdateTimeMs
	t.CoordinatorEpoch = st.CoordinatorEpoch
	for _, tp := range st.Topics {
		parts := append([]int32{}, tp.Partitions...)
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		t.Topics = append(t.Topics, output.TxnTopic{Name: tp.Name, Partitions: parts})
	}
	sort.Slice(t.Topics, func(i, j int) bool { return t.Topics[i].Name < t.Topics[j].Name })
	return t
}

func (e *env) txnDescribe(ctx context.Context, args []string) error {
	fs := e.newFlags("txn describe", "txn describe ID... [--history]\n\nPrints the state of each transactional id as its coordinator knows it, and with\n--history every state it went through, read from __transaction_state.\nExits 1 if any id could not be described (e.g. TRANSACTIONAL_ID_NOT_FOUND).")
	history := fs.Bool("history", false, "also print every record of the id in __transaction_state (state, epochs, partitions, times)")
	ids, err := e.parse(fs, args, -1)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		fs.Usage()
		return errUsage
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	sts, err := c.DescribeTransactions(ctx, ids...)
	if err != nil {
		return fmt.Errorf("txn describe: %w", err)
	}
	out := make([]output.Transaction, len(sts))
	failed := 0
	for i, st := range sts {
		out[i] = transactionOutput(st)
		if out[i].Error != "" {
			failed++
		}
		if *history {
			// The history is read even when the coordinator does not
			// answer: the records outlive the coordinator's memory of the id.
			h, err := txnHistory(ctx, c, st.TransactionalId)
			if err != nil {
				return fmt.Errorf("txn describe %s --history: %w", st.TransactionalId, err)
			}
			out[i].History = h
			out[i].Markers = lastMarkers(ctx, c, h)
		}
	}
	if e.g.json() {
		if err := json.NewEncoder(e.stdout).Encode(out); err != nil {
			return err
		}
	} else {
		for i, t := range out {
			if i > 0 {
				fmt.Fprintln(e.stdout)
			}
			printTransaction(e.stdout, t)
			if *history {
				printHistory(e.stdout, t.History)
				printMarkers(e.stdout, t.History, t.Markers)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("txn describe: %d of %s could not be described", failed, plural(len(out), "id"))
	}
	return nil
}

// printTransaction prints one described transaction as aligned lines.
func printTransaction(w io.Writer, t output.Transaction) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Transactional ID:\t%s\n", t.TransactionalID)
	if t.Error != "" {
		fmt.Fprintf(tw, "Error:\t%s\n", t.Error)
		_ = tw.Flush()
		return
	}
	fmt.Fprintf(tw, "State:\t%s\n", t.State)
	fmt.Fprintf(tw, "Producer:\tid %d, epoch %d (last epoch %d)\n", t.ProducerID, t.ProducerEpoch, t.LastProducerEpoch)
	if t.PreviousProducerID >= 0 || t.NextProducerID >= 0 {
		fmt.Fprintf(tw, "Producer ids:\tprevious %d, next %d\n", t.PreviousProducerID, t.NextProducerID)
	}
	fmt.Fprintf(tw, "Timeout:\t%s\n", durationText(int64(t.TransactionTimeoutMs)))
	fmt.Fprintf(tw, "Started:\t%s\n", timeText(t.TransactionStartTimeMs))
	fmt.Fprintf(tw, "Last update:\t%s\n", timeText(t.LastUpdateTimeMs))
	fmt.Fprintf(tw, "Coordinator epoch:\t%d\n", t.CoordinatorEpoch)
	if len(t.Topics) == 0 {
		fmt.Fprintf(tw, "Partitions:\t-\n")
	}
	for i, tp := range t.Topics {
		label := ""
		if i == 0 {
			label = "Partitions:"
		}
		parts := make([]string, len(tp.Partitions))
		for j, p := range tp.Partitions {
			parts[j] = strconv.Itoa(int(p))
		}
		fmt.Fprintf(tw, "%s\t%s: %s\n", label, tp.Name, strings.Join(parts, ","))
	}
	_ = tw.Flush()
}
