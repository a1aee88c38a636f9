package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/cluster/membership"
	"github.com/sluice-io/sluice/coordinator"
	"github.com/sluice-io/sluice/proto/codec"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Roles a node can take (DESIGN §2).
const (
	RoleController = membership.RoleController
	RoleBroker     = membership.RoleBroker
)

// Config is a node's whole configuration. Flags and SLUICE_* environment
// variables fill it (cmd/sluiced); Validate checks it.
type Config struct {
	NodeID  int32
	DataDir string
	// Roles: RoleController, RoleBroker or both (the default).
	Roles      []string
	Listen     string // gRPC listen address
	Advertise  string // address given to clients and peers; defaults to Listen's actual address
	HTTPListen string // /healthz, /readyz, /metrics, pprof; empty disables
	Rack       string
	// RaftListen / RaftAdvertise: the controller quorum transport.
	RaftListen    string
	RaftAdvertise string
	// ControllerVoters is the static quorum, identical on every voter;
	// empty means this node alone (it must then be a controller).
	ControllerVoters []controller.Voter
	// GossipListen / GossipAdvertise: memberlist (TCP and UDP); IP:port.
	GossipListen    string
	GossipAdvertise string
	// Join lists gossip seeds (host:port).
	Join []string
	// RetentionCheckInterval is log.retention.check.interval.ms.
	RetentionCheckInterval time.Duration
	// ShutdownTimeout bounds the graceful drain of in-flight requests.
	ShutdownTimeout time.Duration
	// ControlledShutdownTimeout bounds moving leaderships away on shutdown.
	ControlledShutdownTimeout time.Duration
	// HeartbeatInterval (broker) and SessionTimeout (controller): a broker
	// silent for SessionTimeout is fenced. Zero takes the defaults.
	HeartbeatInterval time.Duration
	SessionTimeout    time.Duration
	// ReplicaLagTimeMax is replica.lag.time.max.ms (0 = 30 s).
	ReplicaLagTimeMax time.Duration
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
	Logger       *slog.Logger
}

// DefaultConfig is a single combined node on 127.0.0.1:9400 (Raft 9401,
// gossip 9402, HTTP 9403) with data in ./sluice-data.
func DefaultConfig() Config {
	return Config{
		NodeID:                    1,
		DataDir:                   "./sluice-data",
		Roles:                     []string{RoleController, RoleBroker},
		Listen:                    "127.0.0.1:9400",
		RaftListen:                "127.0.0.1:9401",
		GossipListen:              "127.0.0.1:9402",
		HTTPListen:                "127.0.0.1:9403",
		RetentionCheckInterval:    5 * time.Minute,
		ShutdownTimeout:           10 * time.Second,
		ControlledShutdownTimeout: 10 * time.Second,
	}
}

func (c Config) hasRole(r string) bool { return slices.Contains(c.Roles, r) }

// Validate reports the first invalid setting.
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
	for _, r := range c.Roles {
		if r != RoleController && r != RoleBroker {
			return fmt.Errorf("unknown role %q (want controller, broker or both)", r)
		}
	}
	addrs := []struct{ name, v string }{{"listen", c.Listen}, {"advertise", c.Advertise}, {"http listen", c.HTTPListen},
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
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			return fmt.Errorf("join address %q: %w", j, err)
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
	if c.FaultDropProduceResponses < 0 || c.FaultDropProduceResponses > 1 {
		return fmt.Errorf("fault drop produce responses must be within [0, 1], got %v", c.FaultDropProduceResponses)
	}
	if c.FaultInjection && c.HTTPListen == "" {
		return errors.New("fault injection needs an http listen address (it serves /debug/faults there)")
	}
	return c.FaultDialMap.Validate()
}

// ParseVoters parses "1@host:port,2@host:port".
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

// Node is a running Sluice node: controller voter and/or broker, gossip
// member, gRPC server and HTTP endpoints.
type Node struct {
	cfg     Config
	log     *slog.Logger
	grpc    *grpc.Server
	health  *health.Server
	lis     net.Listener
	httpSrv *http.Server
	httpLis net.Listener

	pool        *cluster.ConnPool
	controllers *cluster.ControllerClient
	members     *membership.Membership
	ctl         *controller.Controller // nil unless a controller
	ctlService  *ControllerService
	replicas    *cluster.ReplicaManager // nil unless a broker
	cache       *cluster.MetadataCache
	broker      *cluster.BrokerLifecycle       // nil unless a broker
	producerIDs *coordinator.ProducerIDManager // nil unless a broker
	faults      *faultInjector                 // nil unless fault injection is on

	healthMu sync.Mutex
	serving  bool // guarded by healthMu

	ctx     context.Context // cancelled by Shutdown
	cancel  context.CancelFunc
	stopped chan struct{} // closed by Shutdown once the logs are closed
	// draining is closed when the node stops serving: long-lived streams
	// (ProduceStream, ReplicaFetchStream) end then, or GracefulStop would
	// wait for them until ShutdownTimeout.
	draining chan struct{}
	wg       sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

// StartNode opens the data dir, starts the controller voter (if a
// controller), gossip, the gRPC server and the broker lifecycle (if a
// broker), and returns once the listeners are bound. It does not wait for
// a quorum or for the broker to be unfenced: see WaitReady.
func StartNode(cfg Config) (_ *Node, err error) {
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
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{cfg: cfg, log: logger, stopped: make(chan struct{}), draining: make(chan struct{}), ctx: ctx, cancel: cancel,
		pool: cluster.NewConnPoolWithDialMap(cfg.FaultDialMap), cache: cluster.NewMetadataCache()}
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
	n.lis = lis
	if cfg.Advertise == "" {
		cfg.Advertise = lis.Addr().String()
	}
	n.cfg = cfg

	if cfg.hasRole(RoleBroker) {
		n.replicas, err = cluster.NewReplicaManager(cluster.ReplicaManagerConfig{
			DataDir: cfg.DataDir, NodeID: cfg.NodeID, RetentionCheckInterval: cfg.RetentionCheckInterval, Logger: logger,
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
		})
		if err != nil {
			return nil, err
		}
		if err := n.ctl.Start(); err != nil {
			return nil, err
		}
		cleanups = append(cleanups, func() { n.ctl.Shutdown() })
	}

	meta := membership.Meta{NodeID: cfg.NodeID, Roles: cfg.Roles, GRPCAddress: cfg.Advertise, Rack: cfg.Rack}
	if n.ctl != nil {
		meta.RaftAddress = n.ctl.QuorumState().RaftAddress
	}
	gossipBind := cfg.GossipListen
	if gossipBind == "" {
		gossipBind = "127.0.0.1:0"
	}
	n.members, err = membership.Start(membership.Config{
		Meta: meta, BindAddr: gossipBind, AdvertiseAddr: cfg.GossipAdvertise, Join: cfg.Join,
		Logger: logger, OnEvent: n.onMemberEvent, DialMap: cfg.FaultDialMap,
	})
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	cleanups = append(cleanups, func() { n.members.Shutdown() })
	n.controllers = cluster.NewControllerClient(n.pool, n.controllerEndpoints)

	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize),
		// Produce requests and replica fetches carry megabytes: windows
		// as large as the clients' (client.conn) avoid waiting for window
		// updates, and larger socket buffers mean fewer syscalls.
		grpc.InitialWindowSize(cluster.StreamWindow), grpc.InitialConnWindowSize(cluster.ConnWindow),
		grpc.ReadBufferSize(cluster.SocketBuffer), grpc.WriteBufferSize(cluster.SocketBuffer)}
	opts = append(opts, codec.ServerOptions()...)
	if cfg.FaultInjection || cfg.FaultDropProduceResponses > 0 {
		n.faults = newFaultInjector(logger)
		opts = append(opts, grpc.ChainUnaryInterceptor(n.faults.unary), grpc.ChainStreamInterceptor(n.faults.stream))
	}
	n.grpc = grpc.NewServer(opts...)
	if n.ctl != nil {
		n.ctlService = NewControllerService(n.ctl, n.grpcAddressOf)
		internalv1.RegisterControllerServer(n.grpc, n.ctlService)
	}
	if n.replicas != nil {
		n.broker = cluster.NewBrokerLifecycle(cluster.BrokerConfig{
			NodeID: cfg.NodeID, Address: cfg.Advertise, Rack: cfg.Rack, HeartbeatInterval: cfg.HeartbeatInterval,
			Controllers: n.controllers, Metadata: n.cache, OnImage: n.applyImage, Logger: logger,
		})
		n.producerIDs = coordinator.NewProducerIDManager(n.broker, coordinator.ProducerIDManagerConfig{Logger: logger})
		cleanups = append(cleanups, func() { n.producerIDs.Close(); n.broker.Stop() })
		sluicev1.RegisterTransactionsServer(n.grpc, NewTransactionsService(n.producerIDs))
		internalv1.RegisterReplicaServer(n.grpc, NewReplicaService(n.replicas, n.cache, n.draining))
		NewServer(ServerConfig{Replicas: n.replicas, Metadata: n.cache, Controllers: n.controllers, Pool: n.pool,
			Self: Broker{NodeID: cfg.NodeID, Address: cfg.Advertise, Rack: cfg.Rack}, Logger: logger, Draining: n.draining}).Register(n.grpc)
	}
	n.health = health.NewServer()
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(n.grpc, n.health)
	reflection.Register(n.grpc)
	if n.faults != nil {
		n.faults.served = servedMethods(n.grpc.GetServiceInfo())
		logger.Warn("fault injection (testing only): gRPC calls are subject to fault rules", "debug_faults_endpoint", cfg.FaultInjection)
		if f := cfg.FaultDropProduceResponses; f > 0 {
			n.faults.setRules([]FaultRule{{Method: "/sluice.v1.Log/Produce", DropResponse: f}, {Method: "/sluice.v1.Log/ProduceStream", DropResponse: f}}, "--fault-drop-produce-responses")
		}
	}

	if cfg.HTTPListen != "" {
		hl, err := net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			return nil, fmt.Errorf("listen http %s: %w", cfg.HTTPListen, err)
		}
		n.httpLis = hl
		n.httpSrv = &http.Server{Handler: n.httpMux(), ReadHeaderTimeout: 5 * time.Second}
		n.goTracked(func() {
			if err := n.httpSrv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("http server stopped", "err", err)
			}
		})
	}
	n.goTracked(func() {
		if err := n.grpc.Serve(lis); err != nil {
			logger.Error("grpc server stopped", "err", err)
		}
	})
	if n.replicas != nil {
		n.replicas.Start()
		n.replicas.StartReplication(cluster.ReplicationConfig{Metadata: n.cache, Pool: n.pool, Controllers: n.controllers,
			BrokerEpoch: n.BrokerEpoch, LagTimeMax: cfg.ReplicaLagTimeMax})
		n.broker.Start()
	}
	n.goTracked(n.readinessLoop)
	n.goTracked(n.migrateLegacyCatalog)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		<-n.stopped
		unlock()
	}()
	logger.Info("sluice node started", "node_id", cfg.NodeID, "roles", cfg.Roles, "listen", lis.Addr().String(),
		"advertise", cfg.Advertise, "gossip", n.members.LocalAddr(), "http", n.HTTPAddr(), "data_dir", cfg.DataDir)
	return n, nil
}

// applyImage makes the hosted partitions follow a new metadata image.
func (n *Node) applyImage(im *controller.Image) {
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

// controllerEndpoints lists the controller voters with a gRPC address:
// configured voters and gossip members with the controller role.
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
		if addr := n.grpcAddressOf(id); addr != "" {
			out = append(out, cluster.ControllerEndpoint{ID: id, Address: addr})
		}
	}
	slices.SortFunc(out, func(a, b cluster.ControllerEndpoint) int { return int(a.ID - b.ID) })
	return out
}

// grpcAddressOf resolves a node's gRPC address: itself, gossip, or the
// metadata image (registered brokers).
func (n *Node) grpcAddressOf(id int32) string {
	if id == n.cfg.NodeID {
		return n.cfg.Advertise
	}
	if m, ok := n.members.Member(id); ok && m.GRPCAddress != "" {
		return m.GRPCAddress
	}
	if b := n.cache.Image().Brokers[id]; b != nil {
		return b.Address
	}
	return ""
}

// Ready reports whether the node serves: a broker once registered,
// unfenced and caught up; a controller-only node once a leader is known.
func (n *Node) Ready() bool {
	if n.broker != nil {
		return n.broker.Ready()
	}
	id, _ := n.ctl.Leader()
	return id >= 0
}

// WaitReady blocks until Ready or ctx is done.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !n.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %d not ready: %w", n.cfg.NodeID, ctx.Err())
		case <-t.C:
		}
	}
	n.syncHealth()
	return nil
}

// syncHealth mirrors Ready into the gRPC health status (and /readyz).
func (n *Node) syncHealth() {
	n.healthMu.Lock()
	defer n.healthMu.Unlock()
	if n.ctx.Err() != nil {
		return // Shutdown owns the status now
	}
	r := n.Ready()
	if r == n.serving {
		return
	}
	n.serving = r
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if r {
		st = healthpb.HealthCheckResponse_SERVING
		n.log.Info("node ready", "node_id", n.cfg.NodeID)
	} else {
		n.log.Warn("node not ready", "node_id", n.cfg.NodeID)
	}
	n.health.SetServingStatus("", st)
}

// readinessLoop mirrors Ready into the gRPC health status (and /readyz).
func (n *Node) readinessLoop() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		n.syncHealth()
	}
}

func (n *Node) goTracked(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// Addr is the bound gRPC address.
func (n *Node) Addr() string { return n.lis.Addr().String() }

// GossipAddr is the bound gossip address.
func (n *Node) GossipAddr() string { return n.members.LocalAddr() }

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

// Abort stops the node as if its process died, for failure tests: no
// controlled shutdown, no gossip leave, no Raft leadership hand-off, no
// drain. Logs and stores are still closed so the test can restart it.
func (n *Node) Abort() {
	n.stopOnce.Do(func() {
		n.healthMu.Lock()
		n.cancel()
		n.health.Shutdown()
		n.healthMu.Unlock()
		if n.producerIDs != nil {
			n.producerIDs.Close()
		}
		if n.broker != nil {
			n.broker.Stop()
		}
		if n.ctlService != nil {
			n.ctlService.Close()
		}
		n.grpc.Stop()
		_ = n.members.Shutdown()
		if n.ctl != nil {
			_ = n.ctl.Abort()
		}
		if n.replicas != nil {
			_ = n.replicas.Close()
		}
		if n.httpSrv != nil {
			_ = n.httpSrv.Close()
		}
		n.pool.Close()
		close(n.stopped)
		n.wg.Wait()
		n.log.Info("sluice node aborted", "node_id", n.cfg.NodeID)
	})
}

// BrokerEpoch is the broker's current epoch (0 if none).
func (n *Node) BrokerEpoch() int64 {
	if n.broker == nil {
		return 0
	}
	return n.broker.Epoch()
}

// Shutdown stops the node: health NOT_SERVING; controlled shutdown (the
// controller moves this broker's leaderships away, bounded by
// ControlledShutdownTimeout); drain in-flight requests (bounded by ctx and
// ShutdownTimeout); leave gossip; stop the controller voter (handing off
// leadership); close logs cleanly. Safe to call more than once.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() {
		n.healthMu.Lock()
		n.cancel() // stops syncHealth from flipping the status back
		n.health.Shutdown()
		n.healthMu.Unlock()
		if n.broker != nil && n.broker.Epoch() > 0 {
			cctx, cancel := context.WithTimeout(ctx, n.controlledShutdownTimeout())
			if err := n.broker.ControlledShutdown(cctx); err != nil {
				n.log.Warn("controlled shutdown incomplete; stopping anyway", "err", err)
			} else {
				n.log.Info("controlled shutdown done: leaderships moved away")
			}
			cancel()
		}
		if n.producerIDs != nil {
			n.producerIDs.Close()
		}
		if n.broker != nil {
			n.broker.Stop()
		}
		n.stopServing(ctx)
		n.cancel()
		if err := n.members.Leave(time.Second); err != nil {
			n.log.Debug("gossip leave", "err", err)
		}
		_ = n.members.Shutdown()
		var errsList []error
		if n.ctl != nil {
			errsList = append(errsList, n.ctl.Shutdown())
		}
		if n.replicas != nil {
			errsList = append(errsList, n.replicas.Close())
		}
		n.pool.Close()
		close(n.stopped)
		n.wg.Wait()
		n.stopErr = errors.Join(errsList...)
		n.log.Info("sluice node stopped", "node_id", n.cfg.NodeID)
	})
	return n.stopErr
}

func (n *Node) controlledShutdownTimeout() time.Duration {
	if n.cfg.ControlledShutdownTimeout > 0 {
		return n.cfg.ControlledShutdownTimeout
	}
	return 10 * time.Second
}

// stopServing ends metadata streams and the other long-lived streams,
// drains in-flight requests and stops the gRPC and HTTP servers.
func (n *Node) stopServing(ctx context.Context) {
	if n.ctlService != nil {
		n.ctlService.Close()
	}
	close(n.draining)
	drained := make(chan struct{})
	go func() {
		n.grpc.GracefulStop()
		close(drained)
	}()
	t := time.NewTimer(n.cfg.ShutdownTimeout)
	select {
	case <-drained:
	case <-ctx.Done():
		n.grpc.Stop()
	case <-t.C:
		n.grpc.Stop()
	}
	t.Stop()
	<-drained
	if n.httpSrv != nil {
		hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = n.httpSrv.Shutdown(hctx)
		cancel()
	}
}

func (n *Node) httpMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		resp, err := n.health.Check(r.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		im := n.cache.Image()
		fmt.Fprintf(w, "# HELP sluice_topics Number of topics.\n# TYPE sluice_topics gauge\nsluice_topics %d\n", len(im.Topics))
		fmt.Fprintf(w, "# HELP sluice_metadata_offset Metadata offset applied by this broker.\n# TYPE sluice_metadata_offset gauge\nsluice_metadata_offset %d\n", im.Offset)
		if n.replicas == nil {
			return
		}
		fmt.Fprintf(w, "# HELP sluice_log_end_offset Log end offset per hosted partition.\n# TYPE sluice_log_end_offset gauge\n")
		parts := n.replicas.Replicas()
		slices.SortFunc(parts, func(a, b *cluster.Replica) int {
			if a.Topic != b.Topic {
				if a.Topic < b.Topic {
					return -1
				}
				return 1
			}
			return int(a.Partition - b.Partition)
		})
		for _, part := range parts {
			fmt.Fprintf(w, "sluice_log_end_offset{topic=%q,partition=\"%s\"} %d\n", part.Topic, strconv.Itoa(int(part.Partition)), part.LogEndOffset())
		}
		fmt.Fprintf(w, "# HELP sluice_high_watermark High watermark per hosted partition.\n# TYPE sluice_high_watermark gauge\n")
		for _, part := range parts {
			fmt.Fprintf(w, "sluice_high_watermark{topic=%q,partition=\"%s\"} %d\n", part.Topic, strconv.Itoa(int(part.Partition)), part.HighWatermark())
		}
		fmt.Fprintf(w, "# HELP sluice_producer_ids Producer ids with idempotence state per hosted partition.\n# TYPE sluice_producer_ids gauge\n")
		for _, part := range parts {
			fmt.Fprintf(w, "sluice_producer_ids{topic=%q,partition=\"%s\"} %d\n", part.Topic, strconv.Itoa(int(part.Partition)), part.ProducerCount())
		}
	})
	if n.cfg.FaultInjection {
		n.faults.register(mux)
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// lockDataDir takes an exclusive lock file so that two processes never
// share a data dir.
func lockDataDir(dir string) (func(), error) {
	path := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := flock(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %s is in use by another process: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
