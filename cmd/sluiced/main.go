// Command sluiced runs a Sluice node: a controller voter, a broker, or both
// (the default). With no flags it is a complete single-node cluster on
// 127.0.0.1:9400 (Raft 9401, gossip 9402, HTTP 9403, internal gRPC 9404)
// with data in ./sluice-data.
//
// Every flag can also be set by an environment variable: --data-dir is
// SLUICE_DATA_DIR, --http-listen is SLUICE_HTTP_LISTEN, and so on. Flags
// win over the environment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/node"
)

func main() {
	applySysmonSetting()
	cfg, err := configure(os.Args[1:], os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) || errors.Is(err, errPrintedConfig) {
		return
	}
	if err == nil {
		gc := tuneGC(os.LookupEnv, cgroupMemoryMax)
		cfg.Logger.Info("garbage collector", "gogc", gc.gcPercent, "memory_limit_bytes", gc.memoryLimit)
		cfg.Logger.Info("go runtime", "godebug", os.Getenv("GODEBUG"))
		err = run(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluiced:", err)
		os.Exit(1)
	}
}

// envName maps a flag name to its environment variable.
func envName(flagName string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// configure builds the node's configuration from node.DefaultConfig, the
// environment (read only through lookupEnv, os.LookupEnv in main) and
// args, which win over the environment, and validates it. It returns
// flag.ErrHelp after printing the usage for -h.
func configure(args []string, lookupEnv func(string) (string, bool)) (node.Config, error) {
	cfg := node.DefaultConfig()
	fs := flag.NewFlagSet("sluiced", flag.ContinueOnError)
	nodeID := fs.Int("node-id", int(cfg.NodeID), "node id: unique, stable across restarts")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for all on-disk state")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "client gRPC listen address (the public services)")
	fs.StringVar(&cfg.Advertise, "advertise", cfg.Advertise, "gRPC address given to clients (default: the listen address)")
	fs.StringVar(&cfg.InternalListen, "internal-listen", cfg.InternalListen, "internal gRPC listen address: the inter-node services (controller, replication, transaction markers), for other nodes only")
	fs.StringVar(&cfg.InternalAdvertise, "internal-advertise", cfg.InternalAdvertise, "internal gRPC address other nodes dial (default: the internal listen address; on 0.0.0.0, the --advertise host with the internal port)")
	fs.StringVar(&cfg.HTTPListen, "http-listen", cfg.HTTPListen, "HTTP address for /healthz, /readyz, /metrics and pprof (empty disables)")
	fs.StringVar(&cfg.Rack, "rack", cfg.Rack, "rack of this node, for rack-aware replica placement")
	fs.DurationVar(&cfg.RetentionCheckInterval, "retention-check-interval", cfg.RetentionCheckInterval, "how often retention deletes old segments")
	fs.DurationVar(&cfg.LogCleanerBackoff, "log-cleaner-backoff", cfg.LogCleanerBackoff, "how often the log cleaner checks compacted partitions")
	fs.Int64Var(&cfg.PageCacheWindow, "page-cache-window", cfg.PageCacheWindow, "bytes of each partition segment's newest data left in the OS page cache once written back; older pages are dropped (Linux). 0 leaves the page cache to the kernel")
	roles := fs.String("roles", strings.Join(cfg.Roles, ","), "controller, broker, or controller,broker")
	voters := fs.String("controller-voters", "", "static controller quorum id@host:raftport,... (same on every node; default: this node alone)")
	fs.StringVar(&cfg.RaftListen, "raft-listen", cfg.RaftListen, "controller Raft listen address")
	fs.StringVar(&cfg.RaftAdvertise, "raft-advertise", cfg.RaftAdvertise, "Raft address other voters dial (default: the raft listen address)")
	fs.StringVar(&cfg.GossipListen, "gossip-listen", cfg.GossipListen, "gossip (memberlist) listen IP:port, TCP and UDP")
	fs.StringVar(&cfg.GossipAdvertise, "gossip-advertise", cfg.GossipAdvertise, "gossip IP:port other nodes use (default: the gossip listen address)")
	join := fs.String("join", "", "gossip seeds host:port,... to join a cluster")
	fs.DurationVar(&cfg.SessionTimeout, "broker-session-timeout", cfg.SessionTimeout, "a broker silent this long is fenced (controller; default 2s)")
	fs.DurationVar(&cfg.LeaderRebalanceInterval, "leader-rebalance-interval", cfg.LeaderRebalanceInterval, "how often the active controller moves leaderships back to preferred replicas of imbalanced brokers (controller; default 5m; negative: never)")
	fs.Float64Var(&cfg.LeaderImbalanceThreshold, "leader-imbalance-threshold", cfg.LeaderImbalanceThreshold, "share of a broker's preferred partitions led elsewhere above which they are moved back (controller; default 0.10)")
	fs.DurationVar(&cfg.HeartbeatInterval, "broker-heartbeat-interval", cfg.HeartbeatInterval, "broker heartbeat interval (default 250ms)")
	fs.Float64Var(&cfg.FaultDropProduceResponses, "fault-drop-produce-responses", 0, "testing only: drop this fraction (0..1) of produce responses after processing them")
	fs.BoolVar(&cfg.FaultInjection, "fault-injection", false, "testing only: serve /debug/faults on --http-listen, per-RPC fault rules applied to this node's gRPC calls")
	dialMap := fs.String("fault-dial-map", "", "testing only: from=to,... host:port pairs; outgoing inter-node connections (gRPC, Raft, gossip) to from dial to instead")
	fs.DurationVar(&cfg.ReplicaLagTimeMax, "replica-lag-time-max", cfg.ReplicaLagTimeMax, "a follower not caught up this long leaves the ISR (default 30s)")
	txnStatePartitions := fs.Int("transaction-state-partitions", int(cfg.TransactionStatePartitions), "partitions of __transaction_state when this broker creates it; same on every broker (default 50)")
	fs.DurationVar(&cfg.TransactionMaxTimeout, "transaction-max-timeout", cfg.TransactionMaxTimeout, "largest transaction timeout a producer may ask for (transaction.max.timeout.ms; default 15m)")
	fs.DurationVar(&cfg.TransactionAbortTimedOutInterval, "transaction-abort-timed-out-interval", cfg.TransactionAbortTimedOutInterval, "how often the transaction coordinator aborts timed-out transactions and expires idle ids (default 10s)")
	fs.DurationVar(&cfg.TransactionalIDExpiration, "transactional-id-expiration", cfg.TransactionalIDExpiration, "a transactional id idle this long without an open transaction is removed (transactional.id.expiration.ms; default 168h)")
	offsetsPartitions := fs.Int("offsets-topic-partitions", int(cfg.OffsetsTopicPartitions), "partitions of __consumer_offsets when this broker creates it; same on every broker (default 50)")
	fs.DurationVar(&cfg.GroupSessionTimeout, "group-session-timeout", cfg.GroupSessionTimeout, "session timeout of group members that ask for none (group.consumer.session.timeout.ms; default 45s)")
	fs.DurationVar(&cfg.GroupMinSessionTimeout, "group-min-session-timeout", cfg.GroupMinSessionTimeout, "smallest session timeout a group member may ask for (default 1s)")
	fs.DurationVar(&cfg.GroupMaxSessionTimeout, "group-max-session-timeout", cfg.GroupMaxSessionTimeout, "largest session timeout a group member may ask for (default 30m)")
	fs.DurationVar(&cfg.GroupHeartbeatInterval, "group-heartbeat-interval", cfg.GroupHeartbeatInterval, "heartbeat interval told to group members (group.consumer.heartbeat.interval.ms; default 5s)")
	fs.DurationVar(&cfg.OffsetsRetention, "offsets-retention", cfg.OffsetsRetention, "the committed offsets of a group empty this long are deleted (offsets.retention.ms; default 168h)")
	fs.DurationVar(&cfg.ControlledShutdownTimeout, "controlled-shutdown-timeout", cfg.ControlledShutdownTimeout, "how long a stopping broker waits for its leaderships to move")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json (one JSON object per line, for log collectors)")
	deploy := addDeployFlags(fs)
	fs.String("config", "", "YAML file of settings: flag names as keys (flags and SLUICE_* variables win over it)")
	printCfg := fs.Bool("print-config", false, "print the effective settings and where each came from (default, file, env, flag), then exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: sluiced [flags]\n\nRuns a Sluice node. Every flag may also be given as SLUICE_<FLAG> in the environment\n(e.g. SLUICE_DATA_DIR).\n\n")
		fs.PrintDefaults()
	}
	// The file fills flags first, then the environment; the command line
	// overrides both.
	sources := map[string]string{}
	if path := configFileArg(args, lookupEnv); path != "" {
		if err := applyConfigFile(fs, path, sources); err != nil {
			return node.Config{}, err
		}
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := lookupEnv(envName(f.Name)); ok && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", envName(f.Name), v, err)
			}
			sources[f.Name] = sourceEnv
		}
	})
	if envErr != nil {
		return node.Config{}, envErr
	}
	if err := fs.Parse(args); err != nil {
		return node.Config{}, err
	}
	fs.Visit(func(f *flag.Flag) { sources[f.Name] = sourceFlag })
	if fs.NArg() > 0 {
		return node.Config{}, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *nodeID < math.MinInt32 || *nodeID > math.MaxInt32 {
		return node.Config{}, fmt.Errorf("--node-id %s is out of range", strconv.Itoa(*nodeID))
	}
	cfg.NodeID = int32(*nodeID)
	if *txnStatePartitions < 0 || *txnStatePartitions > math.MaxInt32 {
		return node.Config{}, fmt.Errorf("--transaction-state-partitions %s is out of range", strconv.Itoa(*txnStatePartitions))
	}
	cfg.TransactionStatePartitions = int32(*txnStatePartitions)
	if *offsetsPartitions < 0 || *offsetsPartitions > math.MaxInt32 {
		return node.Config{}, fmt.Errorf("--offsets-topic-partitions %s is out of range", strconv.Itoa(*offsetsPartitions))
	}
	cfg.OffsetsTopicPartitions = int32(*offsetsPartitions)
	if err := deploy.apply(&cfg); err != nil {
		return node.Config{}, err
	}
	cfg.Roles = node.ParseList(*roles)
	cfg.Join = node.ParseList(*join)
	var err error
	if cfg.ControllerVoters, err = node.ParseVoters(*voters); err != nil {
		return node.Config{}, fmt.Errorf("--controller-voters: %w", err)
	}
	if cfg.FaultDialMap, err = faultnet.ParseDialMap(*dialMap); err != nil {
		return node.Config{}, fmt.Errorf("--fault-dial-map: %w", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return node.Config{}, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch *logFormat {
	case "text":
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, opts))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, opts))
	default:
		return node.Config{}, fmt.Errorf("--log-format: %q is not text or json", *logFormat)
	}
	// Every record names the node (with several nodes' logs in one place,
	// as in a log collector, it says whose it is).
	cfg.Logger = cfg.Logger.With("node", cfg.NodeID)
	if err := cfg.Validate(); err != nil {
		return node.Config{}, err
	}
	if *printCfg {
		printConfig(configOut, fs, sources)
		return cfg, errPrintedConfig
	}
	return cfg, nil
}

// run starts the node and shuts it down at SIGTERM or SIGINT; a second
// signal ends the graceful shutdown at once.
func run(cfg node.Config) error {
	n, err := node.Start(cfg)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	sig := <-sigs
	cfg.Logger.Info("shutting down", "signal", sig.String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		// A second signal stops at once.
		<-sigs
		cancel()
	}()
	return n.Shutdown(ctx)
}
