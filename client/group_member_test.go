package client

import "testing"

// Revoke before assign: an assignment answer is split into what to give
// up and what to take; nothing changes before the first assignment.
func TestPlanReconcile(t *testing.T) {
	set := func(tps ...TopicPartition) map[TopicPartition]bool {
		m := map[TopicPartition]bool{}
		for _, tp := range tps {
			m[tp] = true
		}
		return m
	}
	a0, a1, b0 := TopicPartition{Topic: "a", Partition: 0}, TopicPartition{Topic: "a", Partition: 1}, TopicPartition{Topic: "b", Partition: 0}
	for _, tc := range []struct {
		name          string
		owned, target map[TopicPartition]bool
		revoked, add  string
	}{
		{"no assignment yet", set(a0), nil, "[]", "[]"},
		{"first assignment", set(), set(b0, a1, a0), "[]", "[a-0 a-1 b-0]"},
		{"unchanged", set(a0, a1), set(a1, a0), "[]", "[]"},
		{"move one", set(a0, a1), set(a0, b0), "[a-1]", "[b-0]"},
		{"empty assignment revokes all", set(b0, a0), set(), "[a-0 b-0]", "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			revoked, added := planReconcile(tc.owned, tc.target)
			if got := tpsString(revoked); got != tc.revoked {
				t.Errorf("revoked %s, want %s", got, tc.revoked)
			}
			if got := tpsString(added); got != tc.add {
				t.Errorf("added %s, want %s", got, tc.add)
			}
		})
	}
}
