package main

import "testing"

// A count is followed by its noun in the singular for one and in the
// plural otherwise ("1 partition", never "1 partitions").
func TestPlural(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{plural(0, "partition"), "0 partitions"},
		{plural(1, "partition"), "1 partition"},
		{plural(2, "partition"), "2 partitions"},
		{plural(-1, "record"), "-1 record"},
		{plural(int32(1), "member"), "1 member"},
		{plural(int64(3), "transaction"), "3 transactions"},
		{plural(1, "hanging transaction"), "1 hanging transaction"},
		{plural(2, "hanging transaction"), "2 hanging transactions"},
		{plural(1, "invalid batch"), "1 invalid batch"},
		{plural(2, "invalid batch"), "2 invalid batches"},
		{plural(2, "id"), "2 ids"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
