package checker

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)

// ok, unknown and failed build completed writes; Complete is set so that
// none of them is judged in flight.
func ok(producer string, seq int64, p int32, offset int64, value string) Write {
	return Write{Producer: producer, Partition: p, Seq: seq, Value: value,
		Invoke: t0, Complete: t0.Add(time.Millisecond), Outcome: OK, Offset: offset}
}

func unknown(producer string, seq int64, p int32, value string) Write {
	return Write{Producer: producer, Partition: p, Seq: seq, Value: value,
		Invoke: t0, Complete: t0.Add(time.Second), Outcome: Unknown, Err: "deadline exceeded"}
}

func failed(producer string, seq int64, p int32, value string) Write {
	return Write{Producer: producer, Partition: p, Seq: seq, Value: value,
		Invoke: t0, Complete: t0.Add(time.Millisecond), Outcome: Failed, Err: "record too large"}
}

func read(consumer string, p int32, offset int64, value string) Read {
	return Read{Consumer: consumer, Partition: p, Offset: offset, Value: value, Time: t0.Add(2 * time.Second)}
}

// replica builds a log holding values at offsets 0, 1, 2, ...
func replica(p, node int32, hw int64, values ...string) ReplicaLog {
	rl := ReplicaLog{Partition: p, Node: node, HighWatermark: hw}
	for i, v := range values {
		rl.Records = append(rl.Records, ReplicaRecord{Offset: int64(i), Value: v})
	}
	return rl
}

// clean returns a fresh history with no anomaly but every tricky
// non-anomaly the checker must accept:
//   - OK, Unknown and Failed writes; an Unknown write read once (P2) and
//     one never read (Q1); a Failed write never read (P3);
//   - an in-flight write (R0) whose Outcome field is the zero value OK and
//     Offset 0: judged Unknown, it must neither be a lost/unseen ack nor
//     claim p1@0, which holds P1;
//   - producer P writes to p0 and p1, whose offsets are unrelated;
//   - consumer session c1 reads p0 and p1 interleaved, restarts as c1-2 and
//     re-reads from the start; c2 reads p1 then p0;
//   - replicas agree below the committed end; p0 node 3's and p1 node 1's
//     high watermark checkpoints lag (p1's leader is node 2), p1's
//     uncommitted tail differs between nodes.
func clean() History {
	return History{
		Writes: []Write{
			ok("P", 0, 0, 0, "P0"),
			ok("P", 1, 1, 0, "P1"),
			ok("Q", 0, 0, 1, "Q0"),
			unknown("P", 2, 0, "P2"),
			failed("P", 3, 0, "P3"),
			unknown("Q", 1, 0, "Q1"),
			ok("P", 4, 0, 3, "P4"),
			ok("P", 5, 1, 1, "P5"),
			{Producer: "R", Partition: 1, Seq: 0, Value: "R0", Invoke: t0},
		},
		Reads: []Read{
			read("c1", 0, 0, "P0"),
			read("c1", 1, 0, "P1"),
			read("c1", 0, 1, "Q0"),
			read("c1", 1, 1, "P5"),
			read("c1", 0, 2, "P2"),
			read("c1", 0, 3, "P4"),
			read("c1-2", 0, 0, "P0"),
			read("c1-2", 0, 1, "Q0"),
			read("c2", 1, 0, "P1"),
			read("c2", 1, 1, "P5"),
			read("c2", 0, 0, "P0"),
			read("c2", 0, 1, "Q0"),
			read("c2", 0, 2, "P2"),
			read("c2", 0, 3, "P4"),
		},
		Replicas: []ReplicaLog{
			replica(0, 1, 4, "P0", "Q0", "P2", "P4"),
			replica(0, 2, 4, "P0", "Q0", "P2", "P4"),
			replica(0, 3, 2, "P0", "Q0", "P2", "P4"),
			replica(1, 1, 1, "P1", "P5", "R0"),
			replica(1, 2, 2, "P1", "P5"),
			replica(1, 3, 1, "P1", "P5", "other tail"),
		},
	}
}

// with returns clean() changed by edit.
func with(edit func(h *History)) History {
	h := clean()
	edit(&h)
	return h
}

// dropReads removes the reads for which drop is true.
func dropReads(h *History, drop func(Read) bool) {
	h.Reads = slices.DeleteFunc(h.Reads, drop)
}

// editReads applies edit to every read.
func editReads(h *History, edit func(r *Read)) {
	for i := range h.Reads {
		edit(&h.Reads[i])
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name string
		h    History
		want map[Class]int // classes not listed must report 0
		// example maps a class to text its first example must contain.
		example map[Class]string
	}{
		{
			name: "clean history with every tricky non-anomaly",
			h:    clean(),
		},
		{
			name: "lost-write: reads skip an acknowledged offset",
			h: with(func(h *History) {
				dropReads(h, func(r Read) bool { return r.Value == "Q0" })
			}),
			want:    map[Class]int{LostWrite: 1},
			example: map[Class]string{LostWrite: `value "Q0" from producer "Q" seq 0 (ok at p0@1`},
		},
		{
			// Reads reach the acknowledged offset exactly and find another
			// value there: lost (not unseen), and inconsistent as well.
			name: "lost-write: overwritten at the last offset read",
			h: History{
				Writes: []Write{ok("P", 0, 0, 0, "a"), ok("P", 1, 0, 1, "b"), unknown("Q", 0, 0, "c")},
				Reads:  []Read{read("c1", 0, 0, "a"), read("c1", 0, 1, "c")},
			},
			want: map[Class]int{LostWrite: 1, InconsistentOffset: 1},
			example: map[Class]string{
				LostWrite:          `"b"`,
				InconsistentOffset: `p0@1 holds "b" (acked to producer "P" seq 1`,
			},
		},
		{
			name: "unseen-ack: reads stop before the acknowledged offset",
			h: with(func(h *History) {
				dropReads(h, func(r Read) bool { return r.Value == "P4" })
			}),
			want:    map[Class]int{UnseenAck: 1},
			example: map[Class]string{UnseenAck: `value "P4" from producer "P" seq 4 (ok at p0@3, completed 10:00:00.001) never read; reads of p0 stop at offset 2`},
		},
		{
			name: "unseen-ack: partition never read",
			h: with(func(h *History) {
				dropReads(h, func(r Read) bool { return r.Partition == 1 })
			}),
			want:    map[Class]int{UnseenAck: 2},
			example: map[Class]string{UnseenAck: `value "P1"`},
		},
		{
			name: "duplicate: an unknown write read at two offsets",
			h: with(func(h *History) {
				h.Reads = append(h.Reads, read("c3", 0, 2, "P2"), read("c3", 0, 4, "P2"))
			}),
			want:    map[Class]int{Duplicate: 1},
			example: map[Class]string{Duplicate: `value "P2" from producer "P" seq 2 (unknown to p0, completed 10:00:01.000, err "deadline exceeded") read at p0@2 (read by "c1" at 10:00:02.000) and p0@4 (read by "c3"`},
		},
		{
			// An acknowledged value read at a second offset is also read
			// off its acknowledged position.
			name: "duplicate: an acknowledged write read at two offsets",
			h: with(func(h *History) {
				h.Reads = append(h.Reads, read("c3", 0, 3, "P4"), read("c3", 0, 4, "P4"))
			}),
			want: map[Class]int{Duplicate: 1, InconsistentOffset: 1},
			example: map[Class]string{
				Duplicate:          `value "P4"`,
				InconsistentOffset: `value "P4" from producer "P" seq 4 (ok at p0@3, completed 10:00:00.001) read at p0@4 (read by "c3"`,
			},
		},
		{
			name: "inconsistent-offset: two consumers read different values at one offset",
			h: with(func(h *History) {
				editReads(h, func(r *Read) {
					if r.Consumer == "c2" && r.Value == "P2" {
						r.Value = "Q1"
					}
				})
			}),
			want:    map[Class]int{InconsistentOffset: 1},
			example: map[Class]string{InconsistentOffset: `p0@2 holds "P2" (read by "c1" at 10:00:02.000) and "Q1" (read by "c2" at 10:00:02.000)`},
		},
		{
			name: "inconsistent-offset: a read disagrees with an acknowledgement",
			h: with(func(h *History) {
				editReads(h, func(r *Read) {
					if r.Consumer == "c2" && r.Value == "P4" {
						r.Value = "Q1"
					}
				})
			}),
			want:    map[Class]int{InconsistentOffset: 1},
			example: map[Class]string{InconsistentOffset: `p0@3 holds "P4" (acked to producer "P" seq 4 (ok at p0@3, completed 10:00:00.001)) and "Q1" (read by "c2"`},
		},
		{
			name: "inconsistent-offset: an acknowledged value read only at another offset",
			h: with(func(h *History) {
				editReads(h, func(r *Read) {
					if r.Value == "P4" {
						r.Offset = 4
					}
				})
			}),
			want:    map[Class]int{InconsistentOffset: 1},
			example: map[Class]string{InconsistentOffset: `value "P4" from producer "P" seq 4 (ok at p0@3, completed 10:00:00.001) read at p0@4`},
		},
		{
			// Two acknowledgements of one offset: one of the two values is
			// not there, so it is also lost.
			name: "inconsistent-offset: two acknowledgements claim one offset",
			h: with(func(h *History) {
				h.Writes = append(h.Writes, ok("S", 0, 0, 3, "S0"))
			}),
			want: map[Class]int{InconsistentOffset: 1, LostWrite: 1},
			example: map[Class]string{
				InconsistentOffset: `p0@3 holds "P4" (acked to producer "P" seq 4 (ok at p0@3, completed 10:00:00.001)) and "S0" (acked to producer "S" seq 0`,
				LostWrite:          `"S0"`,
			},
		},
		{
			name: "non-monotonic-producer: acknowledged offsets against send order",
			h: History{
				Writes: []Write{ok("P", 0, 0, 1, "a"), ok("P", 1, 0, 0, "b")},
				Reads:  []Read{read("c1", 0, 0, "b"), read("c1", 0, 1, "a")},
			},
			want:    map[Class]int{NonMonotonicProducer: 1},
			example: map[Class]string{NonMonotonicProducer: `producer "P" p0: seq 1 (value "b") acked at offset 0, not after seq 0 (value "a") acked at offset 1`},
		},
		{
			name: "non-monotonic-producer: an unknown write read before an earlier one",
			h: History{
				Writes: []Write{unknown("P", 0, 0, "a"), ok("P", 1, 0, 0, "b")},
				Reads:  []Read{read("c1", 0, 0, "b"), read("c1", 0, 1, "a")},
			},
			want:    map[Class]int{NonMonotonicProducer: 1},
			example: map[Class]string{NonMonotonicProducer: `seq 1 (value "b") acked at offset 0, not after seq 0 (value "a") read at offset 1`},
		},
		{
			// Each write is compared with the highest offset of all smaller
			// Seqs, not only its predecessor: seq 2 at offset 2 is after
			// seq 1 but still before seq 0.
			name: "non-monotonic-producer: one write jumping ahead makes two offenders",
			h: History{
				Writes: []Write{ok("P", 0, 0, 5, "a"), ok("P", 1, 0, 1, "b"), ok("P", 2, 0, 2, "c")},
				Reads:  []Read{read("c1", 0, 1, "b"), read("c1", 0, 2, "c"), read("c1", 0, 5, "a")},
			},
			want: map[Class]int{NonMonotonicProducer: 2},
		},
		{
			// Two writes of one producer at one offset: neither is after
			// the other, and the offset holds two values.
			name: "non-monotonic-producer: a later write at the same offset",
			h: History{
				Writes: []Write{ok("P", 0, 0, 0, "a"), unknown("P", 1, 0, "b")},
				Reads:  []Read{read("c1", 0, 0, "a"), read("c2", 0, 0, "b")},
			},
			want:    map[Class]int{NonMonotonicProducer: 1, InconsistentOffset: 1},
			example: map[Class]string{NonMonotonicProducer: `seq 1 (value "b") read at offset 0, not after seq 0 (value "a") acked at offset 0`},
		},
		{
			name: "non-monotonic-consumer: a session rewinds without a new name",
			h: with(func(h *History) {
				h.Reads = append(h.Reads, read("c1", 0, 1, "Q0"), read("c1", 0, 1, "Q0"))
			}),
			want:    map[Class]int{NonMonotonicConsumer: 2},
			example: map[Class]string{NonMonotonicConsumer: `consumer "c1" p0: offset 1 (value "Q0" at 10:00:02.000) received after offset 3 (value "P4" at 10:00:02.000)`},
		},
		{
			name: "failed-write-read",
			h: with(func(h *History) {
				h.Writes = append(h.Writes, failed("F", 0, 0, "F0"))
				h.Reads = append(h.Reads, read("c2", 0, 4, "F0"))
			}),
			want:    map[Class]int{FailedWriteRead: 1},
			example: map[Class]string{FailedWriteRead: `value "F0" from producer "F" seq 0 (failed to p0, completed 10:00:00.001, err "record too large") read at p0@4 (read by "c2"`},
		},
		{
			name: "unknown-value",
			h: with(func(h *History) {
				h.Reads = append(h.Reads, read("c2", 0, 4, "ghost"))
			}),
			want:    map[Class]int{UnknownValue: 1},
			example: map[Class]string{UnknownValue: `value "ghost", written by nobody, read at p0@4 (read by "c2"`},
		},
		{
			name: "wrong-partition: an unknown write read in another partition",
			h: with(func(h *History) {
				editReads(h, func(r *Read) {
					if r.Value == "P2" {
						r.Partition = 1
					}
				})
			}),
			want:    map[Class]int{WrongPartition: 1},
			example: map[Class]string{WrongPartition: `value "P2" from producer "P" seq 2 (unknown to p0, completed 10:00:01.000, err "deadline exceeded") read at p1@2`},
		},
		{
			// Read, so not lost; in another partition, so left to
			// wrong-partition rather than counted as inconsistent too.
			name: "wrong-partition: an acknowledged write read in another partition",
			h: with(func(h *History) {
				editReads(h, func(r *Read) {
					if r.Value == "P4" {
						r.Partition, r.Offset = 1, 2
					}
				})
			}),
			want:    map[Class]int{WrongPartition: 1},
			example: map[Class]string{WrongPartition: `value "P4"`},
		},
		{
			name: "replica-divergence: a caught-up follower holds another value",
			h: with(func(h *History) {
				h.Replicas[1].Records[1].Value = "Qx"
			}),
			want:    map[Class]int{ReplicaDivergence: 1},
			example: map[Class]string{ReplicaDivergence: `p0@1 below committed end 4: node 1 "Q0", node 2 "Qx", node 3 "Q0"`},
		},
		{
			name: "replica-divergence: a caught-up follower has a hole",
			h: with(func(h *History) {
				h.Replicas[2].Records = slices.Delete(h.Replicas[2].Records, 1, 2)
			}),
			want:    map[Class]int{ReplicaDivergence: 1},
			example: map[Class]string{ReplicaDivergence: `p0@1 below committed end 4: node 1 "Q0", node 2 "Q0", node 3 missing`},
		},
		{
			// The committed end is the highest checkpoint (node 2's), not
			// that of the first node.
			name: "replica-divergence: below the leader's high watermark",
			h: with(func(h *History) {
				h.Replicas[5].Records[1].Value = "P5x"
			}),
			want:    map[Class]int{ReplicaDivergence: 1},
			example: map[Class]string{ReplicaDivergence: `p1@1 below committed end 2: node 1 "P5", node 2 "P5", node 3 "P5x"`},
		},
		{
			// Short by the last committed record only; the lagging replica
			// is reported behind, not as divergent.
			name: "replica-behind: a follower short of the committed end",
			h: with(func(h *History) {
				h.Replicas[2].Records = h.Replicas[2].Records[:3]
				h.Replicas = append(h.Replicas, replica(1, 4, 0))
			}),
			want:    map[Class]int{ReplicaBehind: 2},
			example: map[Class]string{ReplicaBehind: `p0 node 3: log end offset 3 (high watermark 2) < committed end 4 (high watermark of node 1)`},
		},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.h)
			if got, want := classesOf(r), Classes(); !slices.Equal(got, want) {
				t.Fatalf("findings list classes %v, want %v", got, want)
			}
			total := 0
			for _, c := range Classes() {
				f := r.For(c)
				total += tc.want[c]
				if f.Count != tc.want[c] {
					t.Errorf("%s: count %d, want %d; examples: %q", c, f.Count, tc.want[c], f.Examples)
				}
				if len(f.Examples) != min(f.Count, MaxExamples) {
					t.Errorf("%s: %d examples for count %d", c, len(f.Examples), f.Count)
				}
				if want, ok := tc.example[c]; ok && (len(f.Examples) == 0 || !strings.Contains(f.Examples[0], want)) {
					t.Errorf("%s: first example %q, want it to contain %q", c, f.Examples, want)
				}
			}
			if r.Anomalies() != total || r.OK() != (total == 0) {
				t.Errorf("Anomalies() = %d, OK() = %v; want %d, %v", r.Anomalies(), r.OK(), total, total == 0)
			}
			if r.ReplicasChecked != (len(tc.h.Replicas) > 0) {
				t.Errorf("ReplicasChecked = %v with %d replica logs", r.ReplicasChecked, len(tc.h.Replicas))
			}
		})
	}
}

func classesOf(r Report) []Class {
	var cs []Class
	for _, f := range r.Findings {
		cs = append(cs, f.Class)
	}
	return cs
}

func TestCleanHistoryStatsAndSummary(t *testing.T) {
	r := Check(clean())
	want := Stats{
		Writes: 9, WritesOK: 5, WritesFailed: 1, WritesUnknown: 3, WritesInFlight: 1,
		Reads: 14, DistinctValuesRead: 6, Producers: 3, ConsumerSessions: 3,
		Partitions: 2, ReplicaLogs: 6,
	}
	if r.Stats != want {
		t.Errorf("Stats = %+v, want %+v", r.Stats, want)
	}
	var lines []string
	for _, c := range Classes() {
		line := string(c) + ": 0"
		switch c {
		case StuckLSO:
			line += " (not checked: history has no watermark samples)"
		case CopyNotExactlyOnce:
			line += " (not checked: history has no copier)"
		}
		lines = append(lines, line)
	}
	if got := r.Summary(); !slices.Equal(got, lines) {
		t.Errorf("Summary() = %q, want %q", got, lines)
	}
	if len(r.Notes) != 0 {
		t.Errorf("Notes = %q, want none", r.Notes)
	}
	if s := r.Stats.String(); !strings.Contains(s, "writes 9 (ok 5, failed 1, unknown 3 of which in flight 1)") {
		t.Errorf("Stats.String() = %q", s)
	}
}

func TestSummaryNamesExamples(t *testing.T) {
	r := Check(with(func(h *History) {
		h.Reads = append(h.Reads, read("c3", 0, 2, "P2"), read("c3", 0, 4, "P2"))
	}))
	lines := r.Summary()
	if len(lines) != len(Classes()) {
		t.Fatalf("Summary() has %d lines, want %d", len(lines), len(Classes()))
	}
	i := slices.Index(Classes(), Duplicate)
	if want := `duplicate: 1 (e.g. value "P2" from producer "P" seq 2`; !strings.HasPrefix(lines[i], want) || strings.HasSuffix(lines[i], "; ...)") {
		t.Errorf("duplicate line = %q, want prefix %q and no trailing ellipsis", lines[i], want)
	}
}

// A history can hold a million anomalies; the report must stay small and
// say there are more, and the examples kept must be the first in history
// order, the same on every call.
func TestExamplesAreBoundedAndDeterministic(t *testing.T) {
	h := History{Reads: []Read{read("c1", 0, 1000, "last")}}
	h.Writes = append(h.Writes, ok("Z", 0, 0, 1000, "last"))
	for i := range 20 {
		h.Writes = append(h.Writes, ok(fmt.Sprint("P", i), 0, 0, int64(i), fmt.Sprint("v", i)))
		h.Reads = append(h.Reads, read(fmt.Sprint("ghost-reader-", i), 1, 0, fmt.Sprint("ghost", i)))
	}
	r := Check(h)
	lost := r.For(LostWrite)
	if lost.Count != 20 || len(lost.Examples) != MaxExamples {
		t.Fatalf("lost-write: count %d with %d examples, want 20 with %d", lost.Count, len(lost.Examples), MaxExamples)
	}
	for i, ex := range lost.Examples {
		if want := fmt.Sprintf("value %q ", fmt.Sprint("v", i)); !strings.HasPrefix(ex, want) {
			t.Errorf("lost-write example %d = %q, want prefix %q", i, ex, want)
		}
	}
	line := r.Summary()[slices.Index(Classes(), LostWrite)]
	if !strings.HasPrefix(line, "lost-write: 20 (e.g. ") || !strings.HasSuffix(line, "; ...)") {
		t.Errorf("lost-write line = %q", line)
	}
	// Twenty unknown values at one position also conflict there: map
	// iteration must not leak into which examples are shown.
	for range 10 {
		if again := Check(h); !reflect.DeepEqual(again, r) {
			t.Fatalf("two Checks of one history differ:\n%q\n%q", r.Summary(), again.Summary())
		}
	}
	if got := r.For(UnknownValue).Examples[0]; !strings.Contains(got, `"ghost0"`) {
		t.Errorf("first unknown-value example = %q, want the first read, ghost0", got)
	}
}

func TestWithoutReplicasSaysNotChecked(t *testing.T) {
	h := clean()
	h.Replicas = nil
	r := Check(h)
	if r.ReplicasChecked || !r.OK() {
		t.Fatalf("ReplicasChecked = %v, OK() = %v; want false, true", r.ReplicasChecked, r.OK())
	}
	for _, c := range []Class{ReplicaDivergence, ReplicaBehind} {
		f := r.For(c)
		if f.Count != 0 || f.Skipped == "" {
			t.Errorf("%s: count %d, skipped %q; want 0 and a reason", c, f.Count, f.Skipped)
		}
		line := r.Summary()[slices.Index(Classes(), c)]
		if want := string(c) + ": 0 (not checked: "; !strings.HasPrefix(line, want) {
			t.Errorf("summary line %q, want prefix %q", line, want)
		}
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "replicas not checked") }) {
		t.Errorf("Notes = %q, want one saying replicas were not checked", r.Notes)
	}
}

func TestNotesOnBrokenHistories(t *testing.T) {
	h := clean()
	h.Writes = append(h.Writes, unknown("S", 0, 0, "P0"), ok("S", 1, 2, 0, "S1"))
	h.Reads = append(h.Reads, read("c3", 2, 0, "S1"))
	r := Check(h)
	for _, want := range []string{`value "P0" is carried by two writes`, "p2 was written or read but has no replica log"} {
		if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, want) }) {
			t.Errorf("Notes = %q, want one containing %q", r.Notes, want)
		}
	}
	if !r.OK() {
		t.Errorf("notes must not count as anomalies: %q", r.Summary())
	}
}

func TestCheckDoesNotModifyHistory(t *testing.T) {
	h := with(func(h *History) {
		// Unsorted replica nodes and an anomaly of each kind that sorts.
		h.Replicas[0], h.Replicas[2] = h.Replicas[2], h.Replicas[0]
		h.Reads = append(h.Reads, read("c3", 0, 9, "ghost"), read("c3", 0, 10, "P2"))
		h.Writes = append(h.Writes, ok("P", 6, 0, 0, "P6"))
	})
	before := with(func(h *History) {
		h.Replicas[0], h.Replicas[2] = h.Replicas[2], h.Replicas[0]
		h.Reads = append(h.Reads, read("c3", 0, 9, "ghost"), read("c3", 0, 10, "P2"))
		h.Writes = append(h.Writes, ok("P", 6, 0, 0, "P6"))
	})
	if r := Check(h); r.OK() {
		t.Fatal("the history was meant to hold anomalies")
	}
	if !reflect.DeepEqual(h, before) {
		t.Error("Check modified its History")
	}
}

// generate builds a healthy history of the given size: producers write
// round-robin to partitions, some writes end Unknown (half of them
// appended anyway) or Failed (not appended); three consumer sessions read
// every partition interleaved, and a restarted session re-reads from the
// start until there are reads in all; three replicas per partition agree,
// the followers' high watermark checkpoints lagging.
func generate(writes, reads int) History {
	const partitions, producers = 16, 8
	h := History{Writes: make([]Write, 0, writes), Reads: make([]Read, 0, reads)}
	logs := make([][]ReplicaRecord, partitions)
	type rec struct {
		p int32
		r ReplicaRecord
	}
	var appended []rec
	seq := make([]int64, producers)
	for i := range writes {
		pr, p := i%producers, int32(i/producers%partitions)
		w := Write{Producer: fmt.Sprint("P", pr), Partition: p, Seq: seq[pr], Value: fmt.Sprintf("k%d/%d", p, i),
			Invoke: t0.Add(time.Duration(i) * time.Microsecond), Complete: t0.Add(time.Duration(i+50) * time.Microsecond)}
		seq[pr]++
		appendIt := true
		switch {
		case i%97 == 0:
			w.Outcome, appendIt = Failed, false
		case i%10 == 0:
			w.Outcome, appendIt = Unknown, i%20 == 0
		default:
			w.Outcome, w.Offset = OK, int64(len(logs[p]))
		}
		if appendIt {
			r := ReplicaRecord{Offset: int64(len(logs[p])), Value: w.Value}
			logs[p] = append(logs[p], r)
			appended = append(appended, rec{p, r})
		}
		h.Writes = append(h.Writes, w)
	}
	for s := 0; len(h.Reads) < reads; s++ {
		for _, a := range appended {
			if len(h.Reads) == reads {
				break
			}
			h.Reads = append(h.Reads, Read{Consumer: fmt.Sprint("c", s), Partition: a.p, Offset: a.r.Offset, Value: a.r.Value,
				Time: t0.Add(time.Duration(len(h.Reads)) * time.Microsecond)})
		}
	}
	for p, log := range logs {
		for node := range int32(3) {
			hw := int64(len(log)) - int64(node) // followers' checkpoints lag
			h.Replicas = append(h.Replicas, ReplicaLog{Partition: int32(p), Node: node, HighWatermark: hw, Records: log})
		}
	}
	return h
}

func TestGeneratedHistory(t *testing.T) {
	h := generate(20_000, 60_000)
	if r := Check(h); !r.OK() {
		t.Fatalf("healthy generated history: %q", r.Summary())
	}
	// The same history with one acknowledged write skipped by every reader.
	victim := h.Writes[1234]
	if victim.Outcome != OK {
		t.Fatalf("write 1234 is %v, want an OK one", victim.Outcome)
	}
	h.Reads = slices.DeleteFunc(h.Reads, func(r Read) bool { return r.Value == victim.Value })
	r := Check(h)
	if r.Anomalies() != 1 || r.For(LostWrite).Count != 1 || !strings.Contains(r.For(LostWrite).Examples[0], victim.Value) {
		t.Errorf("one skipped write: %q, want exactly one lost-write of %q", r.Summary(), victim.Value)
	}
}

func BenchmarkCheck(b *testing.B) {
	h := generate(200_000, 600_000)
	b.ReportAllocs()
	for b.Loop() {
		if r := Check(h); !r.OK() {
			b.Fatalf("generated history: %q", r.Summary())
		}
	}
}
