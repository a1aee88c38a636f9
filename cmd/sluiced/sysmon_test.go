package main

import (
	"slices"
	"testing"
)

// sysmonGODEBUG is added to GODEBUG (kept after what is there, or as the
// only setting), and an operator's own schedtrace, even 0, is left alone.
func TestSysmonEnv(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string // nil: unchanged, no re-exec
	}{
		{[]string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=" + sysmonGODEBUG}},
		{[]string{"GODEBUG=", "A=1"}, []string{"GODEBUG=" + sysmonGODEBUG, "A=1"}},
		{[]string{"A=1", "GODEBUG=madvdontneed=1"}, []string{"A=1", "GODEBUG=madvdontneed=1," + sysmonGODEBUG}},
		// Only the first GODEBUG counts, as for the runtime.
		{[]string{"GODEBUG=gctrace=0", "GODEBUG=schedtrace=0"}, []string{"GODEBUG=gctrace=0," + sysmonGODEBUG, "GODEBUG=schedtrace=0"}},
		{[]string{"GODEBUG=schedtrace=0"}, nil},
		{[]string{"GODEBUG=gctrace=1, schedtrace=1000"}, nil},
		{[]string{"GODEBUG=schedtrace=2147483647"}, nil},
	} {
		in := slices.Clone(tc.in)
		got, ok := sysmonEnv(in)
		if !slices.Equal(in, tc.in) {
			t.Errorf("sysmonEnv(%q) changed its argument to %q", tc.in, in)
		}
		if tc.want == nil {
			if ok || !slices.Equal(got, tc.in) {
				t.Errorf("sysmonEnv(%q) = %q, %v; want it unchanged, false", tc.in, got, ok)
			}
			continue
		}
		if !ok || !slices.Equal(got, tc.want) {
			t.Errorf("sysmonEnv(%q) = %q, %v; want %q, true", tc.in, got, ok, tc.want)
		}
	}
}
