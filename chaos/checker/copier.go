package checker

import "fmt"

// checkCopier judges a transactional copier (History.Copier): every input
// record (a write to an input partition, placed by its acknowledgement or
// where it was read) below the partition's final committed position must
// have exactly one copy visible to read_committed sessions, and none at
// or above it; an input record of a transaction that read_committed does
// not see (aborted, or unknown and invisible) must have none. A copy is a
// write whose CopyOf is the input value; it is
// visible when a read_committed session read it. Input writes that were
// never placed (unknown, never read) are not judged: the final read
// reads every partition to its end, so they are not in the log.
//
// It returns a note saying how many input records were judged, so that a
// run shows the check was not vacuous.
func (x *index) checkCopier(f *Finding) string {
	h := x.h
	copies := map[string][]int{} // input value → copy writes
	for i, w := range h.Writes {
		if w.CopyOf != "" && x.writeOf[w.Value] == i {
			copies[w.CopyOf] = append(copies[w.CopyOf], i)
		}
	}
	judged := [3]int{} // input records above the position, below it, of invisible transactions
	committed := map[string]bool{}
	for _, rd := range h.Reads {
		if rd.Committed {
			committed[rd.Value] = true
		}
	}
	for i, w := range h.Writes {
		end, input := h.Copier.Ends[w.Partition]
		if !input || w.CopyOf != "" || x.writeOf[w.Value] != i {
			continue
		}
		off, placed := x.knownOffset(i)
		if !placed {
			continue
		}
		// A transactional input record exists for the copier only if
		// read_committed sees it (committed, or unknown and visible).
		hidden := w.Txn != "" && !committed[w.Value]
		var visible []string
		for _, c := range copies[w.Value] {
			if committed[h.Writes[c].Value] {
				visible = append(visible, h.Writes[c].Value)
			}
		}
		want := 1
		switch {
		case hidden:
			want = 0
			judged[2]++
		case off >= end:
			want = 0
			judged[0]++
		default:
			judged[1]++
		}
		if len(visible) != want {
			f.add(func() string {
				return fmt.Sprintf("input %q at p%d@%d (copier position %d): %d copies visible to read_committed %q, want %d (%d written)",
					w.Value, w.Partition, off, end, len(visible), visible, want, len(copies[w.Value]))
			})
		}
	}
	return fmt.Sprintf("copier: %d input records below its final positions judged (exactly one copy each), %d above and %d of transactions invisible to read_committed (none)",
		judged[1], judged[0], judged[2])
}
