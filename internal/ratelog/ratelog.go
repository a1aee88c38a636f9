// Package ratelog limits log lines that a caller can provoke (refused
// handshakes, failed logins) to one per key per interval.
package ratelog

import (
	"sync"
	"time"
)

// Limiter allows one line per key per Every. The zero value needs Every
// set. Safe for concurrent use.
type Limiter struct {
	Every time.Duration

	mu   sync.Mutex // guards last
	last map[string]time.Time
}

// Allow reports whether a line for key may be written now.
func (l *Limiter) Allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if t, ok := l.last[key]; ok && now.Sub(t) < l.Every {
		return false
	}
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	l.last[key] = now
	return true
}
