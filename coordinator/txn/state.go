package txn

import "fmt"

// State is the state of a transactional id's transaction, Kafka's
// TransactionState. The numeric values are this package's only; the
// record format writes the names (State.String), which never change.
type State int8

// The states, as Kafka names them.
const (
	// Empty: the id has a producer id and epoch (InitProducerId) and no
	// open transaction.
	Empty State = iota
	// Ongoing: a transaction is open; Metadata.Partitions are in it.
	Ongoing
	// PrepareCommit: the commit is decided and durable; COMMIT markers are
	// being written to Metadata.Partitions.
	PrepareCommit
	// PrepareAbort: the abort is decided and durable; ABORT markers are
	// being written.
	PrepareAbort
	// CompleteCommit: every COMMIT marker is written.
	CompleteCommit
	// CompleteAbort: every ABORT marker is written.
	CompleteAbort
	// PrepareEpochFence: an InitProducerId found a transaction open and
	// fences its producer before aborting it. Kafka keeps it in memory
	// only (the record written next is PrepareAbort), and so does this
	// package: it is checked against the table but never written.
	PrepareEpochFence
	// Dead: the id expired; its record is a tombstone.
	Dead
)

// States lists every State in declaration order. Read it; do not modify it.
var States = []State{Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, PrepareEpochFence, Dead}

var stateNames = [...]string{
	Empty:             "Empty",
	Ongoing:           "Ongoing",
	PrepareCommit:     "PrepareCommit",
	PrepareAbort:      "PrepareAbort",
	CompleteCommit:    "CompleteCommit",
	CompleteAbort:     "CompleteAbort",
	PrepareEpochFence: "PrepareEpochFence",
	Dead:              "Dead",
}

// String returns Kafka's name of the state ("PrepareCommit"); it is also
// the state's name in the record format.
func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int8(s))
	}
	return stateNames[s]
}

// ParseState returns the State named name (as String writes it).
func ParseState(name string) (State, bool) {
	for _, s := range States {
		if stateNames[s] == name {
			return s, true
		}
	}
	return 0, false
}

// validPrevious is Kafka's TransactionState.VALID_PREVIOUS_STATES (4.5):
// the states a transition into the key may come from. The TV2 arrows
// Empty/Complete* → Prepare* are the commit or abort of an empty
// transaction (Kafka 4.4 allowed PrepareCommit only from Ongoing;
// KAFKA-21181 made an empty commit bump the epoch like an abort).
var validPrevious = map[State][]State{
	Empty:             {Empty, CompleteCommit, CompleteAbort},
	Ongoing:           {Ongoing, Empty, CompleteCommit, CompleteAbort},
	PrepareCommit:     {Ongoing, Empty, CompleteCommit, CompleteAbort},
	PrepareAbort:      {Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort},
	CompleteCommit:    {PrepareCommit},
	CompleteAbort:     {PrepareAbort},
	Dead:              {Empty, CompleteAbort, CompleteCommit},
	PrepareEpochFence: {Ongoing},
}

// CanFollow reports whether a transition from prev into s is allowed.
// Every Result.Write of this package obeys it.
func (s State) CanFollow(prev State) bool {
	for _, p := range validPrevious[s] {
		if p == prev {
			return true
		}
	}
	return false
}

// ValidPrevious returns the states s may be entered from (a copy).
func (s State) ValidPrevious() []State {
	return append([]State(nil), validPrevious[s]...)
}

// IsPrepare reports PrepareCommit or PrepareAbort: markers are owed.
func (s State) IsPrepare() bool { return s == PrepareCommit || s == PrepareAbort }

// IsComplete reports CompleteCommit or CompleteAbort.
func (s State) IsComplete() bool { return s == CompleteCommit || s == CompleteAbort }

// idle reports the states with no open transaction and nothing owed:
// Empty, CompleteCommit, CompleteAbort. Only these may start a
// transaction, expire, or bump the epoch on InitProducerId.
func (s State) idle() bool { return s == Empty || s.IsComplete() }
