package node

import (
	"errors"
	"fmt"
	"github.com/sluice-io/sluice/auth"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/cluster/membership"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/storage"
)

// Roles a node can take (DESIGN §2).
const (
	RoleController = membership.RoleController
	RoleBroker     = membership.RoleBroker
)

// Config is a node's whole configuration. Start the fields from
// DefaultConfig; flags and SLUICE_* environment variables fill it
// (cmd/sluiced), tests edit it (node/nodetest); Validate checks it and
// Start calls Validate. DefaultConfig holds every default, taken from the
// layers that use the setting (cluster.DefaultHeartbeatInterval, ...), so
// what sluiced prints and Start uses agree. Where a field's comment names
// a default for its zero value, zero also stands for that default (for a
// Config not started from DefaultConfig): Start applies it, and
// WithDefaults shows it.
type Config struct {
	NodeID  int32
	DataDir string
	// Roles: RoleController, RoleBroker or both (the default).
	Roles     []string
	Listen    string // client gRPC listen address (the public services)
	Advertise string // address given to clients; defaults to Listen's actual address
	// InternalListen / InternalAdvertise: the internal gRPC listener, the
	// only one serving the inter-node services (Controller, Replica,
	// TxnBroker; decision 41), and the address other nodes dial it at
	// (registered with the controller and gossiped). An empty
	// InternalListen binds 127.0.0.1 on a port the kernel picks; an empty
	// InternalAdvertise is InternalListen's actual address, or, when that
	// is a wildcard IP (0.0.0.0), Advertise's host with its port.
	InternalListen    string
	InternalAdvertise string
	// KafkaListen / KafkaAdvertise: the Kafka-protocol listener (issue 34,
	// package kafka), which brokers serve and controller-only nodes do
	// not open, and the address Kafka clients are given for this broker in
	// Metadata (registered with the controller). An empty KafkaListen
	// disables it (DefaultConfig has Kafka's 127.0.0.1:9092); an empty
	// KafkaAdvertise is KafkaListen's actual address, or, when that is a
	// wildcard IP (0.0.0.0), Advertise's host with its port. With TLS on
	// (TLSCertFile) it speaks TLS as the client listener does, with the
	// same certificate and client-certificate policy.
	KafkaListen    string
	KafkaAdvertise string
	HTTPListen     string // /healthz, /readyz, /metrics (and /debug/pprof with Pprof); empty disables
	Rack           string
	// Pprof serves /debug/pprof on HTTPListen (off by default: a CPU
	// profile is for an operator, not for whoever reaches the port).
	Pprof bool

	// TLS (docs/security.md, decision 61). TLSCertFile and TLSKeyFile
	// are this node's certificate, naming it with a node URI of
	// ClusterName (auth.NodeURI; `sluice cert create-node`), and
	// TLSCAFile the cluster's CA. Set, they turn on mutual TLS between
	// nodes — the internal listener, the Raft transport and this node's
	// calls to the others accept only certificates of that CA naming a
	// node of ClusterName — and TLS on the client listener. Files are
	// read again when they change (auth.Reloader).
	TLSCertFile, TLSKeyFile, TLSCAFile string
	// ClusterName is the cluster name node certificates must carry
	// (auth.DefaultClusterName when empty).
	ClusterName string
	// ClientTLSCertFile/ClientTLSKeyFile: another certificate for the
	// client listener (one from a public CA, say); default the node's.
	// ClientTLSCAFile verifies client certificates (default TLSCAFile).
	ClientTLSCertFile, ClientTLSKeyFile, ClientTLSCAFile string
	// ClientAuth is the client listener's client-certificate policy:
	// none, request (verified if given) or require (ssl.client.auth).
	ClientAuth string
	// Authentication is optional (anonymous callers are User:ANONYMOUS)
	// or required (anonymous callers are refused on the client listener,
	// but for gRPC health and the Auth service). Empty is optional.
	Authentication string
	// TLSPrincipalMappingRules turn a client certificate's subject into
	// its principal's name (Kafka's ssl.principal.mapping.rules, KIP-371;
	// empty: DEFAULT, the whole subject).
	TLSPrincipalMappingRules string
	// JWT bearer tokens (Kafka's OAUTHBEARER): signed by a key of the
	// JWKS in JWTJWKSFile or at JWTJWKSURL, for JWTAudience (and from
	// JWTIssuer when set); the principal is User:<JWTPrincipalClaim>
	// ("sub" when empty). Off when neither JWKS is set.
	JWTJWKSFile, JWTJWKSURL, JWTIssuer, JWTAudience, JWTPrincipalClaim string
	// Authorizer is "" (off: every principal may do everything) or
	// "acl" (Kafka's StandardAuthorizer: the ACLs in the metadata decide;
	// no ACL matching denies). SuperUsers are principals (User:admin)
	// allowed everything.
	Authorizer string
	SuperUsers []string
	// AuditAllowedAdmin logs allowed operations on the cluster resource
	// too (denials are always logged).
	AuditAllowedAdmin bool
	// QuotaWindowSamples and QuotaWindowSize are how client quotas
	// are measured (Kafka's quota.window.num and
	// quota.window.size.seconds; 11 and 1 s when 0): a caller may run
	// QuotaWindowSize of its quota ahead before it is throttled, and the
	// longest throttle is their product (auth.QuotaConfig).
	QuotaWindowSamples int
	QuotaWindowSize    time.Duration
	// SASLSessionLifetime is how long a SCRAM session lasts before the
	// client must authenticate again (auth.DefaultSessionLifetime when 0).
	SASLSessionLifetime time.Duration
	// HTTPTLS serves HTTPListen over TLS with HTTPTLSCertFile/KeyFile
	// (default the node's certificate).
	HTTPTLS                         bool
	HTTPTLSCertFile, HTTPTLSKeyFile string
	// RaftListen / RaftAdvertise: the controller quorum transport.
	RaftListen    string
	RaftAdvertise string
	// ControllerVoters is the static quorum, identical on every voter;
	// empty means this node alone (it must then be a controller).
	ControllerVoters []controller.Voter
	// GossipListen / GossipAdvertise: memberlist (TCP and UDP); IP:port.
	// An empty GossipListen binds 127.0.0.1 on a port the kernel picks.
	GossipListen    string
	GossipAdvertise string
	// Join lists gossip seeds (host:port).
	Join []string
	// GossipKeyFile, if set, encrypts gossip with the keys it lists (one
	// base64 key of 16, 24 or 32 bytes per line, the first the primary;
	// membership.ReadKeyFile), read again every few seconds so that keys
	// rotate without a restart (docs/operations.md, Gossip encryption).
	// Every node of a cluster needs it, with a key in common. Empty:
	// plaintext gossip.
	GossipKeyFile string
	// RetentionCheckInterval is log.retention.check.interval.ms.
	RetentionCheckInterval time.Duration
	// LogCleanerBackoff is log.cleaner.backoff.ms: how often the log
	// cleaner checks the compacted partitions.
	LogCleanerBackoff time.Duration
	// PageCacheWindow is how many of each segment's newest bytes stay in
	// the OS page cache once written back; older pages are dropped
	// (decision 44). 0 leaves the page cache to the kernel.
	PageCacheWindow int64
	// Connection limits per listener (issue 29; Kafka's max.connections
	// and max.connections.per.ip; connlimit.go): past Max...Connections
	// open connections on the client gRPC, internal gRPC, HTTP or Kafka
	// listener, or ...PerIP of them from one IP address, a new connection
	// is reset at once and counted
	// (sluice_listener_connections_refused_total), so that no flood of
	// connections takes the file descriptors the partitions need. Zero
	// takes the default derived from the open-files limit and, for the
	// client gRPC listener, whether the node has a Kafka listener
	// (defaultMaxConnections, and the limit per IP from the total:
	// defaultMaxConnectionsPerIP); DefaultConfig holds this process's
	// values for its own settings (a Kafka listener on).
	MaxConnections, MaxConnectionsPerIP                 int
	InternalMaxConnections, InternalMaxConnectionsPerIP int
	HTTPMaxConnections, HTTPMaxConnectionsPerIP         int
	KafkaMaxConnections, KafkaMaxConnectionsPerIP       int
	// ConnectionSetupTimeout closes a gRPC connection that has not
	// finished its HTTP/2 handshake (client preface and settings) in this
	// time, one that sends nothing included, and a Kafka connection whose
	// first request has not wholly arrived by then (0 = 10 s).
	ConnectionSetupTimeout time.Duration
	// ConnectionsMaxIdle closes a gRPC connection with no call in
	// progress, an HTTP connection between requests and a Kafka
	// connection that sends no request, idle this long (Kafka's
	// connections.max.idle.ms; 0 = 10 min, negative: never).
	ConnectionsMaxIdle time.Duration
	// FailedAuthenticationDelay holds the answer to a refused SCRAM
	// exchange (gRPC) and the close of a Kafka connection whose SASL
	// authentication failed this long (Kafka's
	// connection.failed.authentication.delay.ms; 0 = 100 ms, negative:
	// none).
	FailedAuthenticationDelay time.Duration
	// QueuedMaxRequestBytes is each gRPC listener's budget of request
	// bytes in flight (issue 29; Kafka's queued.max.request.bytes;
	// decision 51; requestbudget.go): a request is read only once the
	// largest message the listener accepts (api.MaxMessageSize) fits in
	// its listener's budget, waits until it does (bounded by its
	// deadline), and then holds its message's size until its handler is
	// done with it. At least MinQueuedMaxRequestBytes; 0 =
	// DefaultQueuedMaxRequestBytes.
	QueuedMaxRequestBytes int64
	// ShutdownTimeout bounds the graceful drain of in-flight requests.
	ShutdownTimeout time.Duration
	// ControlledShutdownTimeout bounds moving leaderships away on shutdown
	// (0 = 10 s).
	ControlledShutdownTimeout time.Duration
	// HeartbeatInterval (broker) and SessionTimeout (controller): a broker
	// silent for SessionTimeout is fenced. Zero takes the defaults
	// (cluster.DefaultHeartbeatInterval, 250 ms;
	// controller.DefaultSessionTimeout, 2 s).
	HeartbeatInterval time.Duration
	SessionTimeout    time.Duration
	// LeaderRebalanceInterval and LeaderImbalanceThreshold (controller):
	// every interval, leaderships go back to the preferred replicas of
	// brokers whose share of preferred partitions led elsewhere is above
	// the threshold (Kafka's auto.leader.rebalance.enable,
	// leader.imbalance.check.interval.seconds,
	// leader.imbalance.per.broker.percentage). Zero takes the defaults
	// (controller.DefaultLeaderRebalanceInterval, 5 min, and
	// DefaultLeaderImbalanceThreshold, 0.10); a negative interval disables
	// it.
	LeaderRebalanceInterval  time.Duration
	LeaderImbalanceThreshold float64
	// DefaultReplicationFactor and DefaultMinInsyncReplicas (controller)
	// are the cluster defaults for a new topic that names no replication
	// factor or min.insync.replicas (Kafka's default.replication.factor and
	// min.insync.replicas; controller.TopicDefaults): the default
	// min.insync.replicas is capped at the topic's replication factor.
	// Internal topics do not use them. Give every controller voter the
	// same values. Zero takes the default, 1.
	DefaultReplicationFactor int32
	DefaultMinInsyncReplicas int32
	// ReplicaLagTimeMax is replica.lag.time.max.ms (0 = 30 s).
	ReplicaLagTimeMax time.Duration
	// TransactionStatePartitions is the partition count this broker gives
	// __transaction_state when it creates it
	// (transaction.state.log.num.partitions; 0 = 50). It must be the same
	// on every broker; once the topic exists its own count decides.
	TransactionStatePartitions int32
	// TransactionMaxTimeout is transaction.max.timeout.ms: the largest
	// transaction timeout a producer may ask for (0 = 15 min).
	TransactionMaxTimeout time.Duration
	// TransactionAbortTimedOutInterval is how often the transaction
	// coordinator aborts timed-out transactions and expires idle ids
	// (transaction.abort.timed.out.transaction.cleanup.interval.ms; 0 = 10 s).
	TransactionAbortTimedOutInterval time.Duration
	// TransactionalIDExpiration is transactional.id.expiration.ms: an id
	// without an open transaction and idle this long is removed (0 = 7 days).
	TransactionalIDExpiration time.Duration
	// OffsetsTopicPartitions is the partition count this broker gives
	// __consumer_offsets when it creates it (offsets.topic.num.partitions;
	// 0 = 50). Every broker must use the same value.
	OffsetsTopicPartitions int32
	// GroupSessionTimeout is the session timeout of members that ask for
	// none (group.consumer.session.timeout.ms; 0 = 45 s);
	// GroupMinSessionTimeout and GroupMaxSessionTimeout bound what members
	// may ask for (0 = 1 s and 30 min).
	GroupSessionTimeout    time.Duration
	GroupMinSessionTimeout time.Duration
	GroupMaxSessionTimeout time.Duration
	// GroupHeartbeatInterval is the heartbeat interval told to members
	// (group.consumer.heartbeat.interval.ms; 0 = 5 s).
	GroupHeartbeatInterval time.Duration
	// GroupInitialRebalanceDelay is how long the first rebalance of an
	// empty classic group waits for more members
	// (group.initial.rebalance.delay.ms; 0 = 3 s, negative = none).
	GroupInitialRebalanceDelay time.Duration
	// GroupClassicMinSessionTimeout and GroupClassicMaxSessionTimeout
	// bound the session timeouts classic members (JoinGroup) may ask for
	// (group.min/max.session.timeout.ms; 0 = 6 s and 30 min).
	GroupClassicMinSessionTimeout time.Duration
	GroupClassicMaxSessionTimeout time.Duration
	// GroupMaxSize caps a classic group's members (group.max.size; 0 =
	// unlimited).
	GroupMaxSize int
	// OffsetsRetention deletes the offsets of groups empty this long
	// (offsets.retention.ms; 0 = 7 days).
	OffsetsRetention time.Duration
	// FaultDropProduceResponses is fault injection for chaos tests: the
	// fraction (0..1) of produce responses dropped after the request was
	// fully processed; the client sees UNAVAILABLE and must retry. It is
	// the startup rules {"method":"/sluice.v1.Log/Produce","drop_response":F}
	// and the same for /sluice.v1.Log/ProduceStream (where a dropped answer
	// ends the stream) of the FaultInjection mechanism. 0 in production.
	FaultDropProduceResponses float64
	// FaultInjection (testing only) serves /debug/faults on HTTPListen,
	// where a harness sets per-RPC fault rules (FaultRule) that a gRPC
	// interceptor applies to this node's calls. False in production: no
	// endpoint, no interceptor.
	FaultInjection bool
	// FaultDialMap (testing only) redirects every outgoing inter-node
	// connection (gRPC, Raft, gossip TCP and UDP) to an address in the map
	// to the map's target, where a fault-injecting proxy stands. Advertised
	// addresses, metadata and logs keep the real addresses. Nil in
	// production.
	FaultDialMap faultnet.DialMap
	// FaultStorage (testing only) injects file errors into the partition
	// logs (storage.FaultInjector; storage.FaultSet is one): a disk that
	// fails on chosen paths and operations (decision 42). Nil in
	// production.
	FaultStorage storage.FaultInjector
	// Hosts (testing only) resolves the host names it lists for the whole
	// process (see Hosts.Install); Start installs it and joins the seeds
	// it names at their IPs. Nil in production.
	Hosts Hosts
	// Logger receives the node's logs; nil is slog.Default().
	Logger *slog.Logger
}

// DefaultPageCacheWindow is the default PageCacheWindow: more than a
// follower or a consumer at the log end trails the appends by, so they are
// served from memory, while a partition's written-back history does not
// fill memory (decision 44).
const DefaultPageCacheWindow = 256 << 20

// DefaultConfig is a single combined node on 127.0.0.1:9400 (Raft 9401,
// gossip 9402, HTTP 9403, internal gRPC 9404, Kafka protocol 9092) with
// data in ./sluice-data.
func DefaultConfig() Config {
	return Config{
		NodeID:                    1,
		DataDir:                   "./sluice-data",
		Roles:                     []string{RoleController, RoleBroker},
		Listen:                    "127.0.0.1:9400",
		RaftListen:                "127.0.0.1:9401",
		GossipListen:              "127.0.0.1:9402",
		HTTPListen:                "127.0.0.1:9403",
		InternalListen:            "127.0.0.1:9404",
		KafkaListen:               "127.0.0.1:9092",
		RetentionCheckInterval:    5 * time.Minute,
		LogCleanerBackoff:         cluster.DefaultCleanerBackoff,
		PageCacheWindow:           DefaultPageCacheWindow,
		QueuedMaxRequestBytes:     DefaultQueuedMaxRequestBytes,
		ShutdownTimeout:           10 * time.Second,
		ControlledShutdownTimeout: 10 * time.Second,
		ConnectionSetupTimeout:    DefaultConnectionSetupTimeout,
		ConnectionsMaxIdle:        DefaultConnectionsMaxIdle,
		FailedAuthenticationDelay: DefaultFailedAuthenticationDelay,

		// The defaults of the layers below, which they also apply to a
		// zero value: here so that flags, --help and --print-config show
		// what the node uses (issue 28).
		HeartbeatInterval:                cluster.DefaultHeartbeatInterval,
		SessionTimeout:                   controller.DefaultSessionTimeout,
		LeaderRebalanceInterval:          controller.DefaultLeaderRebalanceInterval,
		LeaderImbalanceThreshold:         controller.DefaultLeaderImbalanceThreshold,
		ReplicaLagTimeMax:                cluster.DefaultReplicaLagTimeMax,
		TransactionStatePartitions:       txn.DefaultStatePartitions,
		TransactionMaxTimeout:            txn.DefaultMaxTimeout,
		TransactionAbortTimedOutInterval: txn.DefaultAbortTimedOutInterval,
		TransactionalIDExpiration:        txn.DefaultIDExpiration,
		OffsetsTopicPartitions:           group.DefaultOffsetsPartitions,
		GroupSessionTimeout:              group.DefaultSessionTimeout,
		GroupMinSessionTimeout:           group.DefaultMinSessionTimeout,
		GroupMaxSessionTimeout:           group.DefaultMaxSessionTimeout,
		GroupHeartbeatInterval:           group.DefaultHeartbeatInterval,
		GroupInitialRebalanceDelay:       group.DefaultInitialRebalanceDelay,
		GroupClassicMinSessionTimeout:    group.DefaultClassicMinSessionTimeout,
		GroupClassicMaxSessionTimeout:    group.DefaultClassicMaxSessionTimeout,
		OffsetsRetention:                 group.DefaultOffsetsRetention,
		DefaultReplicationFactor:         1,
		DefaultMinInsyncReplicas:         1,
	}.withConnectionDefaults() // the connection limits derived from this process's open-files limit
}

// WithDefaults returns c with every setting whose zero value stands for a
// default (see the fields' comments) set to DefaultConfig's value, so
// that c says what Start will use; other fields are left as they are. A
// negative LeaderRebalanceInterval (never) stays. Start does not need it:
// the layers below give zero values the same defaults.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	for _, f := range []struct{ v, def *time.Duration }{
		{&c.HeartbeatInterval, &d.HeartbeatInterval}, {&c.SessionTimeout, &d.SessionTimeout},
		{&c.LeaderRebalanceInterval, &d.LeaderRebalanceInterval}, {&c.ReplicaLagTimeMax, &d.ReplicaLagTimeMax},
		{&c.TransactionMaxTimeout, &d.TransactionMaxTimeout}, {&c.TransactionAbortTimedOutInterval, &d.TransactionAbortTimedOutInterval},
		{&c.TransactionalIDExpiration, &d.TransactionalIDExpiration}, {&c.GroupSessionTimeout, &d.GroupSessionTimeout},
		{&c.GroupMinSessionTimeout, &d.GroupMinSessionTimeout}, {&c.GroupMaxSessionTimeout, &d.GroupMaxSessionTimeout},
		{&c.GroupHeartbeatInterval, &d.GroupHeartbeatInterval}, {&c.OffsetsRetention, &d.OffsetsRetention},
		{&c.ControlledShutdownTimeout, &d.ControlledShutdownTimeout}, {&c.GroupInitialRebalanceDelay, &d.GroupInitialRebalanceDelay},
		{&c.GroupClassicMinSessionTimeout, &d.GroupClassicMinSessionTimeout}, {&c.GroupClassicMaxSessionTimeout, &d.GroupClassicMaxSessionTimeout},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if c.LeaderImbalanceThreshold == 0 {
		c.LeaderImbalanceThreshold = d.LeaderImbalanceThreshold
	}
	if c.TransactionStatePartitions == 0 {
		c.TransactionStatePartitions = d.TransactionStatePartitions
	}
	if c.OffsetsTopicPartitions == 0 {
		c.OffsetsTopicPartitions = d.OffsetsTopicPartitions
	}
	if c.DefaultReplicationFactor == 0 {
		c.DefaultReplicationFactor = d.DefaultReplicationFactor
	}
	if c.DefaultMinInsyncReplicas == 0 {
		c.DefaultMinInsyncReplicas = d.DefaultMinInsyncReplicas
	}
	if c.QueuedMaxRequestBytes == 0 {
		c.QueuedMaxRequestBytes = d.QueuedMaxRequestBytes
	}
	return c.withConnectionDefaults()
}

func (c Config) hasRole(r string) bool { return slices.Contains(c.Roles, r) }

// Validate reports the first invalid setting, or nil when Start may use
// cfg as it is.
func (c Config) Validate() error {
	if c.NodeID < 0 {
		return fmt.Errorf("node id must be >= 0, got %d", c.NodeID)
	}
	if c.DataDir == "" {
		return errors.New("data dir must be set")
	}
	if len(c.Roles) == 0 {
		return errors.New("roles must name controller, broker or both")
	}
	if c.QuotaWindowSamples < 0 || c.QuotaWindowSamples == 1 || c.QuotaWindowSize < 0 {
		return fmt.Errorf("quota window: %d samples of %v (want at least 2 samples of a positive span, or 0 for the defaults)", c.QuotaWindowSamples, c.QuotaWindowSize)
	}
	for _, r := range c.Roles {
		if r != RoleController && r != RoleBroker {
			return fmt.Errorf("unknown role %q (want controller, broker or both)", r)
		}
	}
	addrs := []struct{ name, v string }{{"listen", c.Listen}, {"advertise", c.Advertise}, {"http listen", c.HTTPListen},
		{"internal listen", c.InternalListen}, {"internal advertise", c.InternalAdvertise},
		{"kafka listen", c.KafkaListen}, {"kafka advertise", c.KafkaAdvertise},
		{"gossip listen", c.GossipListen}, {"gossip advertise", c.GossipAdvertise}, {"raft advertise", c.RaftAdvertise}}
	if c.hasRole(RoleController) {
		addrs = append(addrs, struct{ name, v string }{"raft listen", c.RaftListen})
		if c.RaftListen == "" {
			return errors.New("a controller needs a raft listen address")
		}
	}
	for _, a := range addrs {
		if a.v == "" && a.name != "listen" && a.name != "gossip listen" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("%s address %q: %w", a.name, a.v, err)
		}
	}
	if _, port, _ := net.SplitHostPort(c.Listen); c.InternalListen == c.Listen && port != "0" {
		return fmt.Errorf("internal listen address %s is the listen address: the inter-node services must have a listener of their own", c.InternalListen)
	}
	if err := c.validateKafkaListener(); err != nil {
		return err
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			return fmt.Errorf("join address %q: %w", j, err)
		}
	}
	if c.GossipKeyFile != "" {
		if _, err := membership.ReadKeyFile(c.GossipKeyFile); err != nil {
			return fmt.Errorf("gossip key file: %w", err)
		}
	}
	if len(c.ControllerVoters) > 0 {
		self := false
		seen := map[int32]bool{}
		for _, v := range c.ControllerVoters {
			if seen[v.ID] {
				return fmt.Errorf("controller voter %d is listed twice", v.ID)
			}
			seen[v.ID] = true
			if _, _, err := net.SplitHostPort(v.Address); err != nil {
				return fmt.Errorf("controller voter %d address %q: %w", v.ID, v.Address, err)
			}
			self = self || v.ID == c.NodeID
		}
		if c.hasRole(RoleController) && !self {
			return fmt.Errorf("node %d has the controller role but is not in the controller voters", c.NodeID)
		}
		if !c.hasRole(RoleController) && self {
			return fmt.Errorf("node %d is a controller voter but lacks the controller role", c.NodeID)
		}
	} else if !c.hasRole(RoleController) {
		return errors.New("a broker-only node needs --controller-voters and --join to find the controllers")
	}
	if !c.hasRole(RoleController) && len(c.Join) == 0 {
		return errors.New("a broker-only node needs --join (gossip seeds) to find the controllers")
	}
	if c.RetentionCheckInterval <= 0 {
		return errors.New("retention check interval must be > 0")
	}
	if c.OffsetsTopicPartitions < 0 || c.OffsetsTopicPartitions > cluster.MaxPartitions {
		return fmt.Errorf("offsets topic partitions must be within [1, %d] (0 for the default), got %d", cluster.MaxPartitions, c.OffsetsTopicPartitions)
	}
	if c.DefaultReplicationFactor < 0 || c.DefaultMinInsyncReplicas < 0 {
		return fmt.Errorf("default replication factor %d and default min.insync.replicas %d must be >= 1 (0 for the default, 1)",
			c.DefaultReplicationFactor, c.DefaultMinInsyncReplicas)
	}
	if c.GroupClassicMinSessionTimeout > 0 && c.GroupClassicMaxSessionTimeout > 0 && c.GroupClassicMinSessionTimeout > c.GroupClassicMaxSessionTimeout {
		return fmt.Errorf("group classic min session timeout %v is above the max %v", c.GroupClassicMinSessionTimeout, c.GroupClassicMaxSessionTimeout)
	}
	if c.GroupMaxSize < 0 {
		return fmt.Errorf("group max size must be >= 0 (0: unlimited), got %d", c.GroupMaxSize)
	}
	if c.GroupMinSessionTimeout > 0 && c.GroupMaxSessionTimeout > 0 && c.GroupMinSessionTimeout > c.GroupMaxSessionTimeout {
		return fmt.Errorf("group min session timeout %v is above the max %v", c.GroupMinSessionTimeout, c.GroupMaxSessionTimeout)
	}
	if c.LogCleanerBackoff <= 0 {
		return errors.New("log cleaner backoff must be > 0")
	}
	if c.PageCacheWindow < 0 {
		return fmt.Errorf("page cache window must be >= 0 bytes (0 leaves the page cache to the kernel), got %d", c.PageCacheWindow)
	}
	if c.QueuedMaxRequestBytes != 0 && c.QueuedMaxRequestBytes < MinQueuedMaxRequestBytes {
		return fmt.Errorf("queued max request bytes must be at least %d (twice the largest request; 0 for the default), got %d", MinQueuedMaxRequestBytes, c.QueuedMaxRequestBytes)
	}
	if err := c.validateConnections(); err != nil {
		return err
	}
	if c.TransactionStatePartitions < 0 || c.TransactionStatePartitions > cluster.MaxPartitions {
		return fmt.Errorf("transaction state partitions must be within [1, %d] (0 for the default), got %d", cluster.MaxPartitions, c.TransactionStatePartitions)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"broker heartbeat interval", c.HeartbeatInterval}, {"broker session timeout", c.SessionTimeout},
		{"replica lag time max", c.ReplicaLagTimeMax}, {"controlled shutdown timeout", c.ControlledShutdownTimeout},
		{"transaction max timeout", c.TransactionMaxTimeout}, {"transaction abort timed out interval", c.TransactionAbortTimedOutInterval},
		{"transactional id expiration", c.TransactionalIDExpiration}, {"group session timeout", c.GroupSessionTimeout},
		{"group min session timeout", c.GroupMinSessionTimeout}, {"group max session timeout", c.GroupMaxSessionTimeout},
		{"group heartbeat interval", c.GroupHeartbeatInterval}, {"offsets retention", c.OffsetsRetention},
		{"group classic min session timeout", c.GroupClassicMinSessionTimeout}, {"group classic max session timeout", c.GroupClassicMaxSessionTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("%s must be >= 0 (0 for the default), got %v", d.name, d.v)
		}
	}
	if c.LeaderImbalanceThreshold < 0 || c.LeaderImbalanceThreshold >= 1 {
		return fmt.Errorf("leader imbalance threshold must be within [0, 1) (0 for the default), got %v", c.LeaderImbalanceThreshold)
	}
	if c.TransactionMaxTimeout > 0 && c.TransactionMaxTimeout < time.Millisecond {
		return fmt.Errorf("transaction max timeout must be at least 1ms, got %v", c.TransactionMaxTimeout)
	}
	if c.FaultDropProduceResponses < 0 || c.FaultDropProduceResponses > 1 {
		return fmt.Errorf("fault drop produce responses must be within [0, 1], got %v", c.FaultDropProduceResponses)
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if c.FaultInjection && c.HTTPListen == "" {
		return errors.New("fault injection needs an http listen address (it serves /debug/faults there)")
	}
	if err := c.validateTestMachinery(); err != nil {
		return err
	}
	return c.FaultDialMap.Validate()
}

// ParseVoters parses a controller quorum "1@host:port,2@host:port" (the
// --controller-voters flag); "" is no voters (this node alone).
func ParseVoters(s string) ([]controller.Voter, error) {
	var out []controller.Voter
	if s == "" {
		return nil, nil
	}
	for _, part := range splitList(s) {
		at := -1
		for i := range part {
			if part[i] == '@' {
				at = i
				break
			}
		}
		if at <= 0 {
			return nil, fmt.Errorf("controller voter %q: want id@host:port", part)
		}
		id, err := strconv.ParseInt(part[:at], 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("controller voter %q: bad node id", part)
		}
		if _, _, err := net.SplitHostPort(part[at+1:]); err != nil {
			return nil, fmt.Errorf("controller voter %q: %w", part, err)
		}
		out = append(out, controller.Voter{ID: int32(id), Address: part[at+1:]})
	}
	return out, nil
}

// ParseList splits a comma-separated list (--roles, --join), trimming
// spaces around items and dropping empty ones; "" is nil.
func ParseList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if item := s[start:i]; item != "" {
				out = append(out, item)
			}
			start = i + 1
		}
	}
	return out
}

// TLSEnabled reports whether the node runs with TLS (TLSCertFile set).
func (c Config) TLSEnabled() bool { return c.TLSCertFile != "" }

// clusterName is ClusterName or its default.
func (c Config) clusterName() string {
	if c.ClusterName == "" {
		return auth.DefaultClusterName
	}
	return c.ClusterName
}

func (c Config) validateTLS() error {
	if c.ClusterName != "" {
		if err := auth.ValidateClusterName(c.ClusterName); err != nil {
			return err
		}
	}
	if _, err := auth.ParseClientAuth(c.ClientAuth); err != nil {
		return err
	}
	switch c.Authentication {
	case "", AuthenticationOptional, AuthenticationRequired:
	default:
		return fmt.Errorf("authentication %q: %w", c.Authentication, errAuthenticationValue)
	}
	if c.Authentication == AuthenticationRequired && !c.TLSEnabled() {
		return errors.New("authentication required needs TLS (--tls-cert-file, --tls-key-file, --tls-ca-file): SCRAM and client certificates are served over TLS only")
	}
	if _, err := auth.ParsePrincipalMappingRules(c.TLSPrincipalMappingRules); err != nil {
		return err
	}
	if c.JWTJWKSFile != "" && c.JWTJWKSURL != "" {
		return errors.New("JWT: set one of --jwt-jwks-file and --jwt-jwks-url")
	}
	if (c.JWTJWKSFile != "" || c.JWTJWKSURL != "") && c.JWTAudience == "" {
		return errors.New("JWT: --jwt-audience is required (a token meant for another service must be refused)")
	}
	if (c.JWTJWKSFile != "" || c.JWTJWKSURL != "") && !c.TLSEnabled() {
		return errors.New("JWT needs TLS (--tls-cert-file, --tls-key-file, --tls-ca-file): a bearer token must not travel in the clear")
	}
	switch c.Authorizer {
	case "", AuthorizerACL:
	default:
		return fmt.Errorf("authorizer %q: want acl, or empty for none", c.Authorizer)
	}
	for _, u := range c.SuperUsers {
		if typ, name, ok := strings.Cut(u, ":"); !ok || typ == "" || name == "" {
			return fmt.Errorf("super user %q: want TYPE:NAME (User:admin)", u)
		}
	}
	if c.SASLSessionLifetime < 0 {
		return fmt.Errorf("SASL session lifetime must be >= 0 (0 for the default), got %v", c.SASLSessionLifetime)
	}
	node := c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSCAFile != ""
	if node && (c.TLSCertFile == "" || c.TLSKeyFile == "" || c.TLSCAFile == "") {
		return errors.New("TLS needs all three of the node's certificate, key and the cluster CA file (--tls-cert-file, --tls-key-file, --tls-ca-file)")
	}
	if !node {
		for _, f := range []struct{ name, v string }{{"--client-tls-cert-file", c.ClientTLSCertFile}, {"--client-tls-key-file", c.ClientTLSKeyFile},
			{"--client-tls-ca-file", c.ClientTLSCAFile}, {"--http-tls-cert-file", c.HTTPTLSCertFile}, {"--http-tls-key-file", c.HTTPTLSKeyFile}} {
			if f.v != "" {
				return fmt.Errorf("%s is set but TLS is off: it needs the node's certificate (--tls-cert-file, --tls-key-file, --tls-ca-file)", f.name)
			}
		}
		if a, _ := auth.ParseClientAuth(c.ClientAuth); a != auth.ClientAuthNone {
			return fmt.Errorf("client auth %q needs TLS (--tls-cert-file, --tls-key-file, --tls-ca-file)", c.ClientAuth)
		}
		if c.HTTPTLS {
			return errors.New("HTTP over TLS needs the node's certificate (--tls-cert-file, --tls-key-file, --tls-ca-file)")
		}
	}
	if (c.ClientTLSCertFile == "") != (c.ClientTLSKeyFile == "") {
		return errors.New("the client listener's certificate needs its key, and the key its certificate (--client-tls-cert-file, --client-tls-key-file)")
	}
	if (c.HTTPTLSCertFile == "") != (c.HTTPTLSKeyFile == "") {
		return errors.New("the HTTP listener's certificate needs its key, and the key its certificate (--http-tls-cert-file, --http-tls-key-file)")
	}
	return nil
}

// validateKafkaListener checks what Validate's address checks do not:
// the Kafka listener does not share a fixed address with another
// listener, and an advertised Kafka address has a listener behind it.
func (c Config) validateKafkaListener() error {
	if c.KafkaListen == "" {
		if c.KafkaAdvertise != "" {
			return fmt.Errorf("kafka advertise address %s but no Kafka listener (kafka listen is empty)", c.KafkaAdvertise)
		}
		return nil
	}
	if _, port, _ := net.SplitHostPort(c.KafkaListen); port == "0" {
		return nil
	}
	for _, o := range []struct{ name, v string }{{"listen", c.Listen}, {"internal listen", c.InternalListen},
		{"http listen", c.HTTPListen}, {"raft listen", c.RaftListen}, {"gossip listen", c.GossipListen}} {
		if o.v == c.KafkaListen {
			return fmt.Errorf("kafka listen address %s is the %s address: the Kafka protocol needs a listener of its own", c.KafkaListen, o.name)
		}
	}
	return nil
}
