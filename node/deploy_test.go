package node

import (
	"strings"
	"testing"
)

// A StatefulSet pod's name ends in -<ordinal>; the node id is the ordinal
// plus the offset, and a name without an ordinal is refused.
func TestNodeIDFromName(t *testing.T) {
	tests := []struct {
		name    string
		offset  int
		want    int32
		wantErr string
	}{
		{"sluice-0", 1, 1, ""},
		{"sluice-2", 1, 3, ""},
		{"sluice-broker-7", 100, 107, ""},
		{"my-sluice-12", 0, 12, ""},
		{"sluice", 1, 0, "does not end in -<ordinal>"},
		{"sluice-", 1, 0, "does not end in -<ordinal>"},
		{"sluice-x", 1, 0, "does not end in -<ordinal>"},
		{"sluice-0", -1, 0, "out of range"},
		{"sluice-2147483647", 1, 0, "out of range"},
	}
	for _, tc := range tests {
		got, err := NodeIDFromName(tc.name, tc.offset)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NodeIDFromName(%q, %d) = %d, %v; want error containing %q", tc.name, tc.offset, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NodeIDFromName(%q, %d) = %d, %v; want %d", tc.name, tc.offset, got, err, tc.want)
		}
	}
}
