package main

import (
	"slices"
	"strings"
)

// sysmonGODEBUG is the GODEBUG setting sluiced runs with unless its
// environment's GODEBUG names schedtrace itself. It is set for what it
// does to the Go runtime's monitor thread (sysmon), not for the trace: a
// trace line would be printed every 2^31-1 ms (24.8 days), measured from
// the host's boot, so on a host up for longer one "SCHED ..." line goes to
// stderr at start and then once per 24.8 days.
//
// With schedtrace unset, sysmon sleeps until woken whenever it finds every
// P idle, and the first system call after the process wakes up wakes it
// with a futex; it then polls every 20 µs until it finds the process idle
// again. A node answering one synchronous request at a time goes idle and
// wakes several times per request, so every request paid for futex wakes
// and a burst of 20 µs sleeps, on a second CPU, competing with the other
// processes: 6–7 % of a leader's CPU in entersyscallWakeSysmon alone.
// With schedtrace set, sysmon never sleeps that way: it backs off to one
// wake-up every 10 ms while it has nothing to do. Measured on the
// synchronous acks=all path (three nodes, one CPU each, on two cores):
// node CPU per record 388–440 µs → 256–264 µs, p50 0.32–0.36 → 0.24–0.25
// ms (docs/benchmarks.md, decision 47). GODEBUG=schedtrace=0 restores the
// Go default.
const sysmonGODEBUG = "schedtrace=2147483647"

// sysmonEnv returns environ with sysmonGODEBUG added to GODEBUG, and
// true, or environ itself and false when GODEBUG already names schedtrace
// (the operator's choice wins). Like the runtime it reads the first
// GODEBUG entry.
func sysmonEnv(environ []string) ([]string, bool) {
	for i, kv := range environ {
		v, ok := strings.CutPrefix(kv, "GODEBUG=")
		if !ok {
			continue
		}
		for _, setting := range strings.Split(v, ",") {
			if name, _, _ := strings.Cut(setting, "="); strings.TrimSpace(name) == "schedtrace" {
				return environ, false
			}
		}
		out := slices.Clone(environ)
		if v == "" {
			out[i] = "GODEBUG=" + sysmonGODEBUG
		} else {
			out[i] = "GODEBUG=" + v + "," + sysmonGODEBUG
		}
		return out, true
	}
	return append(slices.Clip(environ), "GODEBUG="+sysmonGODEBUG), true
}
