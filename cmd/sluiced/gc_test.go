package main

import (
	"runtime/debug"
	"testing"
)

func TestParseMemoryMax(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"max\n", 0, false},
		{"2147483648\n", 2147483648, true},
		{"9223372036854771712\n", 0, false}, // cgroup v1's "no limit"
		{"", 0, false},
		{"garbage", 0, false},
	} {
		got, ok := parseMemoryMax(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseMemoryMax(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// sluiced's collector defaults apply only where the environment is silent:
// GOGC 400, and a soft memory limit of 80 % of the container's limit.
func TestTuneGCKeepsTheEnvironmentsSettings(t *testing.T) {
	prevPercent := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(prevPercent)
		debug.SetMemoryLimit(prevLimit)
	})
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	limit := func(n int64, ok bool) func() (int64, bool) { return func() (int64, bool) { return n, ok } }

	gib := int64(1 << 30)
	s := tuneGC(env(nil), limit(gib, true))
	if s.gcPercent != defaultGCPercent || debug.SetGCPercent(100) != defaultGCPercent {
		t.Errorf("GOGC unset: gc percent %d, want %d", s.gcPercent, defaultGCPercent)
	}
	if want := int64(float64(gib) * memoryLimitShare); s.memoryLimit != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("GOMEMLIMIT unset under a 1 GiB cgroup: limit %d, want %d", s.memoryLimit, want)
	}

	debug.SetMemoryLimit(prevLimit)
	s = tuneGC(env(map[string]string{"GOGC": "50", "GOMEMLIMIT": "512MiB"}), limit(gib, true))
	if s.gcPercent != -1 || s.memoryLimit != 0 || debug.SetGCPercent(100) != 100 || debug.SetMemoryLimit(-1) != prevLimit {
		t.Errorf("GOGC and GOMEMLIMIT set: tuneGC changed them (%+v)", s)
	}

	s = tuneGC(env(map[string]string{"GOGC": "50"}), limit(0, false))
	if s.memoryLimit != 0 || debug.SetMemoryLimit(-1) != prevLimit {
		t.Errorf("no cgroup limit: a memory limit was set (%+v)", s)
	}
}
