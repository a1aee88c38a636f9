package kafka

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/internal/ratelog"
)

// Defaults of Config.
const (
	// DefaultMaxRequestSize is Kafka's socket.request.max.bytes: a frame
	// announcing more closes the connection before it is read.
	DefaultMaxRequestSize = 100 << 20
	// DefaultMaxInFlight bounds the requests of one connection read but
	// not yet answered; the connection is not read further until one is.
	DefaultMaxInFlight = 32
	// DefaultIdleTimeout is Kafka's connections.max.idle.ms.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultSetupTimeout bounds the wait for a connection's first
	// request.
	DefaultSetupTimeout = 10 * time.Second
)

// Config is what a Server needs.
type Config struct {
	// NodeID is this broker's id.
	NodeID int32
	// Replicas, Metadata and Controllers are the broker's (required).
	Replicas    *cluster.ReplicaManager
	Metadata    *cluster.MetadataCache
	Controllers *cluster.ControllerClient
	// ProducerIDs hands out the ids of idempotent producers (required).
	ProducerIDs txn.ProducerIDSource
	// Gate authorizes the callers (nil: everything allowed).
	Gate *auth.Gate
	// Quotas throttles the callers over their client quotas (nil: none).
	Quotas Quotas
	// Logger may be nil (slog.Default).
	Logger *slog.Logger
	// Now may be nil (time.Now).
	Now func() time.Time
	// MaxRequestSize, MaxInFlight, IdleTimeout, SetupTimeout: 0 is the
	// default.
	MaxRequestSize int32
	MaxInFlight    int
	// IdleTimeout closes a connection that sends no request, or takes no
	// answer, for this long (connections.max.idle.ms; negative: never).
	IdleTimeout time.Duration
	// SetupTimeout closes a connection whose first request has not
	// wholly arrived this long after it was accepted (a TLS handshake
	// included): one that holds a descriptor without using it.
	SetupTimeout time.Duration
	// Auth is how connections authenticate (authn.go); the zero value:
	// no SASL, anonymous unless a client certificate says otherwise.
	Auth Authentication
	// Coordinators serve transactions and consumer groups (nil ones:
	// their requests are refused with INVALID_REQUEST).
	Coordinators Coordinators
	// Metrics is told of requests, bytes and closed connections
	// (metrics.go; nil: none).
	Metrics Metrics
	// FailedAuthenticationDelay holds a connection whose SASL
	// authentication failed open this long after the failure's answer
	// before it is closed (Kafka's connection.failed.authentication
	// .delay.ms; 0: closed at once).
	FailedAuthenticationDelay time.Duration
	// RequestBytes is the listener's budget of request bytes in flight
	// (queued.max.request.bytes; nil: none). A frame's bytes are
	// acquired once its size is read, before its body is, and held until
	// its answer is written (a JoinGroup's or SyncGroup's, which waits
	// for other clients, only until it is started).
	RequestBytes RequestBudget
}

// RequestBudget is a budget of request bytes shared by a listener's
// connections.
type RequestBudget interface {
	// Acquire takes n bytes, waiting in arrival order until they fit;
	// with nothing taken it returns the error that ended the wait
	// (ctx's, or the node shutting down).
	Acquire(ctx context.Context, n int64) error
	// Release gives back n bytes Acquire took.
	Release(n int64)
}

// Server serves the Kafka protocol on the listeners given to Serve.
type Server struct {
	cfg     Config
	log     *slog.Logger
	leaders cluster.Leaders

	ctx    context.Context // ends when the server closes
	cancel context.CancelFunc
	// authLogs rate-limits the lines refused authentications write.
	authLogs *ratelog.Limiter
	// limitLogs rate-limits the lines requests over the limits write,
	// per API.
	limitLogs *ratelog.Limiter
	// meters is cfg.Metrics with each API's meter resolved (nil: none).
	meters *meters

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// NewServer returns a server for cfg.
func NewServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxRequestSize <= 0 {
		cfg.MaxRequestSize = DefaultMaxRequestSize
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.SetupTimeout <= 0 {
		cfg.SetupTimeout = DefaultSetupTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, log: cfg.Logger.With("listener", "kafka"),
		leaders: cluster.Leaders{Self: cfg.NodeID, Replicas: cfg.Replicas, Cache: cfg.Metadata},
		ctx:     ctx, cancel: cancel, authLogs: &ratelog.Limiter{Every: 10 * time.Second},
		limitLogs: &ratelog.Limiter{Every: 10 * time.Second}, meters: newMeters(cfg.Metrics),
		listeners: make(map[net.Listener]struct{}), conns: make(map[*conn]struct{})}
}

// ErrServerClosed is what Serve returns after Close.
var ErrServerClosed = errors.New("kafka: server closed")

// Serve accepts connections on ln until Close (ErrServerClosed) or an
// accept error. ln is closed when Serve returns.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: wait, as net/http.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "in", backoff)
				select {
				case <-time.After(backoff):
				case <-s.ctx.Done():
					return ErrServerClosed
				}
				continue
			}
			return err
		}
		backoff = 0
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// Close stops accepting, closes every connection (requests being served
// see their context end) and waits for the connections' goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}
