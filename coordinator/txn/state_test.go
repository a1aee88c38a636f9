package txn

import (
	"slices"
	"testing"
)

// Kafka's TransactionState.VALID_PREVIOUS_STATES, as the vectors record
// it: every (from, to) pair of the eight states is allowed exactly when
// the vectors list from among to's predecessors.
func TestStateTableIsKafkasValidPreviousStates(t *testing.T) {
	vec := loadKafkaExamples(t).ValidPreviousStates
	if len(vec) != len(States) {
		t.Fatalf("vectors list %d states, this package %d", len(vec), len(States))
	}
	for _, to := range States {
		prevs, ok := vec[to.String()]
		if !ok {
			t.Fatalf("state %v is not in the vectors", to)
		}
		for _, from := range States {
			want := slices.Contains(prevs, from.String())
			if got := to.CanFollow(from); got != want {
				t.Errorf("%v -> %v allowed = %v, vectors say %v", from, to, got, want)
			}
		}
		for _, p := range prevs {
			if _, ok := ParseState(p); !ok {
				t.Errorf("vectors name an unknown state %q", p)
			}
		}
	}
}

func TestStateNamesRoundTrip(t *testing.T) {
	for _, s := range States {
		got, ok := ParseState(s.String())
		if !ok || got != s {
			t.Errorf("ParseState(%q) = %v, %v", s.String(), got, ok)
		}
	}
	if _, ok := ParseState("Bogus"); ok {
		t.Error("ParseState accepted an unknown name")
	}
	if s := State(42).String(); s != "State(42)" {
		t.Errorf("unknown state prints %q", s)
	}
}

func TestValidPreviousIsACopy(t *testing.T) {
	p := Ongoing.ValidPrevious()
	p[0] = Dead
	if Ongoing.CanFollow(Dead) {
		t.Error("changing ValidPrevious's result changed the table")
	}
}
