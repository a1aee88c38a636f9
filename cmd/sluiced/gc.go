package main

import (
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

// gcSettings is what tuneGC applied.
type gcSettings struct {
	gcPercent   int   // -1: left to GOGC
	memoryLimit int64 // bytes; 0: none set here
}

// tuneGC sets the collector's defaults: GOGC defaultGCPercent unless the
// environment sets GOGC, and a soft memory limit of memoryLimitShare of the
// cgroup's memory limit (read from cgroupMemoryMax) unless it sets
// GOMEMLIMIT or there is no limit. lookupEnv is os.LookupEnv in main.
func tuneGC(lookupEnv func(string) (string, bool), cgroupMemoryMax func() (int64, bool)) gcSettings {
	s := gcSettings{gcPercent: -1}
	if _, ok := lookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
		s.gcPercent = defaultGCPercent
	}
	if _, ok := lookupEnv("GOMEMLIMIT"); !ok {
		if limit, ok := cgroupMemoryMax(); ok {
			s.memoryLimit = int64(float64(limit) * memoryLimitShare)
			debug.SetMemoryLimit(s.memoryLimit)
		}
	}
	return s
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
