package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/coordinator/offsets"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/storage"
)

// dumpLog decodes a .log segment offline, one line per batch in the
// style of kafka-dump-log, optionally one line per record. A torn tail
// (the file ends inside a frame) is reported, not fatal; a frame that is
// not a frame at all stops the dump with an error. A control batch's line
// says which transaction marker it holds. The segment's .txnindex, when
// there is one beside it, is dumped after it; a .txnindex path dumps that
// file alone. Files are only read.
func (e *env) dumpLog(args []string) error {
	fs := e.newFlags("dump-log", "dump-log PATH [--records] [--transaction-log-decoder | --offsets-decoder]\n\nDecodes a .log segment file offline and verifies every batch, then its .txnindex\n(aborted transactions) if there is one beside it. PATH may also be a .txnindex.")
	records := fs.Bool("records", false, "print every record")
	txnDecoder := fs.Bool("transaction-log-decoder", false, "decode records as __transaction_state records (implies --records)")
	offsetsDecoder := fs.Bool("offsets-decoder", false, "decode records as __consumer_offsets records: committed offsets and group epochs (implies --records)")
	pos, err := e.parse(fs, args, 1)
	if err != nil {
		return err
	}
	var decode recordDecoder
	switch {
	case *txnDecoder && *offsetsDecoder:
		return fmt.Errorf("--transaction-log-decoder and --offsets-decoder decode different topics: give one")
	case *txnDecoder:
		*records, decode = true, transactionLogRecord
	case *offsetsDecoder:
		*records, decode = true, offsetsRecord
	}
	if strings.HasSuffix(pos[0], ".txnindex") {
		return e.dumpTxnIndex(pos[0])
	}
	err = e.dumpSegment(pos[0], *records, decode)
	// The index is dumped even when the segment has invalid batches: the
	// operator looking at a damaged segment wants to see both.
	if idx := strings.TrimSuffix(pos[0], ".log") + ".txnindex"; idx != pos[0] {
		if _, serr := os.Stat(idx); serr == nil {
			err = errors.Join(err, e.dumpTxnIndex(idx))
		}
	}
	return err
}

// recordDecoder describes a data record's key and payload for
// --records; nil prints them quoted.
type recordDecoder func(r batch.Record) string

// transactionLogRecord decodes a __transaction_state record
// (txn.DecodeRecord): the transactional id and every field of its state,
// or why it does not decode (--transaction-log-decoder, Kafka's
// kafka-dump-log option of that name).
func transactionLogRecord(r batch.Record) string {
	m, err := txn.DecodeRecord(r.Key, r.Value)
	if err != nil {
		return fmt.Sprintf("key: %s payload: %s decodeError: %v", quote(r.Key), quote(r.Value), err)
	}
	if m.State == txn.Dead {
		return fmt.Sprintf("key: transaction_metadata::transactionalId=%s payload: <DELETE>", m.TransactionalID)
	}
	return fmt.Sprintf("key: transaction_metadata::transactionalId=%s payload: state=%s producerId=%d producerEpoch=%d lastProducerEpoch=%d previousProducerId=%d nextProducerId=%d timeoutMs=%d partitions=[%s] txnStartTimestamp=%d txnLastUpdateTimestamp=%d",
		m.TransactionalID, m.State, m.ProducerID, m.ProducerEpoch, m.LastProducerEpoch, m.PrevProducerID, m.NextProducerID,
		m.TimeoutMs, txnPartitions(m.Partitions), m.StartTimeMs, m.UpdateTimeMs)
}

// offsetsRecord decodes a __consumer_offsets record (coordinator/offsets):
// a group's committed offset of a partition or its epoch, a tombstone, or
// why it does not decode (--offsets-decoder, Kafka's kafka-dump-log
// option of that name).
func offsetsRecord(r batch.Record) string {
	k, err := offsets.DecodeKey(r.Key)
	if err != nil {
		return fmt.Sprintf("key: %s payload: %s decodeError: %v", quote(r.Key), quote(r.Value), err)
	}
	switch k.Type {
	case offsets.KeyOffset:
		key := fmt.Sprintf("offset_commit::group=%s,partition=%s-%d", k.Group, k.Topic, k.Partition)
		if r.Value == nil {
			return "key: " + key + " payload: <DELETE>"
		}
		o, err := offsets.DecodeOffsetValue(r.Value)
		if err != nil {
			return fmt.Sprintf("key: %s payload: %s decodeError: %v", key, quote(r.Value), err)
		}
		return fmt.Sprintf("key: %s payload: offset=%d leaderEpoch=%d metadata=%q commitTimestamp=%d", key, o.Offset, o.LeaderEpoch, o.Metadata, o.CommitTimeMs)
	default:
		key := "group_metadata::group=" + k.Group
		if r.Value == nil {
			return "key: " + key + " payload: <DELETE>"
		}
		g, err := offsets.DecodeGroupValue(r.Value)
		if err != nil {
			return fmt.Sprintf("key: %s payload: %s decodeError: %v", key, quote(r.Value), err)
		}
		return fmt.Sprintf("key: %s payload: epoch=%d timestamp=%d", key, g.Epoch, g.TimeMs)
	}
}

// txnPartitions prints a transaction's partitions as topic-partition,
// comma separated.
func txnPartitions(ps []txn.TopicPartition) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("%s-%d", p.Topic, p.Partition)
	}
	return strings.Join(out, ",")
}

// dumpSegment is dumpLog for a .log file; decode, when not nil, describes
// each data record.
func (e *env) dumpSegment(path string, records bool, decode recordDecoder) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("dump-log: %w", err)
	}
	w := bufio.NewWriterSize(e.stdout, 256<<10)
	defer w.Flush()
	fmt.Fprintf(w, "Dumping %s\n", path)
	position := 0
	invalid := 0
	for position < len(data) {
		b, size, err := batch.NextFrame(data[position:])
		if errors.Is(err, batch.ErrShortFrame) {
			fmt.Fprintf(w, "torn tail at position: %d: %d trailing bytes do not form a whole frame\n", position, len(data)-position)
			break
		}
		if err != nil {
			w.Flush()
			return fmt.Errorf("dump-log: position %d: %w", position, err)
		}
		h, verr := batch.Verify(b)
		if verr != nil {
			invalid++
			if h, err = batch.ParseHeader(b); err != nil {
				fmt.Fprintf(w, "position: %d size: %d isvalid: false error: %v\n", position, len(b), verr)
				position += size
				continue
			}
		}
		tsType := "CreateTime"
		if h.Attributes&batch.AttrLogAppendTime != 0 {
			tsType = "LogAppendTime"
		}
		fmt.Fprintf(w, "baseOffset: %d lastOffset: %d count: %d baseSequence: %d lastSequence: %d producerId: %d producerEpoch: %d partitionLeaderEpoch: %d isTransactional: %t isControl: %t position: %d %s: %d size: %d crc: %d isvalid: %t",
			h.BaseOffset, h.LastOffset(), h.RecordCount, h.BaseSequence, h.LastSequence(), h.ProducerID, h.ProducerEpoch,
			h.PartitionLeaderEpoch, h.IsTransactional(), h.IsControl(), position, tsType, h.MaxTimestamp, len(b), h.CRC, verr == nil)
		if verr == nil && h.IsControl() {
			fmt.Fprintf(w, " %s", controlRecord(b))
		}
		if verr != nil {
			fmt.Fprintf(w, " error: %v", verr)
		}
		w.WriteByte('\n')
		if records && verr == nil {
			err := batch.ForEachRecord(b, func(r batch.Record) error {
				if h.IsControl() {
					fmt.Fprintf(w, "| offset: %d %s: %d %s\n", r.Offset, tsType, r.Timestamp, marker(r))
					return nil
				}
				if decode != nil {
					fmt.Fprintf(w, "| offset: %d %s: %d %s\n", r.Offset, tsType, r.Timestamp, decode(r))
					return nil
				}
				fmt.Fprintf(w, "| offset: %d %s: %d keySize: %d valueSize: %d key: %s payload: %s headers: [%s]\n",
					r.Offset, tsType, r.Timestamp, sizeOf(r.Key), len(r.Value), quote(r.Key), quote(r.Value), headers(r.Headers))
				return nil
			})
			if err != nil {
				fmt.Fprintf(w, "| records: %v\n", err)
			}
		}
		position += size
	}
	if invalid > 0 {
		w.Flush()
		return fmt.Errorf("dump-log: %d invalid batches", invalid)
	}
	return nil
}

// controlRecord describes the control record of control batch b: its
// transaction marker, as kafka-dump-log prints it.
func controlRecord(b []byte) string {
	desc := "controlRecord: none"
	errStop := errors.New("stop")
	err := batch.ForEachRecord(b, func(r batch.Record) error {
		desc = marker(r)
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		desc = fmt.Sprintf("controlRecord: %v", err)
	}
	return desc
}

// marker describes control record r: "endTxnMarker: COMMIT
// coordinatorEpoch: 3", or why it is not a transaction marker.
func marker(r batch.Record) string {
	t, epoch, err := batch.ParseMarker(r.Key, r.Value)
	if err != nil {
		return fmt.Sprintf("controlRecord: %v", err)
	}
	return fmt.Sprintf("endTxnMarker: %s coordinatorEpoch: %d", t, epoch)
}

// dumpTxnIndex prints a segment's aborted-transaction index, one line per
// entry (docs/record-format.md). A torn or implausible entry ends the dump
// with an error naming the file and the entry's byte position, after the
// entries before it; the file is only read.
func (e *env) dumpTxnIndex(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("dump-log: %w", err)
	}
	// The base offset is the file's name; without it, marker offsets are
	// checked against 0 only.
	base, _ := strconv.ParseInt(strings.TrimSuffix(filepath.Base(path), ".txnindex"), 10, 64)
	ents, derr := storage.DecodeTxnIndex(data, base)
	w := bufio.NewWriter(e.stdout)
	fmt.Fprintf(w, "Dumping %s\n", path)
	for i, t := range ents {
		fmt.Fprintf(w, "abortedTxn: producerId: %d firstOffset: %d lastOffset: %d lastStableOffset: %d position: %d\n",
			t.ProducerID, t.FirstOffset, t.LastOffset, t.LastStableOffset, i*storage.TxnIndexEntrySize)
	}
	w.Flush()
	if derr != nil {
		return fmt.Errorf("dump-log: %s: %w", path, derr)
	}
	return nil
}

func sizeOf(b []byte) int {
	if b == nil {
		return -1
	}
	return len(b)
}

// quote prints bytes as text, escaping what is not printable.
func quote(b []byte) string {
	if b == nil {
		return "null"
	}
	q := strconv.Quote(string(b))
	return q[1 : len(q)-1]
}

func headers(hs []batch.RecordHeader) string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = quote([]byte(h.Key)) + "=" + quote(h.Value)
	}
	return strings.Join(s, ", ")
}
