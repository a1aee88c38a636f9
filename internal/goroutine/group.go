// Package goroutine is the one way Sluice starts a long-lived goroutine
// (STYLE §10, DESIGN §1.3): through a Group owned by the component that
// stops it, so shutdown can wait for every goroutine it started.
package goroutine

import (
	"sync"
	"sync/atomic"
	"time"
)

// Group tracks the goroutines one owner starts. The owner signals them to
// stop by its own means (a context, a closed channel) and then calls Wait.
// The zero Group is ready to use; a Group must not be copied after first
// use (go vet's copylocks check catches a copy).
type Group struct {
	wg      sync.WaitGroup
	running atomic.Int64
}

// Go runs f on a new goroutine tracked by g. It may be called from any
// goroutine, including one of g's own, but not after Wait has returned
// for good (the owner's shutdown has begun and nothing may start any more).
func (g *Group) Go(f func()) {
	g.wg.Add(1)
	g.running.Add(1)
	go func() {
		defer g.wg.Done()
		defer g.running.Add(-1)
		f()
	}()
}

// Wait blocks until every goroutine started by Go has returned.
func (g *Group) Wait() { g.wg.Wait() }

// Running is the number of g's goroutines that have not returned yet
// (for tests and debugging; it may change as soon as it is read).
func (g *Group) Running() int { return int(g.running.Load()) }

// WaitFor is Wait bounded by d: it reports whether every goroutine
// returned within d. The helper goroutine it needs for the bound is not
// one of g's and ends when they do.
func (g *Group) WaitFor(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
