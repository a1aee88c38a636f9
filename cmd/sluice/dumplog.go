package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-io/sluice/coordinator/group"
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
	if !strings.HasSuffix(pos[0], ".log") {
		return fmt.Errorf("dump-log: %s is not a segment: give a .log file (or its .txnindex) from a partition's directory, e.g. <data-dir>/<topic>-<partition>/00000000000000000000.log", pos[0])
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

// offsetsRecord decodes a __consumer_offsets record (coordinator/group):
// a group's committed offset of a partition, its epoch or a member
// (decision 72), a tombstone, or
// why it does not decode (--offsets-decoder, Kafka's kafka-dump-log
// option of that name).
func offsetsRecord(r batch.Record) string {
	k, err := group.DecodeKey(r.Key)
	if err != nil {
		return fmt.Sprintf("key: %s payload: %s decodeError: %v", quote(r.Key), quote(r.Value), err)
	}
	switch k.Type {
	case group.KeyOffset:
		key := fmt.Sprintf("offset_commit::group=%s,partition=%s-%d", k.Group, k.Topic, k.Partition)
		if r.Value == nil {
			return "key: " + key + " payload: <DELETE>"
		}
		o, err := group.DecodeOffsetValue(r.Value)
		if err != nil {
			return fmt.Sprintf("key: %s payload: %s decodeError: %v", key, quote(r.Value), err)
		}
		return fmt.Sprintf("key: %s payload: offset=%d leaderEpoch=%d metadata=%q commitTimestamp=%d", key, o.Offset, o.LeaderEpoch, o.Metadata, o.CommitTimeMs)
	case group.KeyMember:
		key := fmt.Sprintf("consumer_group_member::group=%s,member=%s", k.Group, k.Member)
		if r.Value == nil {
			return "key: " + key + " payload: <DELETE>"
		}
		m, err := group.DecodeMemberValue(r.Value)
		if err != nil {
			return fmt.Sprintf("key: %s payload: %s decodeError: %v", key, quote(r.Value), err)
		}
		return fmt.Sprintf("key: %s payload: epoch=%d previousEpoch=%d state=%s assigned=%s pending=%s target=%s topics=%s instance=%q",
			key, m.Epoch, m.PreviousEpoch, m.State, m.Assigned, m.Pending, m.Target, strings.Join(m.Topics, ","), m.InstanceID)
	default:
		key := "group_metadata::group=" + k.Group
		if r.Value == nil {
			return "key: " + key + " payload: <DELETE>"
		}
		g, err := group.DecodeGroupValue(r.Value)
		if err != nil {
			return fmt.Sprintf("key: %s payload: %s decodeError: %v", key, quote(r.Value), err)
		}
		if g.Classic == nil && g.AssignmentEpoch != 0 {
			return fmt.Sprintf("key: %s payload: epoch=%d assignmentEpoch=%d timestamp=%d", key, g.Epoch, g.AssignmentEpoch, g.TimeMs)
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

// batchDump is one batch of a segment as dump-log prints it; with
// --output json each is one JSON line.
type batchDump struct {
	BaseOffset           int64        `json:"baseOffset"`
	LastOffset           int64        `json:"lastOffset"`
	Count                int32        `json:"count"`
	BaseSequence         int32        `json:"baseSequence"`
	LastSequence         int32        `json:"lastSequence"`
	ProducerID           int64        `json:"producerId"`
	ProducerEpoch        int32        `json:"producerEpoch"`
	PartitionLeaderEpoch int32        `json:"partitionLeaderEpoch"`
	IsTransactional      bool         `json:"isTransactional"`
	IsControl            bool         `json:"isControl"`
	Position             int          `json:"position"`
	TimestampType        string       `json:"timestampType"`
	MaxTimestamp         int64        `json:"maxTimestamp"`
	Size                 int          `json:"size"`
	CompressCodec        string       `json:"compressCodec"`
	CRC                  uint32       `json:"crc"`
	IsValid              bool         `json:"isValid"`
	ControlRecord        string       `json:"controlRecord,omitempty"`
	Error                string       `json:"error,omitempty"`
	Records              []recordDump `json:"records,omitempty"`
	RecordsError         string       `json:"recordsError,omitempty"`
	// TornTail is set on the last line instead of a batch: the trailing
	// bytes at Position that do not form a whole frame.
	TornTail int `json:"tornTailBytes,omitempty"`
	// noHeader: the batch header itself does not parse (only Position,
	// Size and Error are set).
	noHeader bool
}

// recordDump is one record of --records. Decoded is the
// --transaction-log-decoder / --offsets-decoder / marker description;
// otherwise Key (null when absent), Value and Headers are the raw bytes
// as text.
type recordDump struct {
	Offset    int64   `json:"offset"`
	Timestamp int64   `json:"timestamp"`
	Decoded   string  `json:"decoded,omitempty"`
	Key       *string `json:"key,omitempty"`
	Value     *string `json:"value,omitempty"`
	// KeyBase64 and ValueBase64 replace Key and Value when the bytes are
	// not UTF-8 (JSON strings cannot carry them).
	KeyBase64   []byte       `json:"keyBase64,omitempty"`
	ValueBase64 []byte       `json:"valueBase64,omitempty"`
	Headers     []headerDump `json:"headers,omitempty"`
}

type headerDump struct {
	Key   string `json:"key"`
	Value string `json:"value"`
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
	enc := json.NewEncoder(w)
	if !e.g.json() {
		fmt.Fprintf(w, "Dumping %s\n", path)
	}
	position := 0
	invalid := 0
	for position < len(data) {
		b, size, err := batch.NextFrame(data[position:])
		if errors.Is(err, batch.ErrShortFrame) {
			if e.g.json() {
				_ = enc.Encode(batchDump{Position: position, TornTail: len(data) - position})
			} else {
				verb := "do"
				if len(data)-position == 1 {
					verb = "does"
				}
				fmt.Fprintf(w, "torn tail at position: %d: %s %s not form a whole frame\n", position, plural(len(data)-position, "trailing byte"), verb)
			}
			break
		}
		if err != nil {
			w.Flush()
			return fmt.Errorf("dump-log: position %d: %w", position, err)
		}
		d, valid := dumpBatch(b, position, records, decode)
		if !valid {
			invalid++
		}
		if e.g.json() {
			if err := enc.Encode(d); err != nil {
				return fmt.Errorf("dump-log: %w", err)
			}
		} else {
			printBatch(w, d)
		}
		position += size
	}
	if invalid > 0 {
		w.Flush()
		return fmt.Errorf("dump-log: %s", plural(invalid, "invalid batch"))
	}
	return nil
}

// dumpBatch describes batch b at position; valid is false when it fails
// verification.
func dumpBatch(b []byte, position int, records bool, decode recordDecoder) (d batchDump, valid bool) {
	h, verr := batch.Verify(b)
	if verr != nil {
		var err error
		if h, err = batch.ParseHeader(b); err != nil {
			return batchDump{Position: position, Size: len(b), Error: verr.Error(), noHeader: true}, false
		}
	}
	tsType := "CreateTime"
	if h.Attributes&batch.AttrLogAppendTime != 0 {
		tsType = "LogAppendTime"
	}
	d = batchDump{BaseOffset: h.BaseOffset, LastOffset: h.LastOffset(), Count: h.RecordCount, BaseSequence: h.BaseSequence,
		LastSequence: h.LastSequence(), ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
		PartitionLeaderEpoch: h.PartitionLeaderEpoch, IsTransactional: h.IsTransactional(), IsControl: h.IsControl(),
		Position: position, TimestampType: tsType, MaxTimestamp: h.MaxTimestamp, Size: len(b), CompressCodec: h.Codec().String(), CRC: h.CRC, IsValid: verr == nil}
	if verr != nil {
		d.Error = verr.Error()
		return d, false
	}
	if h.IsControl() {
		d.ControlRecord = controlRecord(b)
	}
	if !records {
		return d, true
	}
	err := batch.ForEachRecord(b, func(r batch.Record) error {
		rd := recordDump{Offset: r.Offset, Timestamp: r.Timestamp}
		switch {
		case h.IsControl():
			rd.Decoded = marker(r)
		case decode != nil:
			rd.Decoded = decode(r)
		default:
			switch k := string(r.Key); {
			case r.Key == nil:
			case utf8.ValidString(k):
				rd.Key = &k
			default:
				rd.KeyBase64 = r.Key
			}
			if v := string(r.Value); utf8.ValidString(v) {
				rd.Value = &v
			} else {
				rd.ValueBase64 = r.Value
			}
			for _, hd := range r.Headers {
				rd.Headers = append(rd.Headers, headerDump{hd.Key, string(hd.Value)})
			}
		}
		d.Records = append(d.Records, rd)
		return nil
	})
	if err != nil {
		d.RecordsError = err.Error()
	}
	return d, true
}

// printBatch prints d as kafka-dump-log does: one line for the batch, one
// per record.
func printBatch(w *bufio.Writer, d batchDump) {
	if d.noHeader {
		fmt.Fprintf(w, "position: %d size: %d isvalid: false error: %s\n", d.Position, d.Size, d.Error)
		return
	}
	fmt.Fprintf(w, "baseOffset: %d lastOffset: %d count: %d baseSequence: %d lastSequence: %d producerId: %d producerEpoch: %d partitionLeaderEpoch: %d isTransactional: %t isControl: %t position: %d %s: %d size: %d compresscodec: %s crc: %d isvalid: %t",
		d.BaseOffset, d.LastOffset, d.Count, d.BaseSequence, d.LastSequence, d.ProducerID, d.ProducerEpoch,
		d.PartitionLeaderEpoch, d.IsTransactional, d.IsControl, d.Position, d.TimestampType, d.MaxTimestamp, d.Size, d.CompressCodec, d.CRC, d.IsValid)
	if d.ControlRecord != "" {
		fmt.Fprintf(w, " %s", d.ControlRecord)
	}
	if d.Error != "" {
		fmt.Fprintf(w, " error: %s", d.Error)
	}
	w.WriteByte('\n')
	for _, r := range d.Records {
		if r.Decoded != "" {
			fmt.Fprintf(w, "| offset: %d %s: %d %s\n", r.Offset, d.TimestampType, r.Timestamp, r.Decoded)
			continue
		}
		key, size := "null", -1
		switch {
		case r.Key != nil:
			key, size = quote([]byte(*r.Key)), len(*r.Key)
		case r.KeyBase64 != nil:
			key, size = quote(r.KeyBase64), len(r.KeyBase64)
		}
		value := r.ValueBase64
		if r.Value != nil {
			value = []byte(*r.Value)
		}
		hs := make([]string, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = quote([]byte(h.Key)) + "=" + quote([]byte(h.Value))
		}
		fmt.Fprintf(w, "| offset: %d %s: %d keySize: %d valueSize: %d key: %s payload: %s headers: [%s]\n",
			r.Offset, d.TimestampType, r.Timestamp, size, len(value), key, quote(value), strings.Join(hs, ", "))
	}
	if d.RecordsError != "" {
		fmt.Fprintf(w, "| records: %s\n", d.RecordsError)
	}
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
	enc := json.NewEncoder(w)
	if !e.g.json() {
		fmt.Fprintf(w, "Dumping %s\n", path)
	}
	for i, t := range ents {
		if e.g.json() {
			_ = enc.Encode(struct {
				ProducerID       int64 `json:"producerId"`
				FirstOffset      int64 `json:"firstOffset"`
				LastOffset       int64 `json:"lastOffset"`
				LastStableOffset int64 `json:"lastStableOffset"`
				Position         int   `json:"position"`
			}{t.ProducerID, t.FirstOffset, t.LastOffset, t.LastStableOffset, i * storage.TxnIndexEntrySize})
			continue
		}
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
