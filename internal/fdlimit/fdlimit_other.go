//go:build !unix

package fdlimit

// Get returns ErrUnsupported: this platform has no RLIMIT_NOFILE.
func Get() (soft, hard uint64, err error) { return 0, 0, ErrUnsupported }

// Open reports that open descriptors cannot be counted here.
func Open() (n int, ok bool) { return 0, false }
