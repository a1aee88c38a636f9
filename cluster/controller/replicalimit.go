package controller

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// Replica limits per broker (issue 29, decision 50 in docs/design.md).
// Each broker registers the most partition replicas it accepts
// (Broker.MaxReplicas), by default half of its open-files limit
// (storage.DefaultMaxReplicas: 10,000 with a limit of 20,000). The
// active controller refuses, before proposing it, a
// topic creation or a reassignment that would put more replicas on a
// broker than that, with INVALID_PARTITIONS naming the broker, the count,
// the limit and where it comes from. The FSM does not check it: replicas
// already placed stay where they are when a broker registers again with a
// lower limit, and the records of a log written before the limit existed
// replay as they did.
//
// The limit is per broker, not cluster-wide, because what it protects is
// per process: a broker's descriptors (and the memory and start-up time
// each hosted partition costs), and brokers may run with different
// limits. A broker that registered no limit (0: it predates the field, or
// was configured without one) accepts any number.

// ReplicaCounts returns how many partition replicas each broker hosts in
// im (reassignments' adding and removing replicas included: both have
// logs while it runs).
func ReplicaCounts(im *Image) map[int32]int {
	n := make(map[int32]int, len(im.Brokers))
	for _, t := range im.Topics {
		for _, p := range t.Partitions {
			for _, id := range p.Replicas {
				n[id]++
			}
		}
	}
	return n
}

// CheckReplicaLimits returns INVALID_PARTITIONS when adding the replicas
// counted in added (broker id → new replicas) to those im already places
// would put a broker above its MaxReplicas, else nil. what describes the
// request in the message ("creating topic \"t\" with 6,000 partitions").
// The message names the broker of lowest id over its limit and how many
// others are, with what to do. It is pure.
func CheckReplicaLimits(im *Image, what string, added map[int32]int) error {
	if len(added) == 0 {
		return nil
	}
	return checkReplicaLimits(im, ReplicaCounts(im), what, added)
}

// checkReplicaLimits is CheckReplicaLimits with the replicas per broker
// already counted (ReplicaCounts, plus what a batch added before).
func checkReplicaLimits(im *Image, counts map[int32]int, what string, added map[int32]int) error {
	if len(added) == 0 {
		return nil
	}
	var over []int32
	for id, k := range added {
		if b := im.Brokers[id]; b != nil && b.MaxReplicas > 0 && k > 0 {
			over = append(over, id)
		}
	}
	if len(over) == 0 {
		return nil // no broker concerned declares a limit
	}
	over = slices.DeleteFunc(over, func(id int32) bool {
		return counts[id]+added[id] <= int(im.Brokers[id].MaxReplicas)
	})
	if len(over) == 0 {
		return nil
	}
	slices.Sort(over)
	id := over[0]
	b := im.Brokers[id]
	source := "as the broker is configured"
	if b.OpenFilesLimit > 0 {
		source = "set on the broker; its open-files limit is " + thousands(b.OpenFilesLimit)
		if int(b.MaxReplicas) == storage.DefaultMaxReplicas(int(b.OpenFilesLimit)) {
			source = "derived from its open-files limit " + thousands(b.OpenFilesLimit) + ": half of it"
		}
	}
	others := ""
	switch len(over) {
	case 1:
	case 2:
		others = " (and 1 other broker above its own)"
	default:
		others = fmt.Sprintf(" (and %d other brokers above their own)", len(over)-1)
	}
	return errs.New(sluicev1.ErrorCode_INVALID_PARTITIONS,
		"%s would put %s replicas on broker %d, above its limit of %s (%s)%s; raise the broker's hard open-files limit (ulimit -Hn, systemd LimitNOFILE=) and restart it, add brokers, or use fewer partitions",
		what, thousands(int64(counts[id]+added[id])), id, thousands(int64(b.MaxReplicas)), source, others)
}

// addedReplicas counts the replicas of assign per broker.
func addedReplicas(assign []PartitionAssignment) map[int32]int {
	n := make(map[int32]int)
	for _, pa := range assign {
		for _, id := range pa.Replicas {
			n[id]++
		}
	}
	return n
}

// thousands formats n with comma separators (12,345).
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
