// Package node is one Sluice server process (DESIGN §2–3): its Config
// and Validate, the start-up and wiring of every part (controller voter,
// broker, gossip, the gRPC services of package api), the HTTP endpoints
// (health, readiness, metrics, pprof, fault injection for tests), the
// data-dir lock and the shutdown order. cmd/sluiced only fills a Config
// and calls Start; tests start nodes in process through node/nodetest.
package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluice-io/sluice/auth"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/cluster/membership"
	"github.com/sluice-io/sluice/coordinator"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/kafka"
	"github.com/sluice-io/sluice/proto/codec"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Node is a running Sluice node: controller voter and/or broker, gossip
// member, gRPC servers (client and internal, decision 41) and HTTP
// endpoints.
type Node struct {
	cfg    Config
	log    *slog.Logger
	grpc   *grpc.Server // the client listener's: public services and health
	lis    net.Listener
	health *health.Server // served by both gRPC servers
	// internalGRPC serves the inter-node services (Controller, Replica,
	// TxnBroker) and health on internalLis; the client server does not
	// serve them.
	internalGRPC *grpc.Server
	internalLis  net.Listener
	// kafka serves the Kafka protocol (issue 34) on kafkaLis, its bound
	// listener under its connection limits (served wrapped in TLS when
	// the node has TLS); both nil unless a broker with KafkaListen set.
	kafka         *kafka.Server
	kafkaLis      net.Listener
	httpSrv       *http.Server
	tls           *tlsMaterial // the listeners' certificates; nil fields without TLS
	authn         *auth.Authenticator
	authz         *api.Authz    // nil: no authorization
	aclsVersion   atomic.Uint64 // the image ACL version authz was built from
	quotas        *api.Quotas   // client quota enforcement (quotas.go)
	quotasVersion atomic.Uint64 // the image quota version quotas was built from
	httpLis       net.Listener
	// limited are the listeners' connection limiters (connlimit.go), for
	// the metrics; set by Start, nil for a listener the node has not.
	limited [listenerKinds]*limitListener

	pool        *cluster.ConnPool
	controllers *cluster.ControllerClient
	members     *membership.Membership
	peers       *gossipPeers           // the gossip peers remembered in the data dir
	ctl         *controller.Controller // nil unless a controller
	ctlService  *api.ControllerService
	replicas    *cluster.ReplicaManager // nil unless a broker
	cache       *cluster.MetadataCache
	broker      *cluster.BrokerLifecycle       // nil unless a broker
	producerIDs *coordinator.ProducerIDManager // nil unless a broker
	// The transaction coordinator and its node-side helpers (decision
	// 34); nil unless a broker.
	txnCoord    *txn.Coordinator
	txnLocator  *coordinator.Locator
	txnMarkers  *coordinator.BrokerMarkerWriter
	txnVerifier *coordinator.BrokerTxnVerifier
	txnUnlisten func() // unregisters txnCoord's leadership listener

	groupCoord    *group.Coordinator
	groupLocator  *coordinator.Locator
	groupUnlisten func() // unregisters groupCoord's leadership listener

	groupTopicsMu      sync.Mutex // guards the following: groupTopics' cache
	groupTopicsMap     map[string]group.TopicMetadata
	groupTopicsImage   *controller.Image // the image groupTopicsMap was last checked against
	groupTopicsVersion int64             // moves when groupTopicsMap changes

	faults  *faultInjector // nil unless fault injection is on (sluicetest builds only)
	metrics *metrics       // the /metrics registry and gRPC interceptors

	// healthServices are the gRPC services whose health status follows
	// readiness as "" does; set once in New before serving.
	healthServices []string

	// syncHealth sets the health status only while ctx is live; Shutdown
	// and Abort cancel ctx holding healthMu, so no status flips back to
	// SERVING once they began.
	healthMu sync.Mutex // guards the following and the health status
	serving  bool       // the status last set by syncHealth

	ctx     context.Context // cancelled by Shutdown and Abort
	cancel  context.CancelFunc
	stopped chan struct{} // closed by Shutdown or Abort once the logs are closed
	// draining is closed when the node stops serving: long-lived streams
	// (ProduceStream, ReplicaFetchStream) end then, or GracefulStop would
	// wait for them until ShutdownTimeout.
	draining chan struct{}
	// goroutines tracks every goroutine the node starts itself (servers,
	// readiness loop, legacy import, data-dir unlock); Shutdown and Abort
	// wait for them after stopping what they wait on.
	goroutines goroutine.Group
	stopOnce   sync.Once
	stopErr    error // set once by Shutdown, read after stopOnce
}

// Start validates cfg, opens and locks the data dir, starts the controller
// voter (if a controller), gossip, the gRPC server and the broker lifecycle
// (if a broker), and returns once the listeners are bound. It does not wait
// for a quorum or for the broker to be unfenced: see WaitReady. On error
// nothing it started is left running and the data dir is unlocked. The
// caller owns the Node and must end it with Shutdown or Abort.
func Start(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	tlsm, err := newTLSMaterial(cfg, logger)
	if err != nil {
		unlock()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{cfg: cfg, log: logger, stopped: make(chan struct{}), draining: make(chan struct{}), ctx: ctx, cancel: cancel,
		pool: cluster.NewConnPoolWith(cfg.FaultDialMap, tlsm.peerCredentials()), cache: cluster.NewMetadataCache(), tls: tlsm}
	cfg = cfg.withHosts(logger)
	if len(cfg.FaultDialMap) > 0 {
		logger.Warn("fault injection (testing only): outgoing inter-node connections are redirected", "dial_map", cfg.FaultDialMap.String())
	}
	var cleanups []func()
	defer func() {
		if err != nil {
			cancel()
			for i := len(cleanups) - 1; i >= 0; i-- {
				cleanups[i]()
			}
			unlock()
		}
	}()
	cleanups = append(cleanups, n.pool.Close)

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	cleanups = append(cleanups, func() { lis.Close() })
	lis = n.limitListener(listenerClient, lis, cfg)
	n.lis = lis
	if cfg.Advertise == "" {
		cfg.Advertise = lis.Addr().String()
	}
	internalBind := cfg.InternalListen
	if internalBind == "" {
		internalBind = "127.0.0.1:0"
	}
	ilis, err := net.Listen("tcp", internalBind)
	if err != nil {
		return nil, fmt.Errorf("listen internal %s: %w", internalBind, err)
	}
	cleanups = append(cleanups, func() { ilis.Close() })
	ilis = n.limitListener(listenerInternal, ilis, cfg)
	n.internalLis = ilis
	cfg.InternalAdvertise = advertisedAddress(cfg.InternalAdvertise, cfg.Advertise, ilis.Addr().String())
	// The Kafka listener, a broker's only: bound here so that its
	// advertised address is known before the broker registers.
	var klis net.Listener
	switch {
	case cfg.KafkaListenerEnabled():
		klis, err = net.Listen("tcp", cfg.KafkaListen)
		if err != nil {
			return nil, fmt.Errorf("listen kafka %s: %w", cfg.KafkaListen, err)
		}
		cleanups = append(cleanups, func() { klis.Close() })
		// Limited before TLS wraps it (below), as the client listener
		// is before gRPC's TLS: a connection over the limits is reset
		// without a handshake.
		klis = n.limitListener(listenerKafka, klis, cfg)
		n.kafkaLis = klis
		cfg.KafkaAdvertise = advertisedAddress(cfg.KafkaAdvertise, cfg.Advertise, klis.Addr().String())
	case cfg.KafkaListen != "":
		logger.Info("no Kafka listener: only brokers serve the Kafka protocol", "kafka_listen", cfg.KafkaListen)
		cfg.KafkaAdvertise = ""
	}
	n.cfg = cfg

	if cfg.hasRole(RoleBroker) {
		n.replicas, err = cluster.NewReplicaManager(cluster.ReplicaManagerConfig{
			DataDir: cfg.DataDir, NodeID: cfg.NodeID, RetentionCheckInterval: cfg.RetentionCheckInterval, Logger: logger,
			TransactionMaxTimeout: cfg.TransactionMaxTimeout, CleanerBackoff: cfg.LogCleanerBackoff, StorageFaults: cfg.FaultStorage,
			PageCacheWindow: cfg.PageCacheWindow,
		})
		if err != nil {
			return nil, err
		}
		cleanups = append(cleanups, func() { n.replicas.Close() })
	}

	if cfg.hasRole(RoleController) {
		n.ctl, err = controller.New(controller.Config{
			NodeID: cfg.NodeID, DataDir: cfg.DataDir, RaftBind: cfg.RaftListen, RaftAdvertise: cfg.RaftAdvertise,
			Voters: cfg.ControllerVoters, Logger: logger, SessionTimeout: cfg.SessionTimeout, DialMap: cfg.FaultDialMap,
			LeaderRebalanceInterval: cfg.LeaderRebalanceInterval, LeaderImbalanceThreshold: cfg.LeaderImbalanceThreshold,
			DefaultReplicationFactor: cfg.DefaultReplicationFactor, DefaultMinInsyncReplicas: cfg.DefaultMinInsyncReplicas,
			RaftTLS: tlsm.raft(),
		})
		if err != nil {
			return nil, err
		}
		if err := n.ctl.Start(); err != nil {
			return nil, err
		}
		cleanups = append(cleanups, func() { n.ctl.Shutdown() })
	}

	meta := membership.Meta{NodeID: cfg.NodeID, Roles: cfg.Roles, GRPCAddress: cfg.Advertise, InternalAddress: cfg.InternalAdvertise, Rack: cfg.Rack}
	if n.ctl != nil {
		meta.RaftAddress = n.ctl.QuorumState().RaftAddress
	}
	gossipBind := cfg.GossipListen
	if gossipBind == "" {
		gossipBind = "127.0.0.1:0"
	}
	n.peers = loadGossipPeers(cfg.DataDir, cfg.NodeID, logger)
	n.members, err = membership.Start(membership.Config{
		Meta: meta, BindAddr: gossipBind, AdvertiseAddr: cfg.GossipAdvertise, Join: joinSeeds(cfg.Join, n.peers),
		KeyFile: cfg.GossipKeyFile, Logger: logger, OnEvent: n.onMemberEvent, DialMap: cfg.FaultDialMap,
	})
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	cleanups = append(cleanups, func() { n.members.Shutdown() })
	n.controllers = cluster.NewControllerClient(n.pool, n.controllerEndpoints)

	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(api.MaxMessageSize), grpc.MaxSendMsgSize(api.MaxMessageSize),
		// Produce requests and replica fetches carry megabytes: windows
		// as large as the clients' (client.conn) avoid waiting for window
		// updates, and larger socket buffers mean fewer syscalls.
		grpc.InitialWindowSize(cluster.StreamWindow), grpc.InitialConnWindowSize(cluster.ConnWindow),
		grpc.ReadBufferSize(cluster.SocketBuffer), grpc.WriteBufferSize(cluster.SocketBuffer)}
	opts = append(opts, codec.ServerOptions()...)
	opts = append(opts, grpcConnectionOptions(cfg)...) // handshake deadline, idle close (connlimit.go)
	// Metrics first: they see what the client sees, injected faults
	// included.
	n.metrics = newMetrics(n)
	opts = append(opts, grpc.ChainUnaryInterceptor(n.metrics.grpc.unary), grpc.ChainStreamInterceptor(n.metrics.grpc.stream))
	opts = append(opts, n.faultServerOptions()...) // none without the sluicetest tag
	// Two servers with the same options and interceptors (decision 41):
	// the client one serves the public services, the internal one the
	// inter-node services, so that whoever reaches the client port can
	// not register a broker or write transaction markers (UNIMPLEMENTED
	// there).
	// Each also has a budget of request bytes in flight of its own
	// (decision 51, requestbudget_grpc.go): its stats handler and
	// budgetedServer below.
	n.authn = auth.NewAuthenticator(n.scramCredential, cfg.SASLSessionLifetime)
	gate, err := newAuthGate(cfg, n.authn, logger)
	if err != nil {
		return nil, err
	}
	n.metrics.reg.MustRegister(gate.failures, gate.logins)
	n.authz = newNodeAuthz(cfg, logger, n.metrics.reg)
	n.quotas = newNodeQuotas(cfg, n.metrics.reg)
	clientBudget, internalBudget, kafkaBudgets := newListenerBudgets(cfg, n.draining)
	if n.kafkaLis != nil {
		n.metrics.reg.MustRegister(newRequestBudgetCollector(clientBudget, internalBudget, kafkaBudgets))
	} else {
		n.metrics.reg.MustRegister(newRequestBudgetCollector(clientBudget, internalBudget))
	}
	clientOpts := append(tlsm.clientServerOptions(), gate.serverOptions()...)
	// The request quota of the unary RPCs besides Produce and Fetch
	// (which time themselves): after authentication, which names the
	// caller.
	clientOpts = append(clientOpts, grpc.ChainUnaryInterceptor(api.RequestQuotaInterceptor(n.quotas, n.draining)))
	n.grpc = grpc.NewServer(append(slices.Clip(opts), append(clientOpts, grpc.StatsHandler(budgetStats{clientBudget}))...)...)
	n.internalGRPC = grpc.NewServer(append(slices.Clip(opts), append(tlsm.internalServerOptions(), grpc.StatsHandler(budgetStats{internalBudget}))...)...)
	// Services register through codec.Server: a request whose bytes do
	// not decode is answered InvalidArgument, not grpc-go's Internal; and
	// through budgetedServer: a request is read once its listener's
	// budget has room.
	pub := budgetedServer{GRPCServer: codec.Server{Server: n.grpc}, b: clientBudget}
	internal := budgetedServer{GRPCServer: codec.Server{Server: n.internalGRPC}, b: internalBudget}
	// And through api.LimitRequests: a request over the request limits
	// (api/limits.go) is refused before it is decoded (issue 29).
	limitedPub, limitedInternal := api.LimitRequests(pub), api.LimitRequests(internal)
	if n.ctl != nil {
		n.ctlService = api.NewControllerService(n.ctl, n.interNodeAddressOf)
		internalv1.RegisterControllerServer(limitedInternal, n.ctlService)
	}
	var kafkaAuth *kafka.Authentication // the Kafka listener's, for WhoAmI
	if n.replicas != nil {
		n.broker = cluster.NewBrokerLifecycle(cluster.BrokerConfig{
			NodeID: cfg.NodeID, Address: cfg.Advertise, InternalAddress: cfg.InternalAdvertise, KafkaAddress: cfg.KafkaAdvertise, Rack: cfg.Rack,
			HeartbeatInterval: cfg.HeartbeatInterval, SessionTimeout: cfg.SessionTimeout,
			Controllers: n.controllers, Metadata: n.cache, OnImage: n.applyImage, Logger: logger,
			OfflineReplicas: n.replicas.OfflineReplicaReports,
		})
		n.producerIDs = coordinator.NewProducerIDManager(n.broker, coordinator.ProducerIDManagerConfig{Logger: logger})
		cleanups = append(cleanups, func() { n.producerIDs.Close(); n.broker.Stop() })
		n.startTransactions()
		cleanups = append(cleanups, n.closeTransactions)
		n.startGroups()
		cleanups = append(cleanups, n.closeGroups)
		sluicev1.RegisterTransactionsServer(limitedPub, api.NewTransactionsService(api.TransactionsConfig{
			ProducerIDs: n.producerIDs, Coordinator: n.txnCoord, Locator: n.txnLocator, GroupLocator: n.groupLocator, Authz: n.authz}))
		sluicev1.RegisterGroupsServer(limitedPub, api.NewGroupsService(n.groupCoord, cfg.NodeID).WithAuthz(n.authz))
		internalv1.RegisterTxnBrokerServer(limitedInternal, api.NewTxnBrokerService(n.txnCoord,
			coordinator.PartitionMarkers{Replicas: n.replicas, Metadata: n.cache, Barrier: n.broker.MetadataBarrier}))
		internalv1.RegisterReplicaServer(limitedInternal, api.NewReplicaService(n.replicas, n.cache, n.draining))
		api.NewServer(api.ServerConfig{Replicas: n.replicas, Metadata: n.cache, Controllers: n.controllers, Pool: n.pool,
			Self: api.Broker{NodeID: cfg.NodeID, Address: cfg.Advertise, Rack: cfg.Rack}, Logger: logger, Draining: n.draining,
			Authz: n.authz, Quotas: n.quotas}).Register(limitedPub)
		if n.kafkaLis != nil {
			// The second door (DESIGN §3): the same replica manager,
			// metadata, controllers, producer ids and authorization as
			// the gRPC services above. ClusterID stays empty: the
			// cluster id is the metadata's (Image().ClusterID), known
			// only once it has loaded — a fresh cluster's controller
			// makes it after start — so the door reads it there, as
			// api's Metadata does.
			var authz *auth.Gate
			if n.authz != nil {
				authz = n.authz.Gate
			}
			setup, idle := kafkaConnectionTimeouts(cfg) // connlimit.go
			ka := gate.kafkaAuthentication(tlsm)
			kafkaAuth = &ka
			n.kafka = kafka.NewServer(kafka.Config{NodeID: cfg.NodeID, Replicas: n.replicas, Metadata: n.cache,
				Controllers: n.controllers, ProducerIDs: n.producerIDs, Gate: authz, Quotas: n.quotas, Logger: logger,
				SetupTimeout: setup, IdleTimeout: idle, Auth: ka, Metrics: n.metrics.kafka,
				RequestBytes: kafkaBudget{kafkaBudgets}, FailedAuthenticationDelay: cfg.failedAuthenticationDelay(),
				Coordinators: kafka.Coordinators{Txn: n.txnCoord, TxnLocator: n.txnLocator, Group: n.groupCoord, GroupLocator: n.groupLocator}})
			cleanups = append(cleanups, func() { n.kafka.Close() })
		}
	}
	sluicev1.RegisterAuthServer(limitedPub, api.NewAuthService(api.AuthConfig{Authenticator: n.authn, NodeID: cfg.NodeID,
		Required: gate.required, Logger: logger, Listeners: tlsm.listeners(cfg, kafkaAuth), FailedDelay: cfg.failedAuthenticationDelay(),
		Refused:   func(reason string) { gate.failures.WithLabelValues(reason).Inc() },
		Succeeded: func(mech string) { gate.logins.WithLabelValues(mech).Inc() },
		// As api.Server's metadataLoaded.
		MetadataLoaded: func() bool { return n.cache.Offset() != 0 && n.cache.Image().Offset != 0 }}))
	n.health = health.NewServer()
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	n.health.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	for _, s := range []budgetedServer{pub, internal} {
		healthpb.RegisterHealthServer(s, n.health)
		reflection.Register(s)
	}
	// Health per service name, of both listeners (one health server).
	info := n.grpc.GetServiceInfo()
	for name, si := range n.internalGRPC.GetServiceInfo() {
		info[name] = si
	}
	n.healthServices = healthServices(info)
	for _, name := range n.healthServices {
		n.health.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	n.startFaultRules()

	if cfg.HTTPListen != "" {
		hl, err := net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			return nil, fmt.Errorf("listen http %s: %w", cfg.HTTPListen, err)
		}
		hl = n.limitListener(listenerHTTP, hl, cfg)
		n.httpLis = hl
		hl = tlsm.httpListener(hl)
		n.httpSrv = &http.Server{Handler: n.httpMux(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: httpIdleTimeout(cfg)}
		n.goroutines.Go(func() {
			if err := n.httpSrv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("http server stopped", "err", err)
			}
		})
	}
	n.goroutines.Go(func() {
		if err := n.grpc.Serve(lis); err != nil {
			logger.Error("grpc server stopped", "err", err)
		}
	})
	n.goroutines.Go(func() {
		if err := n.internalGRPC.Serve(ilis); err != nil {
			logger.Error("internal grpc server stopped", "err", err)
		}
	})
	if n.kafka != nil {
		// TLS as on the client listener when the node has TLS (the
		// listener stays unwrapped in n.kafkaLis for KafkaAddr).
		kl := tlsm.kafkaListener(klis)
		n.goroutines.Go(func() {
			if err := n.kafka.Serve(kl); err != nil && !errors.Is(err, kafka.ErrServerClosed) {
				logger.Error("kafka server stopped", "err", err)
			}
		})
	}
	if n.replicas != nil {
		n.replicas.Start()
		n.replicas.StartReplication(cluster.ReplicationConfig{Metadata: n.cache, Pool: n.pool, Controllers: n.controllers,
			BrokerEpoch: n.BrokerEpoch, LagTimeMax: cfg.ReplicaLagTimeMax})
		n.broker.Start()
	}
	n.goroutines.Go(n.readinessLoop)
	n.goroutines.Go(n.migrateLegacyCatalog)
	n.goroutines.Go(func() {
		<-n.stopped
		unlock()
	})
	logger.Info("sluice node started", "node_id", cfg.NodeID, "roles", cfg.Roles, "listen", lis.Addr().String(), "tls", tlsm.describe(),
		"advertise", cfg.Advertise, "internal_listen", ilis.Addr().String(), "internal_advertise", cfg.InternalAdvertise,
		"kafka_listen", n.KafkaAddr(), "kafka_advertise", cfg.KafkaAdvertise,
		"gossip", n.members.LocalAddr(), "http", n.HTTPAddr(), "data_dir", cfg.DataDir)
	return n, nil
}

// advertisedAddress is the address others reach a listener at — the
// internal listener (other nodes) or the Kafka listener (Kafka clients):
// configured (--internal-advertise, --kafka-advertise), else the bound
// address, as --advertise defaults to the bound client address. When the
// listener binds a wildcard IP (0.0.0.0:9404, which no peer can dial) it
// takes the host of advertise instead, the client listener's advertised
// name, with the bound port: a node that sets --advertise need not repeat
// its name for its other listeners.
func advertisedAddress(configured, advertise, bound string) string {
	if configured != "" {
		return configured
	}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return bound
	}
	if ahost, _, err := net.SplitHostPort(advertise); err == nil && ahost != "" {
		if ip := net.ParseIP(ahost); ip == nil || !ip.IsUnspecified() {
			return net.JoinHostPort(ahost, port)
		}
	}
	return bound
}

// startTransactions builds the transaction coordinator of a broker and
// what it needs (decision 34): the locator (FindCoordinator routing and
// __transaction_state creation), the marker writer, and the verifier
// partition leaders use; it registers the coordinator as the leadership
// listener of __transaction_state and the verifier with the replica
// manager. Call it before the replica manager applies any metadata.
func (n *Node) startTransactions() {
	cfg := n.cfg
	n.txnLocator = coordinator.NewTxnLocator(coordinator.LocatorConfig{Metadata: n.cache, Controllers: n.controllers,
		Partitions: cfg.TransactionStatePartitions, Logger: n.log})
	n.txnMarkers = coordinator.NewBrokerMarkerWriter(coordinator.BrokerMarkerWriterConfig{Self: cfg.NodeID,
		Local: coordinator.PartitionMarkers{Replicas: n.replicas, Metadata: n.cache, Barrier: n.broker.MetadataBarrier}, Pool: n.pool})
	n.txnCoord = txn.NewCoordinator(txn.CoordinatorDeps{
		Log: coordinator.ReplicaStateLog{Replicas: n.replicas}, ProducerIDs: n.producerIDs, Markers: n.txnMarkers,
		StatePartitionCount: n.txnLocator.PartitionCount, Logger: n.log,
	}, txn.CoordinatorConfig{
		StatePartitions: cfg.TransactionStatePartitions, MaxTimeout: cfg.TransactionMaxTimeout,
		IDExpiration: cfg.TransactionalIDExpiration, AbortTimedOutInterval: cfg.TransactionAbortTimedOutInterval,
	})
	n.txnVerifier = coordinator.NewBrokerTxnVerifier(coordinator.BrokerTxnVerifierConfig{Self: cfg.NodeID,
		Locator: n.txnLocator, Coordinator: n.txnCoord, Pool: n.pool})
	n.replicas.SetTxnVerifier(n.txnVerifier)
	n.txnUnlisten = n.replicas.RegisterLeadershipListener(txn.StateTopic, n.txnCoord)
}

// closeTransactions stops the transaction coordinator (its loads, marker
// rounds and timeout scan) and then the marker writer's and verifier's
// requests in flight. It runs before the producer-id manager and the
// replica manager close (the coordinator uses both). Idempotent.
func (n *Node) closeTransactions() {
	if n.txnCoord == nil {
		return
	}
	n.txnUnlisten()
	if err := n.txnCoord.Close(); err != nil {
		n.log.Warn("transaction coordinator", "err", err)
	}
	n.txnMarkers.Close()
	n.txnVerifier.Close()
}

// TransactionCoordinator exposes the transaction coordinator (nil unless
// a broker).
func (n *Node) TransactionCoordinator() *txn.Coordinator { return n.txnCoord }

// TxnVerifier is the verifier this broker's partition leaders use to add
// their partitions to transactions (nil unless a broker); exposed for
// tests of the produce path.
func (n *Node) TxnVerifier() cluster.TxnVerifier {
	if n.txnVerifier == nil {
		return nil
	}
	return n.txnVerifier
}

// applyImage makes the hosted partitions follow a new metadata image and
// counts the ISR changes it brings (metrics.observeImage).
func (n *Node) applyImage(im *controller.Image) {
	n.metrics.observeImage(n.cfg.NodeID, im)
	n.refreshAuthorizer(im)
	n.refreshQuotas(im)
	if err := n.replicas.Apply(im, time.Now(), n.broker.CaughtUp(im.Offset)); err != nil {
		if errors.Is(err, cluster.ErrClusterMismatch) {
			n.log.Error("refusing to serve: this data dir belongs to another cluster", "err", err)
			return
		}
		n.log.Error("applying metadata to the partition logs", "err", err)
	}
}

// onMemberEvent feeds gossip membership into the local controller voter.
func (n *Node) onMemberEvent(ev membership.Event) {
	n.peers.observe(ev)
	if n.ctl == nil {
		return
	}
	switch ev.Type {
	case membership.EventLeave:
		n.ctl.MemberGone(ev.Meta.NodeID)
	case membership.EventJoin:
		n.ctl.MemberJoined(ev.Meta.NodeID)
	}
}

// controllerEndpoints lists the controller voters with an internal gRPC
// address: configured voters and gossip members with the controller role.
func (n *Node) controllerEndpoints() []cluster.ControllerEndpoint {
	ids := map[int32]bool{}
	for _, v := range n.cfg.ControllerVoters {
		ids[v.ID] = true
	}
	if n.ctl != nil {
		ids[n.cfg.NodeID] = true
	}
	for _, m := range n.members.Members() {
		if m.HasRole(RoleController) {
			ids[m.NodeID] = true
		}
	}
	out := make([]cluster.ControllerEndpoint, 0, len(ids))
	for id := range ids {
		if addr := n.interNodeAddressOf(id); addr != "" {
			out = append(out, cluster.ControllerEndpoint{ID: id, Address: addr})
		}
	}
	slices.SortFunc(out, func(a, b cluster.ControllerEndpoint) int { return int(a.ID - b.ID) })
	return out
}

// interNodeAddressOf resolves where this node calls node id's inter-node
// services (its internal listener, decision 41): itself, gossip, or the
// metadata image (registered brokers). A node that gossips or registered
// no internal address predates the internal listener and serves them on
// its client address, which is used then.
func (n *Node) interNodeAddressOf(id int32) string {
	if id == n.cfg.NodeID {
		return n.cfg.InternalAdvertise
	}
	if m, ok := n.members.Member(id); ok && m.InterNodeAddress() != "" {
		return m.InterNodeAddress()
	}
	if b := n.cache.Image().Brokers[id]; b != nil {
		return b.InterBrokerAddress()
	}
	return ""
}

// Addr is the bound address of the client gRPC listener (the public
// services).
func (n *Node) Addr() string { return n.lis.Addr().String() }

// InternalAddr is the bound address of the internal gRPC listener (the
// inter-node services).
func (n *Node) InternalAddr() string { return n.internalLis.Addr().String() }

// KafkaAddr is the bound address of the Kafka-protocol listener, or ""
// when it has none (KafkaListen empty, or not a broker).
func (n *Node) KafkaAddr() string {
	if n.kafkaLis == nil {
		return ""
	}
	return n.kafkaLis.Addr().String()
}

// GossipAddr is the bound gossip address.
func (n *Node) GossipAddr() string { return n.members.LocalAddr() }

// GossipMembers returns the members this node's gossip sees alive,
// itself included.
func (n *Node) GossipMembers() []membership.Meta { return n.members.Members() }

// RaftAddr is the controller's Raft address, or "" when not a controller.
func (n *Node) RaftAddr() string {
	if n.ctl == nil {
		return ""
	}
	return n.ctl.QuorumState().RaftAddress
}

// HTTPAddr is the bound HTTP address, or "" when disabled.
func (n *Node) HTTPAddr() string {
	if n.httpLis == nil {
		return ""
	}
	return n.httpLis.Addr().String()
}

// Replicas exposes the replica manager (nil unless a broker).
func (n *Node) Replicas() *cluster.ReplicaManager { return n.replicas }

// Controller exposes the controller voter (nil unless a controller).
func (n *Node) Controller() *controller.Controller { return n.ctl }

// Metadata exposes the broker's metadata cache.
func (n *Node) Metadata() *cluster.MetadataCache { return n.cache }

// ProducerIDs hands out producer ids from blocks allocated by the
// controller (nil unless a broker).
func (n *Node) ProducerIDs() *coordinator.ProducerIDManager { return n.producerIDs }

// BrokerEpoch is the broker's current epoch (0 if none).
func (n *Node) BrokerEpoch() int64 {
	if n.broker == nil {
		return 0
	}
	return n.broker.Epoch()
}
