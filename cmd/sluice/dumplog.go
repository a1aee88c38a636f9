package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/proto/batch"
)

// dumpLog decodes a .log segment offline, one line per batch in the
// style of kafka-dump-log, optionally one line per record. A torn tail
// (the file ends inside a frame) is reported, not fatal; a frame that is
// not a frame at all stops the dump with an error.
func (e *env) dumpLog(args []string) error {
	fs := e.newFlags("dump-log", "dump-log PATH [--records]\n\nDecodes a .log segment file offline and verifies every batch.")
	records := fs.Bool("records", false, "print every record")
	pos, err := e.parse(fs, args, 1)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(pos[0])
	if err != nil {
		return fmt.Errorf("dump-log: %w", err)
	}
	w := bufio.NewWriterSize(e.stdout, 256<<10)
	defer w.Flush()
	fmt.Fprintf(w, "Dumping %s\n", pos[0])
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
		if verr != nil {
			fmt.Fprintf(w, " error: %v", verr)
		}
		w.WriteByte('\n')
		if *records && verr == nil {
			err := batch.ForEachRecord(b, func(r batch.Record) error {
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
