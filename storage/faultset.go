//go:build sluicetest

package storage

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"sync"
)

// FaultSet builds only with the sluicetest tag (docs/design.md decision
// 52): test machinery stays out of the shipped binary.

// FaultSet is a FaultInjector for tests and drills: rules that fail every
// operation of some kinds on paths under a prefix with an OS error. Safe
// for concurrent use; the zero value injects nothing.
type FaultSet struct {
	mu    sync.Mutex // guards rules
	rules []faultRule
}

type faultRule struct {
	prefix string
	ops    []Op // empty: every operation
	err    error
}

// Fail makes the operations ops (every operation when none is named) on
// paths that start with prefix fail with err, until Clear. An error
// without a path (syscall.EIO) is wrapped in an *fs.PathError naming the
// operation and path, as the OS would.
func (s *FaultSet) Fail(prefix string, err error, ops ...Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, faultRule{prefix: prefix, ops: ops, err: err})
}

// Clear removes every rule.
func (s *FaultSet) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = nil
}

// Fault implements FaultInjector.
func (s *FaultSet) Fault(op Op, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rules {
		if !strings.HasPrefix(path, r.prefix) {
			continue
		}
		if len(r.ops) > 0 && !slices.Contains(r.ops, op) {
			continue
		}
		var pe *fs.PathError
		if errors.As(r.err, &pe) {
			return r.err
		}
		return &fs.PathError{Op: string(op), Path: path, Err: r.err}
	}
	return nil
}
