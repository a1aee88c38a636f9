// Package chaos runs a real Sluice cluster (sluiced processes on loopback,
// each inter-node link through a fault-injecting proxy), injects faults on
// a seeded schedule while idempotent producers and tailing consumers run,
// records their history, and judges it with package checker.
//
// See docs/chaos.md for how to run it and what it checks.
package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-io/sluice/chaos/checker"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/proccluster"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Config is one chaos run.
type Config struct {
	// Sluiced is the sluiced binary; empty builds the binaries of the
	// module at ModuleRoot ("": found from the working directory) into
	// Dir (proccluster.Build).
	Sluiced    string
	ModuleRoot string
	Dir        string // run directory (data dirs and node logs); must exist
	Nodes      int    // 3 or 5
	Seed       uint64
	// Duration is how long faults are injected; the run takes longer
	// (start, settle, final read, replica check).
	Duration time.Duration
	// Script: see ScheduleConfig.Script. Empty: random faults.
	Script []string
	// Methods: see ScheduleConfig.Methods.
	Methods                            []string
	FaultMin, FaultMax, GapMin, GapMax time.Duration
	Workload                           WorkloadConfig
	// SessionTimeout and ReplicaLagTimeMax are the nodes' broker session
	// and ISR lag timeouts (Pause lasts longer than both).
	SessionTimeout, ReplicaLagTimeMax time.Duration
	// Security secures the cluster (TLS, SCRAM; security.go): the run
	// makes its PKI in Dir/pki, and every client of the harness uses it.
	Security Security
	// Out receives the progress log and the summary.
	Out io.Writer
}

// pauseMargin is how much longer than the session and lag timeouts a
// Pause lasts. The fence of a paused node needs a controller quorum, and
// every node is a voter: when another voter has just come back from a
// partition or a restart, hashicorp/raft's leader may still be backing
// off before replicating to it again (exponential, about 2.5 s after a
// 3 s partition), and the fence commits only once it does. Seen in CI: a
// 4 s pause right after such a fault left the node in every ISR.
const pauseMargin = 3 * time.Second

// DefaultConfig is the short profile: 3 nodes, faults of every kind, the
// gRPC workloads and the Kafka-client one beside them.
func DefaultConfig() Config {
	return Config{
		Nodes: 3, Seed: 1, Duration: 90 * time.Second,
		FaultMin: 3 * time.Second, FaultMax: 6 * time.Second,
		GapMin: 2 * time.Second, GapMax: 4 * time.Second,
		Workload: WorkloadConfig{Topic: "chaos", Partitions: 3, Producers: 1, Consumers: 2, Keys: 32, Rate: 200,
			RequestTimeout: 2 * time.Second, DeliveryTimeout: 30 * time.Second,
			TxnProducers: 3, TxnTopics: 2, TxnTimeout: 10 * time.Second, TxnRate: 10, UncommittedConsumers: 1,
			Copier: true, CopierMembers: 3,
			KafkaTxnProducers: 2, KafkaConsumers: 1, KafkaCopierMembers: 2, KafkaGroupProtocol: DefaultGroupProtocol},
		SessionTimeout: 2 * time.Second, ReplicaLagTimeMax: 3 * time.Second,
		Out: os.Stdout,
	}
}

// Applied is a fault as it happened.
type Applied struct {
	Fault Fault
	Node  int32
	Err   string // why it was not injected, if it was not
	// State is the cluster as seen just before the heal (controller,
	// partition leaders and ISRs), Observed whether that metadata could be
	// read; OutOfISR says whether Node was in no partition's ISR then or
	// in any sample taken while the fault lasted.
	State              string
	Observed, OutOfISR bool
	// PhaseTxn is, for a phase kind, the transaction whose phase the kill
	// followed ("" when none reached it in time: a plain kill).
	PhaseTxn string
}

// Result is what a run found.
type Result struct {
	Seed     uint64
	Schedule []Fault
	Applied  []Applied
	Report   checker.Report
	Ops      int // writes invoked + records read
	Faults   int // faults injected
	// Transactions by outcome (open ones count as unknown).
	TxnsCommitted, TxnsAborted, TxnsUnknown int
	// Fences lists transactional producers told they were fenced although
	// no newer producer of their id ran (producer, time, error).
	Fences []string
	// Zombies counts copier members stopped (SIGSTOP) or frozen (in
	// process) past their transaction and session timeouts, then resumed.
	Zombies int
	// KafkaCrashes and KafkaZombies count the Kafka copier's members
	// crashed in a transaction and frozen into zombies.
	KafkaCrashes, KafkaZombies int
	// RdkInstances, RdkKills and RdkTerms count the librdkafka copier's
	// processes started, SIGKILLed and restarted with SIGTERM; RdkTxns
	// and RdkCopies its transactions reported committed and the copies
	// in them.
	RdkInstances, RdkKills, RdkTerms, RdkTxns, RdkCopies int
	// RdkJudged, RdkAbove and RdkBad are its input records judged below
	// and above the group's final offsets and those not copied so.
	RdkJudged, RdkAbove, RdkBad int
	// Kafka is what went through the Kafka door (zero without the Kafka
	// workload).
	Kafka KafkaCounts
	// Security is what the nodes' TLS and authentication counted, in a
	// secured run (nil otherwise), summed over the nodes that answered.
	Security *SecurityCounts
	// ACL marks a tls+scram+acl run; Denials are its authorization
	// denials (the more of the nodes' counters and their logs' lines):
	// any fails the run.
	ACL         bool
	Denials     int
	denialLines []string
}

// OK reports whether the run passed: no anomaly, and no authorization
// denial in a tls+scram+acl run.
func (r Result) OK() bool { return r.Report.OK() && r.Denials == 0 }

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// txnAbortScan is the nodes' --transaction-abort-timed-out-interval;
// lsoMargin is how much longer than the transaction timeout plus that scan
// the LSO may lag after the heal (markers to write, leaders to elect).
const (
	txnAbortScan = time.Second
	lsoMargin    = 10 * time.Second
)

// SummaryLine is the run's last line.
func (r Result) SummaryLine() string {
	if r.ACL {
		return fmt.Sprintf("chaos: %d ops, %d faults, %d anomalies, %d authorization denials, seed %d", r.Ops, r.Faults, r.Report.Anomalies(), r.Denials, r.Seed)
	}
	return fmt.Sprintf("chaos: %d ops, %d faults, %d anomalies, seed %d", r.Ops, r.Faults, r.Report.Anomalies(), r.Seed)
}

type runner struct {
	cfg     Config
	log     *slog.Logger
	cluster *Cluster
	admin   *client.Client
	// nodeAdmins talk to one node each (by id): the fault sampler asks the
	// nodes other than the faulted one, so that a paused node cannot make
	// every sample time out.
	nodeAdmins map[int32]sluicev1.AdminClient
	// pki is a secured run's certificates (nil: plaintext).
	pki *pki
	rec *recorder
	// phases is the workload's phase hook (phase kinds wait on it).
	phases *phaseHook
}

// Run runs cfg. The error is for a run that could not be carried out
// (cluster did not start, topic not created); anomalies are in the
// Result's Report.
func Run(cfg Config) (Result, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Nodes < 3 {
		return Result{}, errors.New("chaos: at least 3 nodes (replication factor 3)")
	}
	if cfg.Workload.KafkaCopierMembers > 0 && cfg.Workload.KafkaTxnProducers == 0 {
		return Result{}, errors.New("chaos: the Kafka copier copies the Kafka transactional producers' topic: it needs --kafka-txn-producers > 0")
	}
	wc, err := prepareRdk(cfg.Workload)
	if err != nil {
		return Result{}, err
	}
	wc.KafkaGroupProtocol = ResolveGroupProtocol(wc.KafkaGroupProtocol, cfg.Seed)
	cfg.Workload = wc
	r := &runner{cfg: cfg, rec: &recorder{},
		log: slog.New(slog.NewTextHandler(cfg.Out, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	res := Result{Seed: cfg.Seed, ACL: cfg.Security.acl()}
	res.Schedule = NewSchedule(ScheduleConfig{Seed: cfg.Seed, Duration: cfg.Duration, Partitions: cfg.Workload.Partitions,
		Script: cfg.Script, FaultMin: cfg.FaultMin, FaultMax: cfg.FaultMax, GapMin: cfg.GapMin, GapMax: cfg.GapMax,
		Methods: cfg.Methods, RequestTimeout: cfg.Workload.RequestTimeout, Transactions: cfg.Workload.TxnProducers > 0,
		MinPause: max(cfg.SessionTimeout, cfg.ReplicaLagTimeMax) + pauseMargin})
	fmt.Fprintf(cfg.Out, "chaos: seed %d, %d nodes, %v of faults, security %s, run directory %s\nchaos: schedule (%d faults):\n",
		cfg.Seed, cfg.Nodes, cfg.Duration, cfg.Security, cfg.Dir, len(res.Schedule))
	for _, f := range res.Schedule {
		fmt.Fprintf(cfg.Out, "  %s\n", f)
	}
	if cfg.Sluiced == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		bins, err := proccluster.Build(ctx, cfg.ModuleRoot, cfg.Dir)
		cancel()
		if err != nil {
			return res, err
		}
		cfg.Sluiced = bins.Sluiced
		r.cfg.Sluiced = bins.Sluiced
	}
	extra := []string{
		"--broker-session-timeout", cfg.SessionTimeout.String(),
		"--replica-lag-time-max", cfg.ReplicaLagTimeMax.String(),
		// Transactions left open by a killed or fenced producer are
		// aborted within a second of their timeout, not ten.
		"--transaction-abort-timed-out-interval", txnAbortScan.String(),
		// KIP-848 members (the Kafka copier's franz-go clients) do not
		// choose their session timeout: the group's default is theirs, so
		// that a crashed member's partitions move as quickly as a gRPC
		// copier member's.
		"--group-session-timeout", copierSessionTimeout.String(),
		// Classic members (the Kafka copier's by default) choose theirs:
		// the same 3 s, below Kafka's group.min.session.timeout.ms of 6 s.
		"--group-classic-min-session-timeout", time.Second.String(),
	}
	var nodeExtra func(int32) []string
	if cfg.Security.tls() {
		ids := make([]int32, cfg.Nodes)
		for i := range ids {
			ids[i] = int32(i + 1)
		}
		p, err := newPKI(cfg.Dir, cfg.Security, ids)
		if err != nil {
			return res, fmt.Errorf("chaos: certificates: %w", err)
		}
		r.pki = p
		extra, nodeExtra = append(extra, p.args()...), p.nodeArgs
		cfg.Workload.Security = p.clientSecurity()
		r.cfg.Workload.Security = cfg.Workload.Security
	}
	c, err := NewCluster(ClusterConfig{Sluiced: cfg.Sluiced, Nodes: cfg.Nodes, Dir: cfg.Dir, Extra: extra, NodeExtra: nodeExtra,
		OnExit: func(n *proccluster.Node, err error) {
			r.log.Error("node exited without a fault killing it", "node", n.ID, "err", err)
		}})
	if err != nil {
		return res, err
	}
	r.cluster = c
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	err = c.Start(ctx)
	cancel()
	if err != nil {
		return res, err
	}
	if err := r.createUsers(); err != nil {
		return res, err
	}
	if cfg.Security.acl() {
		// The harness's admin calls (topic creation, metadata, watermarks,
		// coordinators) as chaos-admin, the super user: User:chaos gets
		// only what the workload needs.
		tc, err := r.pki.adminTLS()
		if err != nil {
			return res, err
		}
		r.admin, err = client.New(c.Addrs(), client.WithTLS(tc), client.WithRequestTimeout(3*time.Second))
		if err != nil {
			return res, err
		}
	} else if r.admin, err = cfg.Workload.newClient(c.Addrs(), client.WithRequestTimeout(3*time.Second)); err != nil {
		return res, err
	}
	defer r.admin.Close()
	// Plain gRPC connections, one per node: the client's retry policy
	// would try the brokers of its last metadata first, whichever node a
	// client was created for. In a secured run they are TLS, and with
	// SCRAM present the harness's client certificate instead (no session
	// to renew after a node's restart).
	creds := insecure.NewCredentials()
	if r.pki != nil {
		tc, err := r.pki.adminTLS()
		if err != nil {
			return res, err
		}
		creds = credentials.NewTLS(tc)
	}
	r.nodeAdmins = map[int32]sluicev1.AdminClient{}
	for _, id := range c.IDs() {
		cc, err := grpc.NewClient(c.Addrs(id)[0], grpc.WithTransportCredentials(creds))
		if err != nil {
			return res, err
		}
		defer cc.Close()
		r.nodeAdmins[id] = sluicev1.NewAdminClient(cc)
	}
	if cfg.Security.acl() {
		if err := r.createAcls(); err != nil {
			return res, err
		}
	}
	if err := r.createTopic(); err != nil {
		return res, err
	}
	if cfg.Security.acl() {
		if err := r.checkAuthorizing(); err != nil {
			return res, err
		}
	}
	stopSampling := r.sampleWatermarks()
	defer stopSampling()
	w, err := startWorkload(cfg.Workload, c.Addrs(), c.KafkaAddrs(), r.rec, r.log)
	if err != nil {
		return res, err
	}
	defer w.stop()
	r.phases = w.phases
	start := time.Now()
	r.log.Info("workload started", "producers", cfg.Workload.Producers, "consumers", cfg.Workload.Consumers, "rate", cfg.Workload.Rate)

	for _, f := range res.Schedule {
		if d := time.Until(start.Add(f.At)); d > 0 {
			time.Sleep(d) // the schedule's clock
		}
		a := r.runFault(f)
		res.Applied = append(res.Applied, a)
		if a.Err == "" {
			res.Faults++
		}
	}
	if d := time.Until(start.Add(cfg.Duration)); d > 0 {
		time.Sleep(d)
	}
	acked, writes, reads := r.rec.counts()
	r.log.Info("faults over: healing", "writes", writes, "acked", acked, "reads", reads)

	// Settle: every node up and ready, producers flushed, every replica
	// back in the ISR.
	if err := r.healAll(); err != nil {
		return res, err
	}
	healedAt := time.Now()
	w.stopProducing()
	if err := r.waitISRFull(90 * time.Second); err != nil {
		r.log.Error("replicas did not all rejoin the ISR", "err", err)
	}
	// Producers are flushed when their goroutines end; wait for that
	// through the recorder (all writes completed) within the delivery
	// timeout.
	r.waitWritesComplete(cfg.Workload.DeliveryTimeout + 10*time.Second)
	w.inputComplete()
	lsoBound := cfg.Workload.TxnTimeout + txnAbortScan + lsoMargin
	if cfg.Workload.TxnProducers > 0 {
		// Every transaction open at the heal must be over (committed,
		// aborted, or aborted on its timeout) within lsoBound; the LSO
		// samples must reach that far for the stuck-LSO check to judge them.
		r.waitLSO(healedAt.Add(lsoBound + 2*stateSampleInterval))
	}
	if cfg.Workload.Copier {
		select {
		case <-w.copierDone:
		case <-time.After(cfg.Workload.DeliveryTimeout + 90*time.Second):
			r.log.Error("copier still running")
		}
	}
	if cfg.Workload.kafkaCopier() {
		select {
		case <-w.kafkaCopierDone:
		case <-time.After(cfg.Workload.DeliveryTimeout + 90*time.Second):
			r.log.Error("kafka copier still running")
		}
	}
	if cfg.Workload.rdkCopier() {
		select {
		case <-w.rdkDone:
		case <-time.After(cfg.Workload.DeliveryTimeout + 90*time.Second):
			r.log.Error("librdkafka copier still running")
		}
	}
	if err := readAll(c.Addrs(), cfg.Workload, "final", 60*time.Second, r.rec); err != nil {
		r.log.Error("final read incomplete", "err", err)
	}
	if cfg.Workload.rdkCopier() {
		res.RdkTxns, res.RdkCopies = w.recordRdkCopies()
	}
	var copier *checker.Copier
	if cfg.Workload.Copier || cfg.Workload.kafkaCopier() || cfg.Workload.rdkCopier() {
		copier, err = r.copierEnds()
		if err != nil {
			r.log.Error("copier positions could not be read: copier not checked", "err", err)
		}
	}
	w.stop()
	stopSampling()
	if r.pki != nil {
		sc, err := r.securityCounts()
		if err != nil {
			r.log.Warn("security counters not read from every node", "err", err)
		}
		if sc.ACL {
			var lines []string
			lines, sc.DeniedLogLines = r.denialLines(10)
			res.Denials = max(sc.DeniedLogLines, sumCounts(sc.Denials))
			res.denialLines = lines
		}
		res.Security = &sc
	}
	c.Stop(30 * time.Second)
	h := r.rec.history()
	if cfg.Workload.TxnProducers == 0 {
		h.Watermarks = nil // nothing to judge: no transaction holds the LSO back
	}
	h.HealedAt, h.LSOBound, h.Copier = healedAt, lsoBound, copier
	// A replica that cannot be read is not a passed check: the run
	// reports what it could judge and then fails as not carried out.
	h.Replicas, err = readReplicas(c, cfg.Workload)
	replicaErr := err
	res.Report = checker.Check(h)
	res.Ops = len(h.Writes) + len(h.Reads)
	fmt.Fprintf(cfg.Out, "chaos: history: %s\n", res.Report.Stats)
	if cfg.Workload.TxnProducers > 0 {
		res.TxnsCommitted, res.TxnsAborted, res.TxnsUnknown = r.rec.txnCounts()
		fmt.Fprintf(cfg.Out, "chaos: transactions: %d committed, %d aborted, %d unknown; %d watermark samples\n",
			res.TxnsCommitted, res.TxnsAborted, res.TxnsUnknown, len(h.Watermarks))
		r.rec.mu.Lock()
		res.Fences = slices.Clone(r.rec.fences)
		r.rec.mu.Unlock()
		if len(res.Fences) > 0 {
			// Not a checker class (nothing read is wrong): an availability
			// finding, to be explained from the node logs (recorder.fence).
			fmt.Fprintf(cfg.Out, "chaos: %d transactional producers fenced though no newer producer of their id ran (a timeout abort, or a stale coordinator):\n", len(res.Fences))
			for _, f := range res.Fences[:min(5, len(res.Fences))] {
				fmt.Fprintf(cfg.Out, "  %s\n", f)
			}
		}
	}
	res.Zombies = int(w.memberPauses.Load())
	res.KafkaCrashes, res.KafkaZombies = int(w.kafkaCrashes.Load()), int(w.kafkaZombies.Load())
	if cfg.Workload.kafkaOn() {
		res.Kafka = kafkaCounts(h)
		fmt.Fprintf(cfg.Out, "chaos: through the Kafka door: %s\n", res.Kafka)
		if cfg.Workload.kafkaCopier() && res.Kafka.CopiesCommitted == 0 {
			// The copier check passes vacuously: say so (a group protocol
			// the door does not serve, e.g. classic before JoinGroup).
			fmt.Fprintf(cfg.Out, "chaos: WARNING: the Kafka copier committed no copy (group protocol %s): its output was not really checked\n",
				cfg.Workload.KafkaGroupProtocol)
		}
	}
	if cfg.Workload.kafkaCopier() {
		fmt.Fprintf(cfg.Out, "chaos: kafka copier members (%s group protocol): %d crashed in a transaction, %d frozen past their transaction and session timeouts (zombies)\n",
			cfg.Workload.KafkaGroupProtocol, res.KafkaCrashes, res.KafkaZombies)
	}
	if cfg.Workload.rdkCopier() {
		w.rdk.mu.Lock()
		res.RdkInstances, res.RdkKills, res.RdkTerms = w.rdk.instances, w.rdk.kills, w.rdk.terms
		w.rdk.mu.Unlock()
		fmt.Fprintf(cfg.Out, "chaos: librdkafka copiers (txn_copier.py, %d slots): %d processes, %d SIGKILLed, %d restarted with SIGTERM; %d transactions reported committed, %d records copied in them\n",
			cfg.Workload.RdkCopiers, res.RdkInstances, res.RdkKills, res.RdkTerms, res.RdkTxns, res.RdkCopies)
		if h.Copier != nil {
			res.RdkJudged, res.RdkAbove, res.RdkBad = rdkTally(cfg.Workload, h, h.Copier.Ends)
			fmt.Fprintf(cfg.Out, "chaos: librdkafka copier's input: %d records below the group's final offsets judged (exactly one copy each), %d above (none); %d of them not copied so (counted in copy-not-exactly-once)\n",
				res.RdkJudged, res.RdkAbove, res.RdkBad)
		}
		if res.RdkCopies == 0 {
			fmt.Fprintf(cfg.Out, "chaos: WARNING: the librdkafka copier reported no committed copy: its output was not really checked\n")
		}
	}
	if k, z := w.memberKills.Load(), w.memberPauses.Load(); k+z > 0 {
		if cfg.Workload.CopierInProcess {
			fmt.Fprintf(cfg.Out, "chaos: copier members (in process): %d frozen past their transaction and session timeouts (zombies)\n", z)
		} else {
			fmt.Fprintf(cfg.Out, "chaos: copier member processes: %d SIGKILLed, %d SIGSTOPped past their transaction and session timeouts (zombies)\n", k, z)
		}
	}
	if res.Security != nil {
		fmt.Fprintf(cfg.Out, "chaos: security %s (counters since each node's last start): %s\n", cfg.Security, res.Security)
		for _, l := range r.refusalLines(10) {
			fmt.Fprintf(cfg.Out, "  %s\n", l)
		}
		if res.Denials > 0 {
			fmt.Fprintf(cfg.Out, "chaos: AUTHORIZATION DENIED %d times: the workload's ACLs are not sufficient (run fails); first denials:\n", res.Denials)
			for _, l := range res.denialLines {
				fmt.Fprintf(cfg.Out, "  %s\n", l)
			}
		}
	}
	if e := topErrors(h.Writes, 3); e != "" {
		fmt.Fprintf(cfg.Out, "chaos: writes without an acknowledgement, by error: %s\n", e)
	}
	if e := inFlightByProducer(h.Writes, 5); e != "" {
		fmt.Fprintf(cfg.Out, "chaos: writes still in flight at the end (unknown), by producer: %s\n", e)
	}
	for _, l := range res.Report.Summary() {
		fmt.Fprintf(cfg.Out, "chaos: %s\n", l)
	}
	for _, n := range res.Report.Notes {
		fmt.Fprintf(cfg.Out, "chaos: note: %s\n", n)
	}
	if !res.Report.OK() {
		fmt.Fprintf(cfg.Out, "chaos: ANOMALIES FOUND with seed %d; faults as applied:\n", cfg.Seed)
		for _, a := range res.Applied {
			fmt.Fprintf(cfg.Out, "  %s on node %d %s\n", a.Fault, a.Node, a.Err)
		}
		fmt.Fprintf(cfg.Out, "chaos: node logs in %s\n", cfg.Dir)
		writeDuplicateTrail(cfg.Out, c, cfg.Workload, h)
	}
	fmt.Fprintln(cfg.Out, res.SummaryLine())
	if replicaErr != nil {
		return res, fmt.Errorf("chaos: replicas could not be read, so they were not compared: %w", replicaErr)
	}
	return res, nil
}

// topErrors counts the writes that were not acknowledged by error message
// (numbers blanked, so that one cause is one line) and returns the n most
// frequent.
func topErrors(ws []checker.Write, n int) string {
	counts := map[string]int{}
	for _, w := range ws {
		if w.Outcome == checker.OK && !w.Complete.IsZero() {
			continue
		}
		msg := w.Err
		if w.Complete.IsZero() {
			msg = "still in flight at the end"
		}
		counts[digits.ReplaceAllString(msg, "N")]++
	}
	keys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	var parts []string
	for _, k := range keys[:min(n, len(keys))] {
		parts = append(parts, fmt.Sprintf("%d × %q", counts[k], k))
	}
	return strings.Join(parts, "; ")
}

var digits = regexp.MustCompile(`[0-9]+`)

// inFlightByProducer counts the writes that never completed by producer
// (a copier member SIGKILLed with a transaction open leaves its writes so)
// and returns the n producers with most.
func inFlightByProducer(ws []checker.Write, n int) string {
	counts := map[string]int{}
	for _, w := range ws {
		if w.Complete.IsZero() {
			counts[w.Producer]++
		}
	}
	keys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	var parts []string
	for _, k := range keys[:min(n, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	if len(keys) > n {
		parts = append(parts, fmt.Sprintf("(%d producers in all)", len(keys)))
	}
	return strings.Join(parts, " ")
}

// runFault resolves, injects, holds and heals one fault.
func (r *runner) runFault(f Fault) Applied {
	a := Applied{Fault: f}
	var id int32
	var err error
	if f.Kind.phase() != "" {
		// Wait for a transaction to reach the phase; without one in
		// phaseWait, a plain kill of the kind's target.
		var ev PhaseEvent
		var ok bool
		if id, ev, ok = r.phaseTarget(f); ok {
			a.PhaseTxn = ev.Txn
			r.log.Info("phase reached", "what", f.Kind, "txn", ev.Txn, "transactional_id", ev.TransactionalID,
				"committed", ev.Committed, "partitions", ev.Partitions, "node", id)
		} else {
			r.log.Warn("no transaction reached the phase in time: plain kill", "what", f.Kind, "waited", phaseWait)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			id, err = r.resolve(ctx, f)
			cancel()
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		id, err = r.resolve(ctx, f)
		cancel()
	}
	if err != nil {
		// The cluster cannot say (e.g. no leader right now): hit a node
		// chosen by the seed instead, so the fault still happens.
		r.log.Warn("target not resolved, using a node picked by the seed", "fault", f.String(), "err", err)
		ids := r.cluster.IDs()
		id = ids[f.Pick%uint64(len(ids))]
	}
	a.Node = id
	heal, err := r.inject(f, id) // first: a phase kill follows its event at once
	r.log.Info("fault", "what", f.String(), "node", id)
	if err != nil {
		a.Err = err.Error()
		r.log.Error("fault not injected", "what", f.String(), "err", err)
		return a
	}
	// The fault lasts f.Duration. Meanwhile the cluster is sampled: a
	// node that leaves every ISR at any moment of the fault counts as
	// out, even if a sample at the very end would miss it.
	grace := time.Duration(0)
	if f.Kind == Kill || f.Kind == Pause || f.Kind == Partition {
		// Only these are asserted to bite; a phase kill is about its
		// moment, and holding it would lengthen the short profile.
		grace = biteGrace
	}
	a.OutOfISR = r.sampleOutOfISR(id, time.Now().Add(f.Duration), grace)
	var out bool
	a.State, a.Observed, out = r.state(id)
	a.OutOfISR = a.OutOfISR || out
	r.log.Info("before heal", "state", a.State, "node_out_of_isr", a.OutOfISR)
	if err := heal(); err != nil {
		r.log.Error("heal", "what", f.String(), "err", err)
	}
	if f.Kind.kills() || f.Kind == KillTwo {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		for _, n := range r.cluster.Nodes {
			if err := r.cluster.WaitReady(ctx, n.ID); err != nil {
				r.log.Error("restarted node not ready", "node", n.ID, "err", err)
			}
		}
		cancel()
	}
	r.log.Info("healed", "what", f.Kind, "node", id)
	return a
}

// biteGrace is how much longer a fault that must take its node out of
// every ISR (kill, pause, partition) is held when that has not been seen
// by its planned end. On a loaded machine (a CI run beside other test
// binaries) the fence of a stopped node can take longer than the timeouts
// the planned length covers: the active controller's session loop and
// its Raft commit are starved too. Holding the fault until the effect is
// seen waits on the condition that matters instead of on the clock; a
// fault that has not bitten after the grace either is reported (the
// short profile's check).
const biteGrace = 20 * time.Second

// sampleOutOfISR sleeps until end while sampling the cluster's state
// in the background (every stateSampleInterval), and reports whether
// node was seen in no partition's ISR meanwhile. The fault's planned
// length does not depend on the samples: a sample still running at end
// is abandoned (it ends within its own timeouts). With grace > 0 and node
// not yet seen out of every ISR at end, the fault is held (sampling on)
// until it is, or until end+grace.
func (r *runner) sampleOutOfISR(node int32, end time.Time, grace time.Duration) bool {
	var seen atomic.Bool
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(stateSampleInterval)
		defer t.Stop()
		for !seen.Load() {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if _, observed, out := r.state(node); observed && out {
				seen.Store(true)
			}
		}
	}()
	time.Sleep(time.Until(end)) // the fault lasts this long
	if !seen.Load() && grace > 0 {
		r.log.Info("fault held: its node is still in an ISR", "node", node, "up_to", grace)
		for limit := end.Add(grace); !seen.Load() && time.Now().Before(limit); {
			time.Sleep(stateSampleInterval / 5)
		}
	}
	close(stop)
	return seen.Load()
}

// stateSampleInterval is how often a fault's effect is sampled.
const stateSampleInterval = 500 * time.Millisecond

// state describes the cluster as the admin client sees it: the active
// controller and each partition's leader and ISR, for the progress log
// (evidence that a fault had an effect). observed says whether the
// metadata could be read, outOfISR whether node was in no ISR.
func (r *runner) state(node int32) (desc string, observed, outOfISR bool) {
	// Ask every other node: a node's metadata can lag (its stream may
	// still hang on a cut-off controller), so the faulted node counts as
	// out of every ISR when any of them shows it so. The faulted node is
	// asked only when no other answers (paused or cut off, it would only
	// time out, or show its own stale view).
	var descs []string
	for _, id := range slices.Sorted(maps.Keys(r.nodeAdmins)) {
		if id == node {
			continue
		}
		d, obs, out := r.stateFrom(r.nodeAdmins[id], node)
		if !obs {
			continue
		}
		if !observed || out && !outOfISR {
			desc = d
		}
		descs = append(descs, d)
		observed, outOfISR = true, outOfISR || out
	}
	if observed {
		if len(descs) > 1 && !outOfISR {
			desc = strings.Join(descs, " | ")
		}
		return desc, observed, outOfISR
	}
	if a := r.nodeAdmins[node]; a != nil {
		return r.stateFrom(a, node)
	}
	return "controller=? metadata=?", false, false
}

// stateFrom is state as one node answers it.
func (r *runner) stateFrom(admin sluicev1.AdminClient, node int32) (desc string, observed, outOfISR bool) {
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	d, err := admin.DescribeCluster(ctx, &sluicev1.DescribeClusterRequest{})
	cancel()
	if err == nil {
		fmt.Fprintf(&b, "node%d:controller=%d", d.GetNodeId(), d.GetControllerLeader())
	} else {
		b.WriteString("controller=?")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	md, err := admin.Metadata(ctx, &sluicev1.MetadataRequest{Topics: []string{r.cfg.Workload.Topic}})
	cancel()
	if err != nil {
		return b.String() + " metadata=?", false, false
	}
	outOfISR = true
	for _, t := range md.GetTopics() {
		for _, p := range t.GetPartitions() {
			fmt.Fprintf(&b, " p%d:leader=%d,isr=%v", p.GetPartition(), p.GetLeaderId(), p.GetIsr())
			if slices.Contains(p.GetIsr(), node) {
				outOfISR = false
			}
		}
	}
	return b.String(), true, outOfISR
}

// healAll makes sure no fault is left: links restored, every node
// running, resumed and ready, no response rules.
func (r *runner) healAll() error {
	c := r.cluster
	for _, l := range c.links {
		l.Cut(false)
		l.SetLatency(0)
	}
	for _, n := range c.Nodes {
		if n.Paused() {
			_ = c.Resume(n.ID)
		}
		if !n.Running() {
			if err := c.Restart(n.ID); err != nil {
				return err
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		if err := c.WaitReady(ctx, n.ID); err != nil {
			return err
		}
		_ = putRules(n.HTTP, nil)
	}
	return nil
}

// createTopic creates the workload's topic (replication factor 3,
// min.insync.replicas 2) and waits for every replica in the ISR.
func (r *runner) createTopic() error {
	wc := r.cfg.Workload
	deadline := time.Now().Add(30 * time.Second)
	for _, topic := range wc.Topics() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := r.admin.CreateTopic(ctx, topic, wc.Partitions, 3, map[string]string{"min.insync.replicas": "2"})
			cancel()
			var e *errs.Error
			if err == nil || errors.As(err, &e) && e.Code == sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("chaos: create topic %s: %w", topic, err)
			}
			time.Sleep(200 * time.Millisecond) // retry pacing within the deadline
		}
	}
	return r.waitISRFull(30 * time.Second)
}

// waitISRFull waits until every partition of the topic has a leader and
// all its replicas in the ISR.
func (r *runner) waitISRFull(d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		last = r.isrFull()
		if last == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond) // poll interval within the deadline
	}
	return last
}

func (r *runner) isrFull() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	md, err := r.admin.Metadata(ctx, r.cfg.Workload.Topics()...)
	if err != nil {
		return err
	}
	n := 0
	for _, t := range md.GetTopics() {
		for _, p := range t.GetPartitions() {
			n++
			if p.GetLeaderId() <= 0 {
				return fmt.Errorf("%s partition %d has no leader", t.GetName(), p.GetPartition())
			}
			isr := slices.Clone(p.GetIsr())
			slices.Sort(isr)
			reps := slices.Clone(p.GetReplicas())
			slices.Sort(reps)
			if !slices.Equal(isr, reps) {
				return fmt.Errorf("%s partition %d: ISR %v of replicas %v", t.GetName(), p.GetPartition(), p.GetIsr(), p.GetReplicas())
			}
		}
	}
	if n != int(r.cfg.Workload.logs()) {
		return fmt.Errorf("%d of %d partitions in metadata", n, r.cfg.Workload.logs())
	}
	return nil
}

// waitWritesComplete waits until every invoked write has an outcome.
func (r *runner) waitWritesComplete(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		r.rec.mu.Lock()
		open := 0
		for i := range r.rec.writes {
			if r.rec.writes[i].Complete.IsZero() {
				open++
			}
		}
		r.rec.mu.Unlock()
		if open == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond) // poll interval within the deadline
	}
	r.log.Warn("writes still in flight after the delivery timeout; they count as unknown")
}

// sampleWatermarks samples every partition's high watermark and last
// stable offset into the history every stateSampleInterval, in the
// background, until the returned function is called (safe to call twice).
func (r *runner) sampleWatermarks() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(stateSampleInterval)
		defer t.Stop()
		wc := r.cfg.Workload
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			for p := int32(0); p < wc.logs(); p++ {
				topic, part := wc.topicPartition(p)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				hw, lso, err := r.admin.Watermarks(ctx, topic, part)
				cancel()
				if err == nil {
					r.rec.watermark(checker.Watermark{Partition: p, Time: time.Now(), HighWatermark: hw, LastStableOffset: lso})
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// waitLSO waits until until, logging each partition whose LSO is still
// behind its high watermark at the end (the checker judges it).
func (r *runner) waitLSO(until time.Time) {
	time.Sleep(time.Until(until)) // the samples must cover the bound
	r.rec.mu.Lock()
	last := map[int32]checker.Watermark{}
	for _, s := range r.rec.watermarks {
		last[s.Partition] = s
	}
	r.rec.mu.Unlock()
	for p, s := range last {
		if s.LastStableOffset < s.HighWatermark {
			r.log.Warn("LSO behind the high watermark after the bound", "partition", p, "lso", s.LastStableOffset, "hw", s.HighWatermark)
		}
	}
}

// copierEnds reads the copier's final committed positions (every input
// partition: 0 where it committed none).
func (r *runner) copierEnds() (*checker.Copier, error) {
	wc := r.cfg.Workload
	cl, err := wc.newClient(r.cluster.Addrs(), client.WithRequestTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pos map[int32]int64
	switch {
	case !wc.Copier:
	case wc.CopierMembers > 0:
		pos, err = groupCopierEnds(ctx, cl, wc)
	default:
		pos, err = copierPositions(ctx, cl, wc)
	}
	if err != nil {
		return nil, err
	}
	c := &checker.Copier{Ends: map[int32]int64{}}
	for p := int32(0); wc.Copier && p < wc.Partitions; p++ {
		c.Ends[wc.logOf(wc.Topic, p)] = pos[p]
	}
	ksec, err := wc.Security.kafka() // the Kafka copiers' groups are read as the workload's user, like the gRPC copier's
	if err != nil {
		return nil, err
	}
	if wc.rdkCopier() {
		// So are the librdkafka copier's (Topic-kafka-2).
		rpos, err := kafkaGroupOffsets(ctx, r.cluster.KafkaAddrs(), ksec, rdkCopierGroup, wc.rdkInput())
		if err != nil {
			return nil, err
		}
		for p := int32(0); p < wc.Partitions; p++ {
			c.Ends[wc.logOf(wc.rdkInput(), p)] = rpos[p]
		}
	}
	if wc.kafkaCopier() {
		// The Kafka copier's input partitions are its own: one Ends map
		// judges both copiers (a copy names its input value).
		kpos, err := kafkaGroupOffsets(ctx, r.cluster.KafkaAddrs(), ksec, kafkaCopierGroup, wc.kafkaCopierInput())
		if err != nil {
			return nil, err
		}
		for p := int32(0); p < wc.Partitions; p++ {
			c.Ends[wc.logOf(wc.kafkaCopierInput(), p)] = kpos[p]
		}
	}
	return c, nil
}
