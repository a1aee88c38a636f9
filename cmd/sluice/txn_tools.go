package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"strconv"
	"text/tabwriter"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cmd/sluice/output"
)

// The KIP-664 commands of "sluice txn": describe-producers, find-hanging
// and abort (decision 35 of docs/design.md, docs/transactions.md
// "Operating transactions").

// partitionArg parses a partition number.
func partitionArg(s string) (int32, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("partition must be an integer >= 0, got %q", s)
	}
	return int32(n), nil
}

func (e *env) txnDescribeProducers(ctx context.Context, args []string) error {
	fs := e.newFlags("txn describe-producers", "txn describe-producers TOPIC PARTITION\n\nPrints the producer state the partition's leader holds: per producer id, its epoch,\nlast sequence and timestamp, the coordinator epoch of its last marker and its\nopen transaction (first offset, start time, age).")
	pos, err := e.parse(fs, args, 2)
	if err != nil {
		return err
	}
	part, err := partitionArg(pos[1])
	if err != nil {
		return fmt.Errorf("txn describe-producers: %w", err)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	ps, err := c.DescribeProducers(ctx, pos[0], part)
	if err != nil {
		return fmt.Errorf("txn describe-producers: %w", err)
	}
	rows := make([]output.Producer, 0, len(ps))
	for _, p := range ps {
		rows = append(rows, output.Producer{ProducerID: p.ProducerId, ProducerEpoch: p.ProducerEpoch, LastSequence: p.LastSequence,
			LastTimestampMs: p.LastTimestampMs, CoordinatorEpoch: p.CoordinatorEpoch, CurrentTxnStartOffset: p.CurrentTxnStartOffset,
			CurrentTxnStartTimeMs: p.CurrentTxnStartTimeMs, CurrentTxnDurationMs: p.CurrentTxnDurationMs, LastOffset: p.LastOffset})
	}
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(rows)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PRODUCER ID\tEPOCH\tLAST SEQUENCE\tLAST OFFSET\tLAST TIMESTAMP\tCOORDINATOR EPOCH\tTXN START OFFSET\tTXN START\tOPEN FOR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%d\t%s\t%s\t%s\n", r.ProducerID, r.ProducerEpoch, r.LastSequence, r.LastOffset, timeText(r.LastTimestampMs),
			r.CoordinatorEpoch, offsetText(r.CurrentTxnStartOffset), timeText(r.CurrentTxnStartTimeMs), durationText(r.CurrentTxnDurationMs))
	}
	return tw.Flush()
}

// offsetText prints an offset, "-" for -1 (none).
func offsetText(o int64) string {
	if o < 0 {
		return "-"
	}
	return strconv.FormatInt(o, 10)
}

func (e *env) txnFindHanging(ctx context.Context, args []string) error {
	fs := e.newFlags("txn find-hanging", "txn find-hanging [--broker N] [--min-duration D] [--max-transaction-timeout D]\n\nLists the open transactions partitions hold that their coordinator does not own\n(no transactional id has the producer id, or it has it in another state, epoch or\nwithout the partition), and those open longer than the maximum transaction timeout.\nExits 1 when it finds any.")
	broker := fs.Int("broker", -1, "only partitions this broker leads (-1: all)")
	minDuration := fs.Duration("min-duration", 0, "only transactions open for at least this long, e.g. 1m")
	maxTimeout := fs.Duration("max-transaction-timeout", client.DefaultMaxTransactionTimeout, "the brokers' transaction.max.timeout.ms: older open transactions are hanging")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if *minDuration < 0 || *maxTimeout <= 0 || *broker < -1 || *broker > math.MaxInt32 {
		return fmt.Errorf("txn find-hanging: --min-duration must be >= 0, --max-transaction-timeout > 0 and --broker a node id or -1")
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	hs, err := c.FindHangingTransactions(ctx, client.HangingFilter{Broker: int32(*broker), MinDuration: *minDuration, MaxTimeout: *maxTimeout})
	if err != nil {
		return fmt.Errorf("txn find-hanging: %w", err)
	}
	rows := make([]output.HangingTransaction, 0, len(hs))
	for _, h := range hs {
		rows = append(rows, output.HangingTransaction{Topic: h.Topic, Partition: h.Partition, Leader: h.Leader, ProducerID: h.ProducerID,
			ProducerEpoch: h.ProducerEpoch, CoordinatorEpoch: h.CoordinatorEpoch, StartOffset: h.StartOffset, StartTimeMs: h.StartTimeMs,
			DurationMs: h.Duration.Milliseconds(), TransactionalID: h.TransactionalID, Reason: h.Reason})
	}
	if e.g.json() {
		if err := json.NewEncoder(e.stdout).Encode(rows); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tPARTITION\tLEADER\tPRODUCER ID\tEPOCH\tCOORDINATOR EPOCH\tSTART OFFSET\tOPEN FOR\tREASON")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Topic, r.Partition, r.Leader, r.ProducerID, r.ProducerEpoch,
				r.CoordinatorEpoch, r.StartOffset, durationText(r.DurationMs), r.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rows) > 0 {
		return fmt.Errorf("txn find-hanging: %s", plural(len(rows), "hanging transaction"))
	}
	return nil
}

func (e *env) txnAbort(ctx context.Context, args []string) error {
	fs := e.newFlags("txn abort", "txn abort TOPIC PARTITION --producer-id P --producer-epoch E --coordinator-epoch C [--force]\n\nWrites an ABORT marker for a hanging transaction (values from describe-producers\nor find-hanging). Refused when the partition holds no open transaction of the\nproducer at that epoch, or when its coordinator still owns it (unless --force).")
	pid := fs.Int64("producer-id", -1, "producer id of the open transaction (required)")
	epoch := fs.Int("producer-epoch", -1, "producer epoch of the open transaction's data (required)")
	coordEpoch := fs.Int("coordinator-epoch", -1, "coordinator epoch for the marker: at least the partition's for the producer (required, may be -1 when it shows -1)")
	force := fs.Bool("force", false, "abort even if the coordinator still owns the transaction")
	pos, err := e.parse(fs, args, 2)
	if err != nil {
		return err
	}
	part, err := partitionArg(pos[1])
	if err != nil {
		return fmt.Errorf("txn abort: %w", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"producer-id", "producer-epoch", "coordinator-epoch"} {
		if !set[name] {
			return fmt.Errorf("txn abort: --%s is required", name)
		}
	}
	if *pid <= 0 || *epoch < 0 || *epoch > math.MaxInt16 || *coordEpoch < -1 || *coordEpoch > math.MaxInt32 {
		return fmt.Errorf("txn abort: --producer-id must be > 0, --producer-epoch in [0, %d], --coordinator-epoch >= -1", math.MaxInt16)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	spec := client.AbortSpec{Topic: pos[0], Partition: part, ProducerID: *pid, ProducerEpoch: int32(*epoch), CoordinatorEpoch: int32(*coordEpoch), Force: *force}
	off, err := c.AbortTransaction(ctx, spec)
	if err != nil {
		return fmt.Errorf("txn abort: %w", err)
	}
	out := output.AbortedTransaction{Topic: spec.Topic, Partition: part, ProducerID: spec.ProducerID, ProducerEpoch: spec.ProducerEpoch, MarkerOffset: off}
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(out)
	}
	_, err = fmt.Fprintf(e.stdout, "Aborted the transaction of producer %d (epoch %d) on %s/%d: ABORT marker at offset %d\n", out.ProducerID, out.ProducerEpoch, out.Topic, out.Partition, off)
	return err
}
