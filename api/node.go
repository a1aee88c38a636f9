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
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluice-io/sluice/cluster"
)

// Config is a node's whole configuration. Flags and SLUICE_* environment
// variables fill it (cmd/sluiced); Validate checks it.
type Config struct {
	NodeID     int32
	DataDir    string
	Listen     string // gRPC listen address
	Advertise  string // address given to clients; defaults to Listen's actual address
	HTTPListen string // /healthz, /readyz, /metrics, pprof; empty disables
	Rack       string
	// RetentionCheckInterval is log.retention.check.interval.ms.
	RetentionCheckInterval time.Duration
	// ShutdownTimeout bounds the graceful drain of in-flight requests.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
}

// DefaultConfig is a single node on 127.0.0.1:9400 with data in ./sluice-data.
func DefaultConfig() Config {
	return Config{
		NodeID:                 1,
		DataDir:                "./sluice-data",
		Listen:                 "127.0.0.1:9400",
		HTTPListen:             "127.0.0.1:9403",
		RetentionCheckInterval: 5 * time.Minute,
		ShutdownTimeout:        10 * time.Second,
	}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	if c.NodeID < 0 {
		return fmt.Errorf("node id must be >= 0, got %d", c.NodeID)
	}
	if c.DataDir == "" {
		return errors.New("data dir must be set")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen address %q: %w", c.Listen, err)
	}
	if c.Advertise != "" {
		if _, _, err := net.SplitHostPort(c.Advertise); err != nil {
			return fmt.Errorf("advertise address %q: %w", c.Advertise, err)
		}
	}
	if c.HTTPListen != "" {
		if _, _, err := net.SplitHostPort(c.HTTPListen); err != nil {
			return fmt.Errorf("http listen address %q: %w", c.HTTPListen, err)
		}
	}
	if c.RetentionCheckInterval <= 0 {
		return errors.New("retention check interval must be > 0")
	}
	return nil
}

// Node is a running single-node Sluice: replica manager, gRPC server
// (Log, Admin, health, reflection) and HTTP endpoints.
type Node struct {
	cfg      Config
	log      *slog.Logger
	replicas *cluster.ReplicaManager
	grpc     *grpc.Server
	health   *health.Server
	lis      net.Listener
	httpSrv  *http.Server
	httpLis  net.Listener

	stopped  chan struct{} // closed by Shutdown once the logs are closed
	wg       sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

// StartNode opens the data dir (recovering logs), starts serving, and
// returns once the listeners are bound.
func StartNode(cfg Config) (*Node, error) {
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
	start := time.Now()
	replicas, err := cluster.NewReplicaManager(cluster.ReplicaManagerConfig{
		DataDir:                cfg.DataDir,
		NodeID:                 cfg.NodeID,
		RetentionCheckInterval: cfg.RetentionCheckInterval,
		Logger:                 logger,
	}, start)
	if err != nil {
		unlock()
		return nil, err
	}
	logger.Info("logs loaded", "topics", len(replicas.Catalog().Topics()), "took", time.Since(start).Round(time.Millisecond))
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		replicas.Close()
		unlock()
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if cfg.Advertise == "" {
		cfg.Advertise = lis.Addr().String()
	}
	n := &Node{cfg: cfg, log: logger, replicas: replicas, lis: lis, stopped: make(chan struct{})}
	n.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize))
	NewServer(replicas, Broker{NodeID: cfg.NodeID, Address: cfg.Advertise, Rack: cfg.Rack}, logger, nil).Register(n.grpc)
	n.health = health.NewServer()
	healthpb.RegisterHealthServer(n.grpc, n.health)
	reflection.Register(n.grpc)
	if cfg.HTTPListen != "" {
		hl, err := net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			lis.Close()
			replicas.Close()
			unlock()
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
	replicas.Start()
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	n.goTracked(func() {
		if err := n.grpc.Serve(lis); err != nil {
			logger.Error("grpc server stopped", "err", err)
		}
	})
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		<-n.stopped
		unlock()
	}()
	logger.Info("sluice node serving", "node_id", cfg.NodeID, "listen", lis.Addr().String(), "advertise", cfg.Advertise, "http", n.HTTPAddr(), "data_dir", cfg.DataDir)
	return n, nil
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

// HTTPAddr is the bound HTTP address, or "" when disabled.
func (n *Node) HTTPAddr() string {
	if n.httpLis == nil {
		return ""
	}
	return n.httpLis.Addr().String()
}

// Replicas exposes the replica manager (for tests and tools).
func (n *Node) Replicas() *cluster.ReplicaManager { return n.replicas }

// Shutdown stops the node in DESIGN order: health NOT_SERVING, drain
// in-flight requests (bounded by ctx and ShutdownTimeout), close logs
// cleanly, stop goroutines. It is safe to call more than once.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() {
		n.health.Shutdown()
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
		n.stopErr = n.replicas.Close()
		close(n.stopped)
		n.wg.Wait()
		n.log.Info("sluice node stopped", "node_id", n.cfg.NodeID)
	})
	return n.stopErr
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
		topics := n.replicas.Catalog().Topics()
		fmt.Fprintf(w, "# HELP sluice_topics Number of topics.\n# TYPE sluice_topics gauge\nsluice_topics %d\n", len(topics))
		fmt.Fprintf(w, "# HELP sluice_log_end_offset Log end offset per partition.\n# TYPE sluice_log_end_offset gauge\n")
		for _, t := range topics {
			for p := int32(0); p < t.Partitions; p++ {
				if part, err := n.replicas.Partition(t.Name, p); err == nil {
					fmt.Fprintf(w, "sluice_log_end_offset{topic=%q,partition=\"%s\"} %d\n", t.Name, strconv.Itoa(int(p)), part.Log.EndOffset())
				}
			}
		}
	})
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
