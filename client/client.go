// Package client is the Go client of Sluice: admin calls, a batching
// Producer and a prefetching Consumer, over gRPC.
//
// A Client keeps one gRPC connection per broker address and a metadata
// cache (topic -> partitions -> leader address). Every method is safe for
// concurrent use. Close releases the connections; Producers and Consumers
// made from a Client must be closed before it.
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/proto/codec"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// MaxMessageSize bounds gRPC messages both ways; it matches the broker's.
const MaxMessageSize = 64 << 20

// ErrClosed is returned by calls on a closed Client, Producer or Consumer.
var ErrClosed = errors.New("sluice: client closed")

// Option configures a Client.
type Option func(*clientConfig) error

type clientConfig struct {
	dialTimeout    time.Duration
	requestTimeout time.Duration
	dialer         func(ctx context.Context, addr string) (net.Conn, error)
	tls            *tls.Config                           // nil: plaintext
	scram          *scramLogin                           // nil: no SCRAM
	bearer         func(context.Context) (string, error) // nil: no bearer token
	clientID       string                                // "": none sent (throttle.go)
}

// WithTLS makes every connection to a broker TLS with cfg (cloned): set
// RootCAs to the CA of the brokers' certificates (nil: the system's), and
// Certificates or GetClientCertificate for a client certificate when the
// brokers ask for one. A broker's certificate is checked against the host
// it is dialed at (ServerName overrides it). LoadTLSConfig builds one
// from PEM files.
func WithTLS(cfg *tls.Config) Option {
	return func(c *clientConfig) error {
		if cfg == nil {
			return errors.New("sluice: TLS config must not be nil")
		}
		c.tls = cfg.Clone()
		return nil
	}
}

// LoadTLSConfig is a client TLS configuration from PEM files: caFile the
// CA that signed the brokers' certificates (empty: the system's roots),
// certFile and keyFile a client certificate (both or neither).
func LoadTLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("sluice: TLS CA file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("sluice: TLS CA file %s: no PEM certificate in it", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("sluice: a TLS client certificate needs its key file, and a key file its certificate")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("sluice: TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// WithDialer makes every connection to a broker with dial instead of a
// plain TCP dial (addr is the broker's "host:port"): a proxy, a SOCKS
// dialer, a connection wrapper for tests. It must not be nil.
func WithDialer(dial func(ctx context.Context, addr string) (net.Conn, error)) Option {
	return func(c *clientConfig) error {
		if dial == nil {
			return errors.New("sluice: dialer must not be nil")
		}
		c.dialer = dial
		return nil
	}
}

// WithDialTimeout bounds how long one connection attempt to a broker may
// take (default 5s). It must be positive.
func WithDialTimeout(d time.Duration) Option {
	return func(c *clientConfig) error {
		if d <= 0 {
			return fmt.Errorf("sluice: dial timeout must be positive, got %v", d)
		}
		c.dialTimeout = d
		return nil
	}
}

// WithRequestTimeout bounds each RPC (default 30s). Long-polling fetches
// get their max wait on top of it. It must be positive.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *clientConfig) error {
		if d <= 0 {
			return fmt.Errorf("sluice: request timeout must be positive, got %v", d)
		}
		c.requestTimeout = d
		return nil
	}
}

// Client is a connection to a Sluice cluster. It is safe for concurrent use.
type Client struct {
	cfg   clientConfig
	seeds []string

	mu      sync.Mutex // guards the following
	conns   map[string]*grpc.ClientConn
	brokers map[int32]string // node id -> address, from the last metadata
	topics  map[string]*topicMeta
	closed  bool
	// suspect are addresses whose last cluster-wide call failed in
	// transport (refused, unavailable, no answer in time), with when:
	// invokeAny tries them last for suspectFor, so that a paused or dead
	// broker listed first does not cost every call its whole timeout.
	suspect map[string]time.Time
}

// topicMeta is the cached metadata of one topic. It is immutable once
// stored: a refresh replaces it.
type topicMeta struct {
	err        error // non-nil when the broker reported a topic error
	partitions []partitionMeta
	// maxMessageBytes is the topic's max.message.bytes, from its configs
	// in the metadata; 0 when they do not say.
	maxMessageBytes int
}

type partitionMeta struct {
	leaderID    int32
	leaderEpoch int32
	leaderAddr  string // "" when the leader is unknown
	// err is the metadata's error for the partition (no leader), nil when
	// none: an offlineError for KAFKA_STORAGE_ERROR.
	err error
}

// New returns a Client that bootstraps from brokers (host:port; empty
// strings are ignored). It does not contact the cluster; connections are
// made on first use. An address that is not host:port with a port from 1
// to 65535 fails New with a *BrokerAddrError, before anything is dialed.
func New(brokers []string, opts ...Option) (*Client, error) {
	cfg := clientConfig{dialTimeout: 5 * time.Second, requestTimeout: 30 * time.Second}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.scram != nil && cfg.tls == nil {
		return nil, errors.New("sluice: SCRAM needs TLS (WithTLS): the session token must not travel in the clear")
	}
	if cfg.bearer != nil && cfg.tls == nil {
		return nil, errors.New("sluice: a bearer token needs TLS (WithTLS): it must not travel in the clear")
	}
	if cfg.bearer != nil && cfg.scram != nil {
		return nil, errors.New("sluice: WithSCRAM and WithBearerToken: choose one")
	}
	var seeds []string
	for _, b := range brokers {
		if b == "" {
			continue
		}
		if err := checkBrokerAddr(b); err != nil {
			return nil, err
		}
		seeds = append(seeds, b)
	}
	if len(seeds) == 0 {
		return nil, errors.New("sluice: at least one broker address is required")
	}
	return &Client{
		cfg:     cfg,
		seeds:   seeds,
		conns:   map[string]*grpc.ClientConn{},
		brokers: map[int32]string{},
		topics:  map[string]*topicMeta{},
	}, nil
}

// Close closes every connection. Calls after Close return ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var first error
	for addr, cc := range c.conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.conns, addr)
	}
	return first
}

// conn returns the connection to addr, creating it if needed. An addr
// that is not host:port (a broker advertising a bad address) fails with a
// *BrokerAddrError and no connection is made.
func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if cc := c.conns[addr]; cc != nil {
		return cc, nil
	}
	if err := checkBrokerAddr(addr); err != nil {
		return nil, err
	}
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if c.cfg.tls != nil {
		creds = credentials.NewTLS(c.cfg.tls)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: c.cfg.dialTimeout,
		}),
		grpc.WithInitialWindowSize(4 << 20),
		grpc.WithInitialConnWindowSize(16 << 20),
		grpc.WithReadBufferSize(256 << 10),
		grpc.WithWriteBufferSize(256 << 10),
	}
	if c.cfg.dialer != nil {
		opts = append(opts, grpc.WithContextDialer(c.cfg.dialer))
	}
	var session *scramSession
	if c.cfg.scram != nil {
		session = &scramSession{login: c.cfg.scram}
		opts = append(opts, session.dialOptions()...)
	}
	if c.cfg.bearer != nil {
		opts = append(opts, bearerOptions(c.cfg.bearer)...)
	}
	if c.cfg.clientID != "" {
		opts = append(opts, clientIDOptions(c.cfg.clientID)...)
	}
	cc, err := grpc.NewClient(addr, append(opts, codec.DialOptions()...)...)
	if err != nil {
		return nil, fmt.Errorf("sluice: connect %s: %w", addr, err)
	}
	if session != nil {
		session.cc = cc
	}
	c.conns[addr] = cc
	return cc, nil
}

// rpcError turns a gRPC status carrying a Sluice google.rpc.ErrorInfo into
// an *errs.Error (wrapping nothing else); other errors pass through.
func rpcError(err error) error {
	e, _ := errs.FromStatus(err)
	return e
}

func unwrapStatus(err error) error {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Err()
	}
	return err
}

// isRetriable reports whether an error may go away when the request is
// sent again: retriable Sluice codes, and transport failures.
func isRetriable(err error) bool {
	var e *errs.Error
	if errors.As(err, &e) {
		return e.Retriable()
	}
	switch status.Code(unwrapStatus(err)) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

// isTransportError reports whether err is a failure to reach a broker or
// to hear back from it (no Sluice error code): the broker may be gone, so
// the producer refreshes its metadata, as Kafka does on a disconnect.
func isTransportError(err error) bool {
	var e *errs.Error
	if errors.As(err, &e) {
		return false
	}
	switch status.Code(unwrapStatus(err)) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// needsMetadata reports whether err means the cached leader is stale.
func needsMetadata(code sluicev1.ErrorCode) bool {
	switch code {
	case sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION,
		sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, sluicev1.ErrorCode_FENCED_LEADER_EPOCH,
		sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH,
		// The replica is offline on that broker after a disk error
		// (decision 42): the controller moves its leadership away.
		sluicev1.ErrorCode_KAFKA_STORAGE_ERROR:
		return true
	}
	return false
}

// codeError returns nil for NONE, else an *errs.Error naming the topic
// partition.
func codeError(code sluicev1.ErrorCode, msg string) error {
	if code == sluicev1.ErrorCode_NONE {
		return nil
	}
	return &errs.Error{Code: code, Message: msg}
}

// RefreshMetadata reloads the cached metadata of topics (all cached topics
// when none are named) from the cluster.
func (c *Client) RefreshMetadata(ctx context.Context, topics ...string) error {
	if len(topics) == 0 {
		c.mu.Lock()
		for t := range c.topics {
			topics = append(topics, t)
		}
		c.mu.Unlock()
		if len(topics) == 0 {
			return nil
		}
	}
	_, err := c.Metadata(ctx, topics...)
	return err
}

// storeMetadata updates the cache from a metadata response.
func (c *Client) storeMetadata(resp *sluicev1.MetadataResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(resp.Brokers) > 0 {
		c.brokers = make(map[int32]string, len(resp.Brokers))
		for _, b := range resp.Brokers {
			c.brokers[b.NodeId] = b.Address
		}
	}
	for _, t := range resp.Topics {
		tm := &topicMeta{err: codeError(t.ErrorCode, t.ErrorMessage)}
		if tm.err == nil {
			if n, err := strconv.Atoi(t.Configs["max.message.bytes"]); err == nil && n > 0 {
				tm.maxMessageBytes = n
			}
			tm.partitions = make([]partitionMeta, len(t.Partitions))
			for _, p := range t.Partitions {
				if p.Partition < 0 || int(p.Partition) >= len(tm.partitions) {
					continue
				}
				pm := partitionMeta{leaderID: p.LeaderId, leaderEpoch: p.LeaderEpoch, err: partitionMetadataError(p.ErrorCode, p.ErrorMessage)}
				if p.LeaderId >= 0 && p.ErrorCode == sluicev1.ErrorCode_NONE {
					pm.leaderAddr = c.brokers[p.LeaderId]
				}
				tm.partitions[p.Partition] = pm
			}
		}
		c.topics[t.Name] = tm
	}
}

// cachedTopic returns the cached metadata of topic, or nil.
func (c *Client) cachedTopic(topic string) *topicMeta {
	c.mu.Lock()
	tm := c.topics[topic]
	c.mu.Unlock()
	return tm
}

// topic returns the metadata of topic, loading it when absent. A topic the
// broker reports as an error is returned as that error.
func (c *Client) topic(ctx context.Context, topic string) (*topicMeta, error) {
	tm := c.cachedTopic(topic)
	if tm == nil {
		if _, err := c.Metadata(ctx, topic); err != nil {
			return nil, err
		}
		if tm = c.cachedTopic(topic); tm == nil {
			return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q is not in the metadata", topic)
		}
	}
	if tm.err != nil {
		return nil, tm.err
	}
	return tm, nil
}

// forget drops topic from the cache so that the next use reloads it.
func (c *Client) forget(topic string) {
	c.mu.Lock()
	delete(c.topics, topic)
	c.mu.Unlock()
}

// leader returns the leader address and epoch of a partition. With no
// leader the error is the metadata's for the partition when it gave one
// (ErrPartitionOffline for KAFKA_STORAGE_ERROR), else LEADER_NOT_AVAILABLE.
func (c *Client) leader(ctx context.Context, topic string, partition int32) (string, int32, error) {
	tm, err := c.topic(ctx, topic)
	if err != nil {
		return "", 0, err
	}
	if partition < 0 || int(partition) >= len(tm.partitions) {
		return "", 0, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q has no partition %d (it has %d)", topic, partition, len(tm.partitions))
	}
	pm := tm.partitions[partition]
	if pm.leaderAddr == "" {
		if pm.err != nil {
			return "", 0, pm.err
		}
		return "", 0, errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "topic %q partition %d has no leader", topic, partition)
	}
	return pm.leaderAddr, pm.leaderEpoch, nil
}
