// Package fdlimit reads the process's file-descriptor limit
// (RLIMIT_NOFILE) and counts its open descriptors, for the broker's
// connection-limit defaults, its start-up log line and the log line of a
// storage operation that ran out of descriptors (issue 29).
package fdlimit

import "errors"

// ErrUnsupported is Get's error on a platform without RLIMIT_NOFILE.
var ErrUnsupported = errors.New("fdlimit: RLIMIT_NOFILE is not supported on this platform")

// Limit is the soft RLIMIT_NOFILE the node's defaults derive from (the
// connection limits, the segment-file budget, the replica limit): the
// process's limit, or 16384 where it cannot be read, at most 1<<20 (an
// unlimited or huge limit does not make a descriptor free).
func Limit() int {
	soft, _, err := Get()
	if err != nil {
		return 1 << 14
	}
	return int(min(soft, 1<<20))
}
