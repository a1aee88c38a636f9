package chaos

import (
	"context"
	"net"
	"sync"
)

// ioGate freezes the I/O of every connection dialed through it while it
// is held: what an in-process copier member sends and receives waits, as
// if its process were stopped (SIGSTOP), while its goroutines keep
// running into their timeouts. Released, everything queued goes out and
// comes in late — a zombie's requests. Safe for concurrent use.
type ioGate struct {
	mu   sync.Mutex
	held chan struct{} // open while held; nil when released
}

// hold freezes the gate's connections until release.
func (g *ioGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == nil {
		g.held = make(chan struct{})
	}
}

// release lets the gate's connections go on.
func (g *ioGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
}

// wait returns once the gate is not held, or with ctx's error.
func (g *ioGate) wait(ctx context.Context) error {
	g.mu.Lock()
	h := g.held
	g.mu.Unlock()
	if h == nil {
		return nil
	}
	select {
	case <-h:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dial is a client.WithDialer dialer whose connections the gate freezes.
func (g *ioGate) dial(ctx context.Context, addr string) (net.Conn, error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, g: g}, nil
}

// gatedConn waits for its gate before every write and before handing over
// what a read brought.
type gatedConn struct {
	net.Conn
	g *ioGate
}

func (c *gatedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	_ = c.g.wait(context.Background())
	return n, err
}

func (c *gatedConn) Write(b []byte) (int, error) {
	_ = c.g.wait(context.Background())
	return c.Conn.Write(b)
}
