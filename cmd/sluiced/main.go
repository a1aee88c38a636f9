// Command sluiced runs a Sluice node: a controller voter, a broker, or both
// (the default). With no flags it is a complete single-node cluster on
// 127.0.0.1:9400 (Raft 9401, gossip 9402, HTTP 9403, internal gRPC 9404,
// the Kafka protocol on 9092) with data in ./sluice-data.
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
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/node"
)

func main() {
	cfg, err := configure(os.Args[1:], os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) || errors.Is(err, errPrintedConfig) {
		return
	}
	if err == nil {
		gc := tuneGC(os.LookupEnv, cgroupMemoryMax, machineMemory)
		cfg.Logger.Info("garbage collector", gc.logArgs()...)
		// GODEBUG comes from the deployment (decision 47: the image, the
		// manifests, make run); the line shows what is in force.
		cfg.Logger.Info("go runtime", "godebug", os.Getenv("GODEBUG"))
		logOpenFilesLimit(cfg.Logger, cfg)
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
	fs.Var((*int32Value)(&cfg.NodeID), "node-id", "node id: unique, stable across restarts")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for all on-disk state")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "client gRPC listen address (the public services)")
	fs.StringVar(&cfg.Advertise, "advertise", cfg.Advertise, "gRPC address given to clients (default: the listen address)")
	fs.StringVar(&cfg.InternalListen, "internal-listen", cfg.InternalListen, "internal gRPC listen address: the inter-node services (controller, replication, transaction markers), for other nodes only")
	fs.StringVar(&cfg.InternalAdvertise, "internal-advertise", cfg.InternalAdvertise, "internal gRPC address other nodes dial (default: the internal listen address; on 0.0.0.0, the --advertise host with the internal port)")
	fs.StringVar(&cfg.KafkaListen, "kafka-listen", cfg.KafkaListen, "Kafka-protocol listen address, where Kafka clients connect (brokers only; empty disables)")
	fs.StringVar(&cfg.KafkaAdvertise, "kafka-advertise", cfg.KafkaAdvertise, "Kafka-protocol address given to Kafka clients in Metadata (default: the kafka listen address; on 0.0.0.0, the --advertise host with the Kafka port)")
	fs.StringVar(&cfg.HTTPListen, "http-listen", cfg.HTTPListen, "HTTP address for /healthz, /readyz, /metrics (and /debug/pprof with --pprof; empty disables)")
	fs.StringVar(&cfg.Rack, "rack", cfg.Rack, "rack of this node, for rack-aware replica placement")
	fs.DurationVar(&cfg.RetentionCheckInterval, "retention-check-interval", cfg.RetentionCheckInterval, "how often retention deletes old segments")
	fs.DurationVar(&cfg.LogCleanerBackoff, "log-cleaner-backoff", cfg.LogCleanerBackoff, "how often the log cleaner checks compacted partitions")
	fs.Int64Var(&cfg.PageCacheWindow, "page-cache-window", cfg.PageCacheWindow, "bytes of each partition segment's newest data left in the OS page cache once written back; older pages are dropped (Linux). 0 leaves the page cache to the kernel")
	fs.Int64Var(&cfg.QueuedMaxRequestBytes, "queued-max-request-bytes", cfg.QueuedMaxRequestBytes, "each listener's budget of request bytes in flight (Kafka's queued.max.request.bytes; client, internal and Kafka listener each): a gRPC request is read once the largest one (64 MiB) fits beside those being served, a Kafka request once its frame does, and waits until then; at least 134217728")
	addConnectionFlags(fs, &cfg)
	addTLSFlags(fs, &cfg)
	roles := fs.String("roles", strings.Join(cfg.Roles, ","), "controller, broker, or controller,broker")
	supers := fs.String("super-users", "", "principals allowed everything with --authorizer acl, separated by ';' as Kafka's super.users (User:admin;User:ops)")
	voters := fs.String("controller-voters", "", "static controller quorum id@host:raftport,... (same on every node; default: this node alone)")
	fs.StringVar(&cfg.RaftListen, "raft-listen", cfg.RaftListen, "controller Raft listen address")
	fs.StringVar(&cfg.RaftAdvertise, "raft-advertise", cfg.RaftAdvertise, "Raft address other voters dial (default: the raft listen address)")
	fs.StringVar(&cfg.GossipListen, "gossip-listen", cfg.GossipListen, "gossip (memberlist) listen IP:port, TCP and UDP")
	fs.StringVar(&cfg.GossipAdvertise, "gossip-advertise", cfg.GossipAdvertise, "gossip IP:port other nodes use (default: the gossip listen address)")
	join := fs.String("join", "", "gossip seeds host:port,... to join a cluster")
	fs.StringVar(&cfg.GossipKeyFile, "gossip-key-file", cfg.GossipKeyFile, "file of gossip encryption keys, one base64 key (16, 24 or 32 bytes) a line, the first encrypting; read again every few seconds, so keys rotate without a restart (empty: plaintext gossip)")
	fs.DurationVar(&cfg.SessionTimeout, "broker-session-timeout", cfg.SessionTimeout, "a broker silent this long is fenced (controller)")
	fs.DurationVar(&cfg.LeaderRebalanceInterval, "leader-rebalance-interval", cfg.LeaderRebalanceInterval, "how often the active controller moves leaderships back to preferred replicas of imbalanced brokers (controller; negative: never)")
	fs.Float64Var(&cfg.LeaderImbalanceThreshold, "leader-imbalance-threshold", cfg.LeaderImbalanceThreshold, "share of a broker's preferred partitions led elsewhere above which they are moved back (controller)")
	defaultRF := fs.Int("default-replication-factor", int(cfg.DefaultReplicationFactor), "replication factor of a new topic that names none (controller; Kafka's default.replication.factor; same on every controller)")
	defaultMinISR := fs.Int("default-min-insync-replicas", int(cfg.DefaultMinInsyncReplicas), "min.insync.replicas of a new topic that sets none, capped at its replication factor (controller; same on every controller)")
	fs.DurationVar(&cfg.HeartbeatInterval, "broker-heartbeat-interval", cfg.HeartbeatInterval, "broker heartbeat interval")
	testFlags := addTestMachineryFlags(fs, &cfg) // none without the sluicetest tag
	fs.DurationVar(&cfg.ReplicaLagTimeMax, "replica-lag-time-max", cfg.ReplicaLagTimeMax, "a follower not caught up this long leaves the ISR")
	fs.Var((*int32Value)(&cfg.TransactionStatePartitions), "transaction-state-partitions", "partitions of __transaction_state when this broker creates it; same on every broker")
	fs.DurationVar(&cfg.TransactionMaxTimeout, "transaction-max-timeout", cfg.TransactionMaxTimeout, "largest transaction timeout a producer may ask for (transaction.max.timeout.ms)")
	fs.DurationVar(&cfg.TransactionAbortTimedOutInterval, "transaction-abort-timed-out-interval", cfg.TransactionAbortTimedOutInterval, "how often the transaction coordinator aborts timed-out transactions and expires idle ids")
	fs.DurationVar(&cfg.TransactionalIDExpiration, "transactional-id-expiration", cfg.TransactionalIDExpiration, "a transactional id idle this long without an open transaction is removed (transactional.id.expiration.ms)")
	fs.Var((*int32Value)(&cfg.OffsetsTopicPartitions), "offsets-topic-partitions", "partitions of __consumer_offsets when this broker creates it; same on every broker")
	fs.DurationVar(&cfg.GroupSessionTimeout, "group-session-timeout", cfg.GroupSessionTimeout, "session timeout of group members that ask for none (group.consumer.session.timeout.ms)")
	fs.DurationVar(&cfg.GroupMinSessionTimeout, "group-min-session-timeout", cfg.GroupMinSessionTimeout, "smallest session timeout a group member may ask for")
	fs.DurationVar(&cfg.GroupMaxSessionTimeout, "group-max-session-timeout", cfg.GroupMaxSessionTimeout, "largest session timeout a group member may ask for")
	fs.DurationVar(&cfg.GroupHeartbeatInterval, "group-heartbeat-interval", cfg.GroupHeartbeatInterval, "heartbeat interval told to group members (group.consumer.heartbeat.interval.ms)")
	fs.DurationVar(&cfg.GroupInitialRebalanceDelay, "group-initial-rebalance-delay", cfg.GroupInitialRebalanceDelay, "how long the first rebalance of an empty classic group waits for more members (group.initial.rebalance.delay.ms; negative: none)")
	fs.DurationVar(&cfg.GroupClassicMinSessionTimeout, "group-classic-min-session-timeout", cfg.GroupClassicMinSessionTimeout, "smallest session timeout a classic group member (JoinGroup) may ask for (group.min.session.timeout.ms)")
	fs.DurationVar(&cfg.GroupClassicMaxSessionTimeout, "group-classic-max-session-timeout", cfg.GroupClassicMaxSessionTimeout, "largest session timeout a classic group member may ask for (group.max.session.timeout.ms)")
	fs.IntVar(&cfg.GroupMaxSize, "group-max-size", cfg.GroupMaxSize, "most members of a classic group (group.max.size; 0: unlimited)")
	fs.DurationVar(&cfg.OffsetsRetention, "offsets-retention", cfg.OffsetsRetention, "the committed offsets of a group empty this long are deleted (offsets.retention.ms)")
	fs.DurationVar(&cfg.ControlledShutdownTimeout, "controlled-shutdown-timeout", cfg.ControlledShutdownTimeout, "how long a stopping broker waits for its leaderships to move")
	logLevel := &choiceValue{value: "info", want: "one of debug, info, warn, error", check: func(s string) error {
		var l slog.Level
		return l.UnmarshalText([]byte(s))
	}}
	fs.Var(logLevel, "log-level", "debug, info, warn or error")
	logFormat := &choiceValue{value: "text", want: "text or json", check: func(s string) error {
		if s != "text" && s != "json" {
			return errors.New("not a log format")
		}
		return nil
	}}
	fs.Var(logFormat, "log-format", "text or json (one JSON object per line, for log collectors)")
	deploy := addDeployFlags(fs)
	fs.String("config", "", "YAML file of settings: flag names as keys (flags and SLUICE_* variables win over it)")
	printCfg := fs.Bool("print-config", false, "print the effective settings and where each came from (default, file, env, flag), then exit")
	wrapSettings(fs)
	// configure reports errors itself, and -h prints the usage (below),
	// not the flag package.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	// The file fills flags first, then the environment; the command line
	// overrides both.
	origins := map[string]origin{}
	where := func(name string) string { return origins[name].where(name) }
	if path := configFileArg(args, lookupEnv); path != "" {
		if err := applyConfigFile(fs, path, origins); err != nil {
			return node.Config{}, err
		}
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := lookupEnv(envName(f.Name)); ok && envErr == nil {
			origins[f.Name] = origin{source: sourceEnv}
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s: %w", where(f.Name), err)
			}
		}
	})
	if envErr != nil {
		return node.Config{}, envErr
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(usageOut, fs)
			return node.Config{}, err
		}
		if refused := refusedFlag(fs); refused != nil {
			return node.Config{}, refused
		}
		return node.Config{}, fmt.Errorf("%w (sluiced -h lists the flags)", err)
	}
	fs.Visit(func(f *flag.Flag) { origins[f.Name] = origin{source: sourceFlag} })
	if fs.NArg() > 0 {
		return node.Config{}, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	for _, f := range []struct {
		name string
		v    int
		to   *int32
	}{{"default-replication-factor", *defaultRF, &cfg.DefaultReplicationFactor}, {"default-min-insync-replicas", *defaultMinISR, &cfg.DefaultMinInsyncReplicas}} {
		if f.v < 1 || f.v > math.MaxInt32 {
			return node.Config{}, fmt.Errorf("--%s must be >= 1, got %d", f.name, f.v)
		}
		*f.to = int32(f.v)
	}
	if err := deploy.apply(&cfg, where); err != nil {
		return node.Config{}, err
	}
	if deploy.nodeIDFromName != "" {
		// --print-config shows the node id in use, and where it came from.
		origins["node-id"] = origins["node-id-from-name"]
	}
	cfg.Roles = node.ParseList(*roles)
	cfg.Join = node.ParseList(*join)
	for _, u := range strings.Split(*supers, ";") {
		if u = strings.TrimSpace(u); u != "" {
			cfg.SuperUsers = append(cfg.SuperUsers, u)
		}
	}
	var err error
	if cfg.ControllerVoters, err = node.ParseVoters(*voters); err != nil {
		return node.Config{}, fmt.Errorf("%s: %w", where("controller-voters"), err)
	}
	if err := testFlags.apply(&cfg, where); err != nil {
		return node.Config{}, err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(logLevel.value)) // checked by its Set
	opts := &slog.HandlerOptions{Level: level}
	if logFormat.value == "json" {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, opts))
	} else {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	// Every record names the node (with several nodes' logs in one place,
	// as in a log collector, it says whose it is).
	cfg.Logger = cfg.Logger.With("node", cfg.NodeID)
	deriveUnsetConnectionLimits(&cfg, func(name string) bool { _, ok := origins[name]; return ok })
	// Zero stands for a default in some settings: cfg (and so the flags,
	// which point into it, and --print-config) shows the value in use.
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return node.Config{}, err
	}
	if *printCfg {
		printConfig(configOut, fs, origins)
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
	// A second signal stops at once. Not in a goroutine.Group: the process
	// has no owner above run, and the goroutine ends at the second signal,
	// at the shutdown's deadline or when run returns (the deferred cancel).
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	return n.Shutdown(ctx)
}
