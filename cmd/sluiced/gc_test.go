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
	machine := limit(16*gib, true)
	s := tuneGC(env(nil), limit(gib, true), machine)
	if s.gcPercent != defaultGCPercent || debug.SetGCPercent(100) != defaultGCPercent {
		t.Errorf("GOGC unset: gc percent %d, want %d", s.gcPercent, defaultGCPercent)
	}
	if want := int64(float64(gib) * memoryLimitShare); s.memoryLimit != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("GOMEMLIMIT unset under a 1 GiB cgroup: limit %d, want %d", s.memoryLimit, want)
	}

	debug.SetMemoryLimit(prevLimit)
	s = tuneGC(env(map[string]string{"GOGC": "50", "GOMEMLIMIT": "512MiB"}), limit(gib, true), machine)
	if s.gcPercent != -1 || s.memoryLimit != 0 || debug.SetGCPercent(100) != 100 || debug.SetMemoryLimit(-1) != prevLimit {
		t.Errorf("GOGC and GOMEMLIMIT set: tuneGC changed them (%+v)", s)
	}

	s = tuneGC(env(map[string]string{"GOGC": "50"}), limit(0, false), limit(0, false))
	if s.memoryLimit != 0 || debug.SetMemoryLimit(-1) != prevLimit {
		t.Errorf("no cgroup limit and no machine memory known: a memory limit was set (%+v)", s)
	}

	// Issue 29: outside a container, a share of the machine's memory.
	s = tuneGC(env(map[string]string{"GOGC": "50"}), limit(0, false), machine)
	if want := int64(float64(16*gib) * machineMemoryShare); s.memoryLimit != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("no cgroup limit on a 16 GiB machine: limit %d, want %d", s.memoryLimit, want)
	}
}

// Issue 29: the soft memory limit sluiced sets when GOMEMLIMIT is unset
// comes from the container's limit when there is one below the
// machine's memory, else from the machine's memory (MemTotal), each
// read as cgroupMemoryMax and machineMemory read them.
func TestMemoryLimitComesFromTheContainerOrTheMachine(t *testing.T) {
	gib := int64(1 << 30)
	meminfo := "MemTotal:       16777216 kB\nMemFree:         1048576 kB\nMemAvailable:    8388608 kB\n" // 16 GiB
	for _, tc := range []struct {
		name       string
		env        bool   // GOMEMLIMIT set
		memoryMax  string // the cgroup's memory.max; "" none
		meminfo    string // /proc/meminfo; "" unreadable
		want       int64
		wantSource string
	}{
		{"GOMEMLIMIT wins", true, "2147483648\n", meminfo, 0, limitFromEnv},
		{"container limit", false, "2147483648\n", meminfo, int64(float64(2*gib) * memoryLimitShare), limitFromCgroup},
		{"container limit, machine unknown", false, "2147483648\n", "", int64(float64(2*gib) * memoryLimitShare), limitFromCgroup},
		{"cgroup v2 without a limit", false, "max\n", meminfo, int64(float64(16*gib) * machineMemoryShare), limitFromMachine},
		{"cgroup v1 without a limit", false, "9223372036854771712\n", meminfo, int64(float64(16*gib) * machineMemoryShare), limitFromMachine},
		{"no cgroup file", false, "", meminfo, int64(float64(16*gib) * machineMemoryShare), limitFromMachine},
		{"container limit above the machine's memory", false, "68719476736\n", meminfo, int64(float64(16*gib) * machineMemoryShare), limitFromMachine},
		{"nothing known", false, "", "", 0, limitFromNone},
		{"meminfo without MemTotal", false, "", "MemFree: 1 kB\n", 0, limitFromNone},
	} {
		cgroup := func() (int64, bool) {
			if tc.memoryMax == "" {
				return 0, false
			}
			return parseMemoryMax(tc.memoryMax)
		}
		machine := func() (int64, bool) { return parseMemTotal(tc.meminfo) }
		got, source := memoryLimit(tc.env, cgroup, machine)
		if got != tc.want || source != tc.wantSource {
			t.Errorf("%s: limit %d from %q, want %d from %q", tc.name, got, source, tc.want, tc.wantSource)
		}
	}
}

func TestParseMemTotal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"MemTotal:       24683784 kB\nMemFree:        20037588 kB\n", 24683784 << 10, true},
		{"MemFree: 5 kB\nMemTotal: 1024 kB", 1 << 20, true},
		{"MemFree: 5 kB\n", 0, false},
		{"MemTotal: lots kB\n", 0, false},
		{"MemTotal: 1024 MB\n", 0, false},
		{"MemTotal: 0 kB\n", 0, false},
		{"", 0, false},
	} {
		got, ok := parseMemTotal(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseMemTotal(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
