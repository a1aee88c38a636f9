package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	"github.com/sluice-io/sluice/coordinator/txn"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// txnHistory reads every record of transactionalID from its
// __transaction_state partition (read_uncommitted, from the log start to
// the high watermark as it was when the read began) and decodes them with
// txn.DecodeRecord, in log order. Records of other ids in the partition
// are skipped; a record of the id that does not decode fails the read.
// Compaction may have removed older records of the id: the history then
// starts later.
func txnHistory(ctx context.Context, c *client.Client, transactionalID string) ([]output.TxnHistoryEntry, error) {
	md, err := c.Metadata(ctx, txn.StateTopic)
	if err != nil {
		return nil, err
	}
	var n int32
	for _, t := range md.Topics {
		if t.Name == txn.StateTopic && t.ErrorCode == sluicev1.ErrorCode_NONE {
			n = int32(len(t.Partitions))
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("%s does not exist yet: no transactional id has a history", txn.StateTopic)
	}
	part := txn.PartitionFor(transactionalID, n)
	start, err := c.ListOffsets(ctx, txn.StateTopic, part, sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST, 0)
	if err != nil {
		return nil, err
	}
	hw, _, err := c.Watermarks(ctx, txn.StateTopic, part)
	if err != nil {
		return nil, err
	}
	out := []output.TxnHistoryEntry{}
	if start >= hw {
		return out, nil
	}
	co, err := c.NewConsumer(client.WithIsolation(client.ReadUncommitted))
	if err != nil {
		return nil, err
	}
	defer co.Close()
	if err := co.Assign(txn.StateTopic, part, start); err != nil {
		return nil, err
	}
	for {
		if pos, ok := co.Position(txn.StateTopic, part); ok && pos >= hw {
			return out, nil
		}
		recs, err := co.Poll(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r.Offset >= hw {
				return out, nil
			}
			if string(r.Key) != transactionalID {
				continue
			}
			m, err := txn.DecodeRecord(r.Key, r.Value)
			if err != nil {
				return nil, fmt.Errorf("%s partition %d offset %d: %w", txn.StateTopic, part, r.Offset, err)
			}
			out = append(out, historyEntry(r.Offset, r.Timestamp, m))
		}
	}
}

// historyEntry converts a decoded record.
func historyEntry(offset, ts int64, m txn.Metadata) output.TxnHistoryEntry {
	e := output.TxnHistoryEntry{Offset: offset, TimestampMs: ts, State: m.State.String(), Topics: []output.TxnTopic{},
		ProducerID: -1, ProducerEpoch: -1, LastProducerEpoch: -1, StartTimeMs: -1, UpdateTimeMs: -1}
	if m.State == txn.Dead {
		return e
	}
	e.ProducerID, e.ProducerEpoch, e.LastProducerEpoch = m.ProducerID, int32(m.ProducerEpoch), int32(m.LastProducerEpoch)
	e.TimeoutMs, e.StartTimeMs, e.UpdateTimeMs = m.TimeoutMs, m.StartTimeMs, m.UpdateTimeMs
	for _, tp := range m.Partitions { // sorted by topic, then partition
		if k := len(e.Topics); k == 0 || e.Topics[k-1].Name != tp.Topic {
			e.Topics = append(e.Topics, output.TxnTopic{Name: tp.Topic})
		}
		last := &e.Topics[len(e.Topics)-1]
		last.Partitions = append(last.Partitions, tp.Partition)
	}
	return e
}

// printHistory prints a transactional id's history as a table.
func printHistory(w io.Writer, h []output.TxnHistoryEntry) {
	fmt.Fprintf(w, "History (%s):\n", txn.StateTopic)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  OFFSET\tSTATE\tPRODUCER ID\tEPOCH\tLAST EPOCH\tPARTITIONS\tSTARTED\tUPDATED")
	for _, e := range h {
		var parts []string
		for _, tp := range e.Topics {
			ps := make([]string, len(tp.Partitions))
			for i, p := range tp.Partitions {
				ps[i] = strconv.Itoa(int(p))
			}
			parts = append(parts, tp.Name+":"+strings.Join(ps, ","))
		}
		pt := strings.Join(parts, " ")
		if pt == "" {
			pt = "-"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", e.Offset, e.State, e.ProducerID, e.ProducerEpoch, e.LastProducerEpoch, pt,
			timeText(e.StartTimeMs), timeText(e.UpdateTimeMs))
	}
	_ = tw.Flush()
}
