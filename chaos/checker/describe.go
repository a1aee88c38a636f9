package checker

import (
	"fmt"
	"strings"
	"time"
)

// The helpers below render parts of the history for Finding examples. They
// are only called for the few examples kept, never per record.

// clock renders a time of day with milliseconds, the resolution at which a
// human compares events of one run; "?" when the time was not recorded.
func clock(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return t.Format("15:04:05.000")
}

// writeText names write i: who sent it, in which order, and what came of it.
func (x *index) writeText(i int) string {
	w := x.h.Writes[i]
	var b strings.Builder
	fmt.Fprintf(&b, "producer %q seq %d (", w.Producer, w.Seq)
	switch {
	case w.Complete.IsZero():
		fmt.Fprintf(&b, "in flight to p%d, invoked %s", w.Partition, clock(w.Invoke))
	case x.outcome[i] == OK:
		fmt.Fprintf(&b, "ok at %v, completed %s", at(w.Partition, w.Offset), clock(w.Complete))
	default:
		fmt.Fprintf(&b, "%v to p%d, completed %s", x.outcome[i], w.Partition, clock(w.Complete))
	}
	if w.Err != "" {
		fmt.Fprintf(&b, ", err %q", w.Err)
	}
	b.WriteString(")")
	return b.String()
}

// readText names read j: which session received it and when.
func (x *index) readText(j int) string {
	rd := x.h.Reads[j]
	return fmt.Sprintf("read by %q at %s", rd.Consumer, clock(rd.Time))
}

// placementText renders where and how a value was read.
func (x *index) placementText(p placement) string {
	return fmt.Sprintf("%v (%s)", p.pos, x.readText(p.read))
}

// observationText renders one value seen at a position and its source.
func (x *index) observationText(o observation) string {
	if o.write >= 0 {
		return fmt.Sprintf("%q (acked to %s)", o.value, x.writeText(o.write))
	}
	return fmt.Sprintf("%q (%s)", o.value, x.readText(o.read))
}
