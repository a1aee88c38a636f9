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

// lastMarkers says where the markers of the transaction that h's last
// record completed landed, when h ends with CompleteCommit or
// CompleteAbort: the partitions and marker epoch are those of the
// Prepare* record before it (TV2: markers carry its bumped epoch), and
// each partition's leader is asked for its producer state
// (DescribeProducers): while the producer has written nothing there since
// the marker (same epoch, no sequence, nothing open), its last offset is
// the marker's. Otherwise the offset is -1 with a note; nil when h does
// not end with a Complete* record.
func lastMarkers(ctx context.Context, c *client.Client, h []output.TxnHistoryEntry) []output.TxnMarker {
	n := len(h)
	if n < 2 || (h[n-1].State != "CompleteCommit" && h[n-1].State != "CompleteAbort") {
		return nil
	}
	var prep *output.TxnHistoryEntry
	for i := n - 2; i >= 0 && prep == nil; i-- {
		if h[i].State == "PrepareCommit" || h[i].State == "PrepareAbort" {
			prep = &h[i]
		}
	}
	if prep == nil {
		return nil // compacted away
	}
	out := []output.TxnMarker{}
	for _, tp := range prep.Topics {
		for _, part := range tp.Partitions {
			m := output.TxnMarker{Topic: tp.Name, Partition: part, Offset: -1}
			ps, err := c.DescribeProducers(ctx, tp.Name, part)
			switch {
			case err != nil:
				m.Note = err.Error()
			default:
				m.Note = fmt.Sprintf("the partition no longer remembers producer %d", prep.ProducerID)
				for _, p := range ps {
					if p.ProducerId != prep.ProducerID {
						continue
					}
					if p.ProducerEpoch == prep.ProducerEpoch && p.LastSequence < 0 && p.CurrentTxnStartOffset < 0 {
						m.Offset, m.Note = p.LastOffset, ""
					} else {
						m.Note = fmt.Sprintf("the producer wrote here since (epoch %d, last offset %d)", p.ProducerEpoch, p.LastOffset)
					}
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// printMarkers prints where the last transaction's markers landed.
func printMarkers(w io.Writer, h []output.TxnHistoryEntry, ms []output.TxnMarker) {
	if len(ms) == 0 {
		return
	}
	fmt.Fprintf(w, "Markers of the transaction completed at offset %d (%s):\n", h[len(h)-1].Offset, h[len(h)-1].State)
	for _, m := range ms {
		if m.Offset >= 0 {
			fmt.Fprintf(w, "  %s-%d: offset %d\n", m.Topic, m.Partition, m.Offset)
		} else {
			fmt.Fprintf(w, "  %s-%d: unknown (%s)\n", m.Topic, m.Partition, m.Note)
		}
	}
}
