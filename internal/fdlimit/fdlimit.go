// Package fdlimit reads the process's file-descriptor limit
// (RLIMIT_NOFILE) and counts its open descriptors, for the broker's
// connection-limit defaults, its start-up log line and the log line of a
// storage operation that ran out of descriptors (issue 29).
package fdlimit

import "errors"

// ErrUnsupported is Get's error on a platform without RLIMIT_NOFILE.
var ErrUnsupported = errors.New("fdlimit: RLIMIT_NOFILE is not supported on this platform")
