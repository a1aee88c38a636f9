package chaos

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// Phase-timed faults: the transactional workload tells the fault
// scheduler when one of its transactions reaches a phase, and a phase
// kind (KillCoordinatorOngoing, KillCoordinatorPrepare, KillLeaderMarkers)
// SIGKILLs the node that matters for that transaction at that moment,
// instead of whichever transactions happen to be in flight.

// TxnPhase is a phase of a workload transaction a fault can wait for.
type TxnPhase string

const (
	// PhaseOngoing: the transaction's first record was acknowledged (the
	// coordinator holds it Ongoing with at least one partition).
	PhaseOngoing TxnPhase = "ongoing"
	// PhasePrepare: the producer is sending EndTxn (commit or abort), its
	// answer not yet received: the coordinator is writing PrepareCommit
	// or PrepareAbort.
	PhasePrepare TxnPhase = "prepare"
	// PhaseMarkers: EndTxn returned OK; the coordinator is writing the
	// markers to the transaction's partitions (TV2 answers after the
	// prepare record, before the markers).
	PhaseMarkers TxnPhase = "markers"
)

// PhaseEvent is a transaction reaching a phase.
type PhaseEvent struct {
	Phase           TxnPhase
	TransactionalID string // chaos-txn-N
	Txn             string // the history's transaction id (t1.2/17)
	Committed       bool   // PhasePrepare, PhaseMarkers: commit (else abort)
	// Partitions are the transaction's partitions, as the workload's log
	// numbers (WorkloadConfig.logOf), in the order first written.
	Partitions []int32
	At         time.Time
}

// phaseHook hands phase events from the workload to a waiting fault. At
// most one fault waits at a time (faults run one after another); a phase
// nobody waits for costs one map lookup under the mutex.
type phaseHook struct {
	mu     sync.Mutex // guards armed
	armed  TxnPhase
	events chan PhaseEvent // buffered 1; the first event after arm
}

// arm makes the next fire of phase deliver its event to the returned
// channel (once). It replaces an earlier arm.
func (h *phaseHook) arm(phase TxnPhase) <-chan PhaseEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.events = phase, make(chan PhaseEvent, 1)
	return h.events
}

// disarm drops a pending arm (its channel gets nothing more).
func (h *phaseHook) disarm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.events = "", nil
}

// waiting reports whether a fault waits for phase.
func (h *phaseHook) waiting(phase TxnPhase) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.armed == phase
}

// fire delivers ev to the fault waiting for its phase, if any, and
// disarms. It never blocks.
func (h *phaseHook) fire(ev PhaseEvent) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.armed != ev.Phase || h.events == nil {
		return
	}
	ev.At = time.Now()
	h.events <- ev
	h.armed, h.events = "", nil
}

// phaseWait bounds how long a phase kind waits for a transaction to reach
// its phase before it falls back to a plain kill of its target.
const phaseWait = 5 * time.Second

// phaseTarget waits for a workload transaction to reach f's phase and
// returns the node to kill: the coordinator of its transactional id
// (ongoing, prepare) or the leader of one of its partitions (markers),
// looked up BEFORE waiting so that the kill follows the event within
// microseconds. ok is false when no transaction reached the phase in
// phaseWait (or the lookups failed): the caller falls back to a plain kill.
func (r *runner) phaseTarget(f Fault) (id int32, ev PhaseEvent, ok bool) {
	phase := f.Kind.phase()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	coords := map[string]int32{}
	leaders := map[int32]int32{} // log number -> leader
	switch phase {
	case PhaseOngoing, PhasePrepare:
		// The gRPC producers' ids and the Kafka door's (both fire phase
		// events; the copiers' transactions do not).
		for _, tid := range r.cfg.Workload.transactionalIDs() {
			if !strings.HasPrefix(tid, "chaos-txn-") && !strings.HasPrefix(tid, kafkaTxnID+"-") {
				continue
			}
			co, err := r.admin.FindCoordinator(ctx, tid)
			if err != nil {
				r.log.Warn("phase fault: coordinator not found", "transactional_id", tid, "err", err)
				continue
			}
			coords[tid] = co.NodeID
		}
	case PhaseMarkers:
		md, err := r.admin.Metadata(ctx, r.cfg.Workload.Topics()...)
		if err != nil {
			r.log.Warn("phase fault: metadata", "err", err)
			return 0, ev, false
		}
		for _, t := range md.GetTopics() {
			for _, p := range t.GetPartitions() {
				if p.GetLeaderId() > 0 {
					leaders[r.cfg.Workload.logOf(t.GetName(), p.GetPartition())] = p.GetLeaderId()
				}
			}
		}
	}
	if r.phases == nil || len(coords)+len(leaders) == 0 {
		return 0, ev, false
	}
	events := r.phases.arm(phase)
	t := time.NewTimer(phaseWait)
	defer t.Stop()
	for {
		select {
		case ev = <-events:
		case <-t.C:
			r.phases.disarm()
			return 0, ev, false
		}
		switch phase {
		case PhaseOngoing, PhasePrepare:
			// Two prepare kills in three wait for a commit (PrepareCommit
			// then markers), the others for an abort; planned aborts send
			// EndTxn without a flush, so they would come first.
			wantCommit := f.Pick%3 != 0
			if phase == PhasePrepare && ev.Committed != wantCommit {
				break
			}
			if id, ok := coords[ev.TransactionalID]; ok {
				return id, ev, true
			}
		case PhaseMarkers:
			parts := slices.Clone(ev.Partitions)
			if len(parts) > 0 {
				if id, ok := leaders[parts[f.Pick%uint64(len(parts))]]; ok {
					return id, ev, true
				}
			}
		}
		events = r.phases.arm(phase) // a transaction we cannot place: the next one
	}
}
