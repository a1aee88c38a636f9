package cluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/proto/codec"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// MaxInterNodeMessage bounds inter-node gRPC messages (metadata snapshots
// of large clusters included).
const MaxInterNodeMessage = 64 << 20

// gRPC transport settings of inter-node connections and of the brokers'
// servers: HTTP/2 flow-control windows (per stream and per connection)
// large enough that a replica fetch or produce of megabytes does not wait
// for window updates (setting them turns off gRPC's dynamic window
// estimation, which starts at 64 KiB), and socket read/write buffers.
const (
	StreamWindow = 4 << 20
	ConnWindow   = 16 << 20
	SocketBuffer = 256 << 10
)

// ConnPool holds one gRPC client connection per peer address. Safe for
// concurrent use.
type ConnPool struct {
	// dialMap redirects dials (fault injection, testing only); nil in
	// production. Read-only.
	dialMap faultnet.DialMap
	// creds secure the connections (mutual TLS between nodes); nil:
	// plaintext. Read-only.
	creds credentials.TransportCredentials

	mu     sync.Mutex // guards the following
	conns  map[string]*grpc.ClientConn
	closed bool
}

// NewConnPool returns an empty pool.
func NewConnPool() *ConnPool { return &ConnPool{conns: map[string]*grpc.ClientConn{}} }

// NewConnPoolWithDialMap returns an empty pool whose connections to an
// address in m dial m's target for it instead (testing only: a fault
// injection proxy stands there). Connections are still keyed, and their
// gRPC authority set, by the real address. An empty m is NewConnPool.
func NewConnPoolWithDialMap(m faultnet.DialMap) *ConnPool {
	return NewConnPoolWith(m, nil)
}

// NewConnPoolWith returns an empty pool dialing with creds (nil:
// plaintext) and, with a non-empty m, redirecting dials as
// NewConnPoolWithDialMap does.
func NewConnPoolWith(m faultnet.DialMap, creds credentials.TransportCredentials) *ConnPool {
	p := NewConnPool()
	if len(m) > 0 {
		p.dialMap = m
	}
	p.creds = creds
	return p
}

// Get returns the connection to addr, creating it (lazily connecting) if
// needed.
func (p *ConnPool) Get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "connection pool is closed")
	}
	if cc := p.conns[addr]; cc != nil {
		return cc, nil
	}
	creds := p.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxInterNodeMessage), grpc.MaxCallSendMsgSize(MaxInterNodeMessage)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
		grpc.WithInitialWindowSize(StreamWindow), grpc.WithInitialConnWindowSize(ConnWindow),
		grpc.WithReadBufferSize(SocketBuffer), grpc.WithWriteBufferSize(SocketBuffer),
	}
	opts = append(opts, codec.DialOptions()...)
	if p.dialMap != nil {
		opts = append(opts, grpc.WithContextDialer(p.mappedDialer(addr)))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	p.conns[addr] = cc
	return cc, nil
}

// mappedDialer dials the dial map's target for addr. gRPC hands the dialer
// the resolved address (a host name becomes an IP), so a map entry for
// either the address as given or the resolved one applies; unmapped
// addresses are dialed as resolved, as gRPC's own dialer would.
func (p *ConnPool) mappedDialer(addr string) func(ctx context.Context, resolved string) (net.Conn, error) {
	return func(ctx context.Context, resolved string) (net.Conn, error) {
		target, ok := p.dialMap.Lookup(addr)
		if !ok {
			target = p.dialMap.Target(resolved)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", target)
	}
}

// Close closes every connection.
func (p *ConnPool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for a, cc := range p.conns {
		_ = cc.Close()
		delete(p.conns, a)
	}
}

// ControllerEndpoint is a controller voter's id and gRPC address.
type ControllerEndpoint struct {
	ID      int32
	Address string
}

// ControllerClient sends requests to the active controller. It learns the
// leader from NOT_CONTROLLER answers (their ErrorInfo names it) and from
// SetLeader, and otherwise tries every known voter in turn.
type ControllerClient struct {
	pool    *ConnPool
	resolve func() []ControllerEndpoint

	mu     sync.Mutex // guards leader
	leader int32      // 0 = unknown
}

// NewControllerClient returns a client over pool; resolve lists the
// controller voters currently known (from gossip and configuration).
func NewControllerClient(pool *ConnPool, resolve func() []ControllerEndpoint) *ControllerClient {
	return &ControllerClient{pool: pool, resolve: resolve}
}

// SetLeader records a leader hint (0 = unknown).
func (c *ControllerClient) SetLeader(id int32) {
	c.mu.Lock()
	c.leader = id
	c.mu.Unlock()
}

// Leader is the current leader hint (0 = unknown).
func (c *ControllerClient) Leader() int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// Endpoints lists the known voters, the hinted leader first.
func (c *ControllerClient) Endpoints() []ControllerEndpoint {
	eps := c.resolve()
	lead := c.Leader()
	for i, e := range eps {
		if e.ID == lead && i > 0 {
			eps[0], eps[i] = eps[i], eps[0]
			break
		}
	}
	return eps
}

// Call runs fn against the active controller, retrying with backoff on
// NOT_CONTROLLER and transport failures until ctx is done. Each attempt is
// bounded by attempt (or ctx, if sooner). Other errors return at once,
// decoded into *errs.Error when they carry a Sluice code.
func (c *ControllerClient) Call(ctx context.Context, attempt time.Duration, fn func(ctx context.Context, cl internalv1.ControllerClient) error) error {
	delay := 20 * time.Millisecond
	var last error
	for {
		eps := c.Endpoints()
		if len(eps) == 0 {
			last = errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "no controller is known yet")
		}
		for _, ep := range eps {
			if ctx.Err() != nil {
				break
			}
			cc, err := c.pool.Get(ep.Address)
			if err != nil {
				last = err
				continue
			}
			actx, cancel := context.WithTimeout(ctx, attempt)
			err = fn(actx, internalv1.NewControllerClient(cc))
			cancel()
			if err == nil {
				c.SetLeader(ep.ID)
				return nil
			}
			derr, md := errs.FromStatus(err)
			last = derr
			if errs.Code(derr) == sluicev1.ErrorCode_NOT_CONTROLLER {
				if id, perr := strconv.ParseInt(md["leader_id"], 10, 32); perr == nil && id > 0 && int32(id) != ep.ID {
					c.SetLeader(int32(id))
					break // restart with the named leader first
				}
				continue
			}
			if errs.Code(derr) == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
				switch status.Code(err) {
				case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unimplemented:
					// That voter is down or not a controller: try the next.
					// If the attempt ended with ctx, the loop ends below
					// with NOT_CONTROLLER: the nested call's own
					// DeadlineExceeded is not the caller's answer (it would
					// reach a client as a transport-like failure it does
					// not retry).
					continue
				}
			}
			return derr
		}
		select {
		case <-ctx.Done():
			// Whatever the last failure was (a dial error, a voter without a
			// leader), the caller's answer is the same: no active controller
			// could take the request. NOT_CONTROLLER is retriable.
			cause := "no controller answered"
			if last != nil {
				cause = last.Error()
			}
			return errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "no active controller reachable before the deadline: %s", cause)
		case <-time.After(delay):
		}
		if delay < 500*time.Millisecond {
			delay *= 2
		}
	}
}
