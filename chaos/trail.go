package chaos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluice-io/sluice/chaos/checker"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/storage"
)

// The duplicate trail: when the checker finds a value stored twice, the
// report says where, but not why. Whether the second copy carries the same
// producer id, epoch and sequence as the first (a broker that failed to
// recognise a retry) or a bumped epoch (a client that renumbered a batch
// it should not have) decides which layer is wrong, and only the stored
// batch headers tell. writeDuplicateTrail prints them for a few duplicated
// values, with the writes' outcomes from the history and the node log
// lines about the partition, so one failed run is enough to find the
// cause.

// trailValues bounds how many duplicated values the trail describes, and
// trailLogLines how many log lines per node and partition it shows.
const (
	trailValues   = 4
	trailLogLines = 40
)

// storedBatch is one batch's header as a replica stores it.
type storedBatch struct {
	node      int32
	log       int32 // the history's partition number (WorkloadConfig.logOf)
	base      int64
	last      int64
	producer  int64
	epoch     int32
	seq       int32
	leaderEp  int32
	txn       bool
	control   bool
	appendAt  int64 // max timestamp, ms
	valueAt   int64 // the offset of the traced value, or -1
	valueName string
}

func (b storedBatch) String() string {
	kind := "data"
	switch {
	case b.control:
		kind = "marker"
	case b.txn:
		kind = "txn"
	}
	return fmt.Sprintf("node %d offsets %d-%d %s producer %d epoch %d seq %d leader-epoch %d time %s",
		b.node, b.base, b.last, kind, b.producer, b.epoch, b.seq, b.leaderEp,
		time.UnixMilli(b.appendAt).UTC().Format("15:04:05.000"))
}

// writeDuplicateTrail writes the trail of the values stored at more than
// one offset of a partition of some replica (at most trailValues).
func writeDuplicateTrail(w io.Writer, c *Cluster, wc WorkloadConfig, h checker.History) {
	type key struct {
		node int32
		log  int32
	}
	occurrences := map[string][]storedBatch{} // value → batches holding it
	batches := map[key][]storedBatch{}
	for _, n := range c.Nodes {
		for log := int32(0); log < wc.logs(); log++ {
			topic, p := wc.topicPartition(log)
			if wc.rdkCopier() && topic == wc.rdkOutput() {
				// An aborted copy and its committed retry carry one
				// value there (rdk_copier.go): stored twice by design.
				continue
			}
			dir := filepath.Join(n.DataDir, "logs", fmt.Sprintf("%s-%d", topic, p))
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			err := scanStoredBatches(dir, func(sb storedBatch, values map[int64]string) {
				sb.node, sb.log = n.ID, log
				batches[key{n.ID, log}] = append(batches[key{n.ID, log}], sb)
				for off, v := range values {
					o := sb
					o.valueAt, o.valueName = off, v
					occurrences[v] = append(occurrences[v], o)
				}
			})
			if err != nil {
				fmt.Fprintf(w, "chaos: trail: node %d %s partition %d: %v\n", n.ID, topic, p, err)
			}
		}
	}
	var dups []string
	for v, occ := range occurrences {
		perNode := map[int32]int{}
		for _, o := range occ {
			perNode[o.node]++
		}
		for _, k := range perNode {
			if k > 1 {
				dups = append(dups, v)
				break
			}
		}
	}
	if len(dups) == 0 {
		return
	}
	slices.SortFunc(dups, func(a, b string) int {
		oa, ob := occurrences[a][0], occurrences[b][0]
		if oa.log != ob.log {
			return int(oa.log - ob.log)
		}
		return int(min(max(oa.valueAt-ob.valueAt, -1), 1))
	})
	writes := map[string]checker.Write{}
	for _, wr := range h.Writes {
		writes[wr.Value] = wr
	}
	fmt.Fprintf(w, "chaos: trail: %d values stored more than once in a replica; the first %d:\n", len(dups), min(len(dups), trailValues))
	logsShown := map[int32]bool{}
	for _, v := range dups[:min(len(dups), trailValues)] {
		wr, ok := writes[v]
		if ok {
			fmt.Fprintf(w, "  value %q: written by %s, invoked %s, completed %s, outcome %v offset %d err %q\n", v, wr.Producer,
				wr.Invoke.UTC().Format("15:04:05.000"), wr.Complete.UTC().Format("15:04:05.000"), wr.Outcome, wr.Offset, wr.Err)
		} else {
			fmt.Fprintf(w, "  value %q: not in the history\n", v)
		}
		occ := occurrences[v]
		slices.SortFunc(occ, func(a, b storedBatch) int {
			if a.node != b.node {
				return int(a.node - b.node)
			}
			return int(min(max(a.valueAt-b.valueAt, -1), 1))
		})
		// In full on the first node holding it more than once; other
		// nodes' offsets only (replicas that agree hold the same batches).
		first := int32(-1)
		perNode := map[int32][]int64{}
		for _, o := range occ {
			perNode[o.node] = append(perNode[o.node], o.valueAt)
			if first < 0 && len(perNode[o.node]) > 1 {
				first = o.node
			}
		}
		shownOcc := 0
		for _, o := range occ {
			if o.node == first {
				if shownOcc++; shownOcc <= 6 {
					fmt.Fprintf(w, "    at %d in %s\n", o.valueAt, o)
				}
			}
		}
		for _, n := range c.Nodes {
			if n.ID != first && len(perNode[n.ID]) > 0 {
				fmt.Fprintf(w, "    node %d holds it at %v\n", n.ID, perNode[n.ID])
			}
		}
		// The batches between the first two copies on the first node
		// holding two: whose writes came in between.
		for _, o := range occ {
			var at []int64
			for _, x := range occ {
				if x.node == o.node {
					at = append(at, x.valueAt)
				}
			}
			if len(at) < 2 {
				continue
			}
			fmt.Fprintf(w, "    batches on node %d from %d to %d:\n", o.node, at[0], at[1])
			shown := 0
			for _, b := range batches[key{o.node, o.log}] {
				if b.last >= at[0] && b.base <= at[1] {
					if shown++; shown > 30 {
						fmt.Fprintf(w, "      ...\n")
						break
					}
					fmt.Fprintf(w, "      %s\n", b)
				}
			}
			break
		}
		if lg := occ[0].log; !logsShown[lg] {
			logsShown[lg] = true
			topic, p := wc.topicPartition(lg)
			for _, n := range c.Nodes {
				lines := grepLog(n.LogPath, fmt.Sprintf("topic=%s partition=%d", topic, p), trailLogLines)
				fmt.Fprintf(w, "    node %d log, lines about %s/%d (last %d):\n", n.ID, topic, p, len(lines))
				for _, l := range lines {
					fmt.Fprintf(w, "      %s\n", l)
				}
			}
		}
	}
}

// scanStoredBatches calls fn for every batch of the log in dir, with its
// records' values by offset (control records left out).
func scanStoredBatches(dir string, fn func(storedBatch, map[int64]string)) error {
	l, err := storage.Open(dir, storage.DefaultConfig(), time.Now())
	if err != nil {
		return err
	}
	defer l.Close()
	end := l.EndOffset()
	for off := l.StartOffset(); off < end; {
		res, err := l.Read(off, 1<<20, end)
		if err != nil {
			return err
		}
		if len(res.Batches) == 0 {
			return nil
		}
		for _, b := range res.Batches {
			h, err := batch.ParseHeader(b)
			if err != nil {
				return err
			}
			sb := storedBatch{base: h.BaseOffset, last: h.LastOffset(), producer: h.ProducerID, epoch: h.ProducerEpoch,
				seq: h.BaseSequence, leaderEp: h.PartitionLeaderEpoch, txn: h.IsTransactional(), control: h.IsControl(),
				appendAt: h.MaxTimestamp, valueAt: -1}
			values := map[int64]string{}
			if !sb.control {
				if err := batch.ForEachRecord(b, func(r batch.Record) error {
					values[r.Offset] = string(r.Value)
					return nil
				}); err != nil {
					return err
				}
			}
			fn(sb, values)
		}
		off = res.NextOffset
	}
	return nil
}

// grepLog returns the last max lines of the file at path that contain s
// followed by a space or the line's end (so "partition=1" is not
// "partition=12").
func grepLog(path, s string, max int) []string {
	f, err := os.Open(path)
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line+" ", s+" ") {
			out = append(out, line)
			if len(out) > max {
				out = out[1:]
			}
		}
	}
	return out
}
