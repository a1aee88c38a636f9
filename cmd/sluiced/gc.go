package main

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultGCPercent is sluiced's GOGC when the environment sets none. A
// broker's live heap is small (metadata, producer state, requests in
// flight) while it allocates a buffer for every fetch it serves and every
// large request it receives: with Go's default of 100 the collector ran
// every few megabytes, and marking, allocating fresh spans and handing
// memory back took about a fifth of a leader's CPU in a 1 KiB acks=all
// run. At 400 the node CPU per GB fell from 5.9–7.6 to 5.6–5.9 CPU-s
// (docs/benchmarks.md); the heap may grow to five times the live heap.
const defaultGCPercent = 400

// memoryLimitShare is the share of a container's memory limit given to
// the Go runtime as its soft limit when GOMEMLIMIT is not set: the rest
// is for what the runtime does not count (the page cache the logs use
// counts against a container's memory too, but the kernel reclaims it).
const memoryLimitShare = 0.8

// machineMemoryShare is the share of the machine's memory (MemTotal in
// /proc/meminfo) given to the Go runtime as its soft limit when neither
// GOMEMLIMIT nor a container limit below it sets one (issue 29): with
// GOGC 400 and no limit, the heap may grow to five times the live heap,
// and after a spike (many large requests at once) the runtime kept the
// memory for minutes. Half, not the container's 80 %: outside a container
// the node shares the machine with the page cache its logs are read from
// (and possibly with other processes), and a soft limit costs nothing
// until the heap nears it, when the collector runs more often and returns
// memory to the OS.
const machineMemoryShare = 0.5

// Where the soft memory limit comes from (the start-up log line).
const (
	limitFromEnv     = "GOMEMLIMIT"
	limitFromCgroup  = "cgroup memory limit"
	limitFromMachine = "machine memory (MemTotal)"
	limitFromNone    = "none"
)

// gcSettings is what tuneGC applied.
type gcSettings struct {
	gcPercent   int    // -1: left to GOGC
	memoryLimit int64  // bytes; 0: none set here
	limitFrom   string // where the soft memory limit in force comes from: one of limitFrom*
}

// logArgs are the "garbage collector" start-up log line's attributes:
// GOGC, the soft memory limit in force (0: none) and where it comes from.
func (s gcSettings) logArgs() []any {
	limit := debug.SetMemoryLimit(-1) // reads the limit in force
	if limit == math.MaxInt64 {
		limit = 0
	}
	return []any{"gogc", s.gcPercent, "memory_limit_bytes", limit, "memory_limit_from", s.limitFrom}
}

// tuneGC sets the collector's defaults: GOGC defaultGCPercent unless the
// environment sets GOGC, and a soft memory limit unless it sets
// GOMEMLIMIT (memoryLimit: from the cgroup's limit, cgroupMemoryMax, else
// from the machine's memory, machineMemory). lookupEnv is os.LookupEnv
// in main.
func tuneGC(lookupEnv func(string) (string, bool), cgroupMemoryMax, machineMemory func() (int64, bool)) gcSettings {
	s := gcSettings{gcPercent: -1}
	if _, ok := lookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
		s.gcPercent = defaultGCPercent
	}
	_, env := lookupEnv("GOMEMLIMIT")
	s.memoryLimit, s.limitFrom = memoryLimit(env, cgroupMemoryMax, machineMemory)
	if s.memoryLimit > 0 {
		debug.SetMemoryLimit(s.memoryLimit)
	}
	return s
}

// memoryLimit is the soft memory limit sluiced sets, and where it comes
// from: none if GOMEMLIMIT is set (env); else memoryLimitShare of the
// cgroup's memory limit when there is one below the machine's memory
// (a limit above it limits nothing); else machineMemoryShare of the
// machine's memory; else none (0). Pure but for the two readers.
func memoryLimit(env bool, cgroupMemoryMax, machineMemory func() (int64, bool)) (int64, string) {
	if env {
		return 0, limitFromEnv
	}
	machine, machineOK := machineMemory()
	if limit, ok := cgroupMemoryMax(); ok && (!machineOK || limit < machine) {
		return int64(float64(limit) * memoryLimitShare), limitFromCgroup
	}
	if machineOK {
		return int64(float64(machine) * machineMemoryShare), limitFromMachine
	}
	return 0, limitFromNone
}

// machineMemory returns the machine's memory (MemTotal in /proc/meminfo),
// false where it cannot be read (not Linux).
func machineMemory() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	return parseMemTotal(string(b))
}

// parseMemTotal returns the MemTotal of a /proc/meminfo text in bytes
// ("MemTotal:       24683784 kB"), false if it has none.
func parseMemTotal(meminfo string) (int64, bool) {
	for _, line := range strings.Split(meminfo, "\n") {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb <= 0 || kb >= 1<<52 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// cgroupMemoryMax returns the memory limit of the process's cgroup (v2's
// memory.max, else v1's memory.limit_in_bytes), false when there is none.
func cgroupMemoryMax() (int64, bool) {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		return parseMemoryMax(string(b))
	}
	return 0, false
}

// parseMemoryMax parses a cgroup memory limit file: "max" (v2) or a value
// near the largest int64 (v1) mean no limit.
func parseMemoryMax(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "" || s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}
