// Command sluice-chaos runs the chaos harness (package chaos): a
// real Sluice cluster on loopback, faults on a seeded schedule, an
// idempotent-producer, transactional-producer and tailing-consumer
// workload (read_committed and read_uncommitted), the same through the
// nodes' Kafka listeners with franz-go (transactional producers, a
// read_committed consumer, a group copier), and a history check.
// It exits 1 when the checker finds an anomaly (seed and fault schedule
// printed) or, with --security tls+scram+acl, a request was denied; 2 when the run itself could not be carried out.
//
//	sluice-chaos --duration 10m --seed 42
//	sluice-chaos --faults kill:leader,partition:controller,pause
//	sluice-chaos --faults kill:coordinator,drop-responses:leader:WriteTxnMarkers
//	sluice-chaos --security tls+scram
//	sluice-chaos --security tls+scram+acl
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-io/sluice/chaos"
)

func main() {
	chaos.RunCopierMemberIfAsked() // a copier member process: runs and exits
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg := chaos.DefaultConfig()
	fs := flag.NewFlagSet("sluice-chaos", flag.ContinueOnError)
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long faults are injected (the run takes about 1 min longer)")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()%1_000_000), "schedule seed (printed; the same seed gives the same schedule)")
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "cluster size: 3 or 5")
	faults := fs.String("faults", "", fmt.Sprintf("scripted faults, cycled: kind[:target],... (kinds %v, targets %v); empty: random", chaos.Kinds, chaos.Targets))
	partitions := fs.Int("partitions", int(cfg.Workload.Partitions), "partitions of each workload topic")
	fs.IntVar(&cfg.Workload.Rate, "rate", cfg.Workload.Rate, "records per second per producer")
	fs.IntVar(&cfg.Workload.Producers, "producers", cfg.Workload.Producers, "idempotent producers")
	fs.IntVar(&cfg.Workload.Consumers, "consumers", cfg.Workload.Consumers, "tailing read_committed consumers")
	fs.IntVar(&cfg.Workload.UncommittedConsumers, "uncommitted-consumers", cfg.Workload.UncommittedConsumers, "tailing read_uncommitted consumers")
	fs.IntVar(&cfg.Workload.TxnProducers, "txn-producers", cfg.Workload.TxnProducers, "transactional producers (0: no transactions, one topic)")
	fs.IntVar(&cfg.Workload.TxnTopics, "txn-topics", cfg.Workload.TxnTopics, "topics the transactions span")
	fs.IntVar(&cfg.Workload.TxnRate, "txn-rate", cfg.Workload.TxnRate, "transactions per second per transactional producer")
	fs.DurationVar(&cfg.Workload.TxnTimeout, "txn-timeout", cfg.Workload.TxnTimeout, "transaction timeout of the transactional producers")
	fs.BoolVar(&cfg.Workload.Copier, "copier", cfg.Workload.Copier, "run the transactional copier (chaos → chaos-out)")
	fs.IntVar(&cfg.Workload.CopierMembers, "copier-members", cfg.Workload.CopierMembers, "copier members in one consumer group, offsets committed in their transactions (0: one copier with its positions in chaos-pos)")
	fs.BoolVar(&cfg.Workload.CopierInProcess, "copier-in-process", cfg.Workload.CopierInProcess, "run the copier members as goroutines simulating their crashes instead of processes killed with SIGKILL")
	fs.IntVar(&cfg.Workload.KafkaTxnProducers, "kafka-txn-producers", cfg.Workload.KafkaTxnProducers, "franz-go transactional producers through the nodes' Kafka listeners, on topics of their own (chaos-kafka, chaos-kafka-2, ...; 0: none)")
	fs.IntVar(&cfg.Workload.KafkaConsumers, "kafka-consumers", cfg.Workload.KafkaConsumers, "franz-go read_committed consumers tailing every workload topic through the Kafka listeners")
	fs.IntVar(&cfg.Workload.KafkaCopierMembers, "kafka-copier-members", cfg.Workload.KafkaCopierMembers, "franz-go GroupTransactSession members copying chaos-kafka to chaos-kafka-out exactly once, offsets in their transactions (0: no Kafka copier; needs --kafka-txn-producers)")
	fs.IntVar(&cfg.Workload.RdkCopiers, "kafka-rdk-copiers", cfg.Workload.RdkCopiers, "librdkafka transactional copiers (examples/kafka/python/txn_copier.py, classic group chaos-rdk) copying chaos-kafka-2 to chaos-rdk-out, SIGKILLed and restarted (0: none; needs --kafka-txn-producers and python3-confluent-kafka)")
	fs.StringVar(&cfg.Workload.RdkPython, "kafka-rdk-python", chaos.DefaultRdkPython, "the python with confluent_kafka that runs the librdkafka copiers")
	fs.StringVar(&cfg.Workload.RdkScript, "kafka-rdk-script", chaos.DefaultRdkScript, "txn_copier.py (relative: found from the working directory up)")
	groupProtocol := fs.String("kafka-group-protocol", string(cfg.Workload.KafkaGroupProtocol), "the Kafka copier's group protocol: consumer (KIP-848), classic (JoinGroup/SyncGroup), or seed (consumer for an even seed, classic for an odd one)")
	security := fs.String("security", "none", "secure the cluster: none, tls (TLS on the client, Kafka, internal and Raft listeners, mutual between nodes, gossip encrypted, HTTP plaintext; clients trust the run's CA) tls+scram (and --authentication required: the clients, Kafka clients included, authenticate with SCRAM) or tls+scram+acl (and --authorizer acl, User:chaos-admin, the harness, the only super user: the workload's SCRAM user gets exactly the ACLs it needs, and any authorization denial fails the run); certificates in the run directory's pki/")
	dir := fs.String("dir", "", "run directory for data and node logs (default: a new temporary directory, kept)")
	sluiced := fs.String("sluiced", "", "sluiced binary built with -tags sluicetest (default: built so from this module)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Seed, cfg.Sluiced = *seed, *sluiced
	if *partitions < 1 || *partitions > 64 {
		fmt.Fprintln(os.Stderr, "sluice-chaos: --partitions must be within [1, 64]")
		return 2
	}
	cfg.Workload.Partitions = int32(*partitions)
	gp, err := chaos.ParseGroupProtocol(*groupProtocol)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-chaos:", err)
		return 2
	}
	cfg.Workload.KafkaGroupProtocol = gp
	sec, err := chaos.ParseSecurity(*security)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-chaos:", err)
		return 2
	}
	cfg.Security = sec
	if cfg.Nodes != 3 && cfg.Nodes != 5 {
		fmt.Fprintln(os.Stderr, "sluice-chaos: --nodes must be 3 or 5")
		return 2
	}
	if *faults != "" {
		s, err := chaos.ParseScript(*faults)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sluice-chaos:", err)
			return 2
		}
		cfg.Script = s
	}
	cfg.Dir = *dir
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "sluice-chaos-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "sluice-chaos:", err)
			return 2
		}
		cfg.Dir = d
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-chaos:", err)
		return 2
	}
	if abs, err := filepath.Abs(cfg.Dir); err == nil {
		cfg.Dir = abs
	}
	res, err := chaos.Run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-chaos:", err)
		fmt.Fprintf(os.Stderr, "sluice-chaos: seed %d; node logs in %s\n", cfg.Seed, cfg.Dir)
		return 2
	}
	if !res.OK() {
		return 1 // an anomaly, or an authorization denial with --security tls+scram+acl
	}
	return 0
}
