package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sluice-io/sluice/internal/proccluster"
)

// Kind is a kind of fault.
type Kind string

// The fault kinds. Each lasts Fault.Duration and is then healed.
const (
	// Kill: SIGKILL the node; restart it when the fault ends.
	Kill Kind = "kill"
	// KillTwo: SIGKILL the node and one more (in a 3-node cluster a
	// majority: no controller quorum, no partition with 2 in-sync
	// replicas); restart both when the fault ends.
	KillTwo Kind = "kill-two"
	// Pause: SIGSTOP the node for longer than the broker session and
	// replica lag timeouts; SIGCONT when the fault ends.
	Pause Kind = "pause"
	// Partition: cut every link between the target (with one more node
	// in a 5-node cluster: a minority of two) and the rest, both ways.
	Partition Kind = "partition"
	// PartitionPair: cut only the links between the target and one other
	// node; both still reach the rest (a non-transitive partition).
	PartitionPair Kind = "partition-pair"
	// Latency: add Fault.Latency to every link to and from the target.
	Latency Kind = "latency"
	// DropResponses: the target runs Fault.Method requests but loses
	// Fault.Probability of their responses (applied, answer lost).
	DropResponses Kind = "drop-responses"
	// DelayResponses: the target answers Fault.Method requests only after
	// Fault.Latency (applied, answer late: the client times out and
	// retries).
	DelayResponses Kind = "delay-responses"
	// DelayRequests: the target holds each Fault.Method request for
	// Fault.Latency BEFORE running it, longer than the fault and the
	// client's request timeout together, and then runs it: a request that
	// lands after its client gave up, retried it elsewhere or later, and
	// went on to its next transaction (KAFKA-17754). Whatever such a late
	// request changes is judged by the checker.
	DelayRequests Kind = "delay-requests"
	// KillCoordinatorOngoing: once a workload transaction's first record
	// is acknowledged, SIGKILL the coordinator of its transactional id
	// (phases.go); restart it when the fault ends.
	KillCoordinatorOngoing Kind = "kill:coordinator@ongoing"
	// KillCoordinatorPrepare: when a workload producer sends EndTxn
	// (commit or abort), before its answer, SIGKILL the coordinator of its
	// transactional id.
	KillCoordinatorPrepare Kind = "kill:coordinator@prepare"
	// KillLeaderMarkers: right after a workload transaction's EndTxn
	// returned OK, while its markers are being written, SIGKILL the leader
	// of one of its partitions.
	KillLeaderMarkers Kind = "kill:leader@markers"
)

// Kinds lists every fault kind.
var Kinds = []Kind{Kill, KillTwo, Pause, Partition, PartitionPair, Latency, DropResponses, DelayResponses, DelayRequests,
	KillCoordinatorOngoing, KillCoordinatorPrepare, KillLeaderMarkers}

// phase returns the transaction phase a phase kind waits for, "" for the
// others.
func (k Kind) phase() TxnPhase {
	switch k {
	case KillCoordinatorOngoing:
		return PhaseOngoing
	case KillCoordinatorPrepare:
		return PhasePrepare
	case KillLeaderMarkers:
		return PhaseMarkers
	}
	return ""
}

// kills reports whether k SIGKILLs its node (and restarts it at the heal).
func (k Kind) kills() bool { return k == Kill || k.phase() != "" }

// phaseTargets are the phase kinds' fixed targets (for their fallback).
var phaseTargets = map[Kind]Target{KillCoordinatorOngoing: Coordinator, KillCoordinatorPrepare: Coordinator, KillLeaderMarkers: Leader}

// splitEntry splits a script entry: "kind[:target[:method]]", where a
// phase kind ("kill:coordinator@ongoing") is a kind of its own with its
// target built in.
func splitEntry(e string) (kind, target, method string) {
	kind, rest, _ := strings.Cut(e, ":")
	target, method, _ = strings.Cut(rest, ":")
	if strings.Contains(target, "@") {
		return kind + ":" + target, "", method
	}
	return kind, target, method
}

// Target says which node a fault hits, resolved when the fault starts.
type Target string

const (
	// Leader: the leader of a partition of the workload's topic.
	Leader Target = "leader"
	// Controller: the active controller.
	Controller Target = "controller"
	// Follower: a replica of a partition that is not its leader.
	Follower Target = "follower"
	// Random: any node.
	Random Target = "random"
	// Coordinator: the transaction coordinator of one of the workload's
	// transactional ids (the leader of the id's __transaction_state
	// partition, as FindCoordinator answers), chosen by the seed. Without
	// transactional producers it resolves like Random.
	Coordinator Target = "coordinator"
)

// Targets lists every target.
var Targets = []Target{Leader, Controller, Follower, Random, Coordinator}

// Fault is one scheduled fault. Node is filled in when it starts.
type Fault struct {
	At          time.Duration // after the workload starts
	Kind        Kind
	Target      Target
	Duration    time.Duration
	Latency     time.Duration // Latency, DelayResponses, DelayRequests (the hold)
	Probability float64       // DropResponses
	Method      string        // DropResponses, DelayResponses, DelayRequests: gRPC full method
	Partition   int32         // Leader, Follower: which partition's
	Pick        uint64        // deterministic choice among candidates
}

func (f Fault) String() string {
	s := fmt.Sprintf("+%v %s %s for %v", f.At.Round(time.Millisecond), f.Kind, f.Target, f.Duration.Round(time.Millisecond))
	if f.Target == Leader || f.Target == Follower {
		s += fmt.Sprintf(" (partition %d)", f.Partition)
	}
	switch f.Kind {
	case Latency:
		s += fmt.Sprintf(" latency %v", f.Latency)
	case DropResponses:
		s += fmt.Sprintf(" %s p=%.2f", f.Method, f.Probability)
	case DelayResponses:
		s += fmt.Sprintf(" %s delay %v", f.Method, f.Latency)
	case DelayRequests:
		s += fmt.Sprintf(" %s hold %v", f.Method, f.Latency)
	}
	return s
}

// ScheduleConfig shapes a schedule.
type ScheduleConfig struct {
	Seed       uint64
	Duration   time.Duration // total time during which faults start
	Partitions int32
	// Script, when set, is the sequence of faults to run, cycled: "kind"
	// or "kind:target" entries. Empty means random kinds and targets.
	Script []string
	// FaultMin/Max bound a fault's duration; GapMin/Max the quiet time
	// between two faults.
	FaultMin, FaultMax, GapMin, GapMax time.Duration
	// Methods are the RPCs response faults pick from; empty means
	// responseMethods, plus txnMethods with Transactions.
	Methods []string
	// Transactions: the workload runs transactions, so random faults may
	// also target a coordinator and the transaction RPCs.
	Transactions bool
	// MinPause is the shortest Pause: longer than the broker session and
	// replica lag timeouts, so that a paused node is fenced and leaves
	// the ISR.
	MinPause time.Duration
	// RequestTimeout of the workload's clients: DelayResponses delays
	// past it, so that clients retry requests that were applied.
	RequestTimeout time.Duration
}

// responseMethods are the RPCs whose responses DropResponses and
// DelayResponses interfere with: the client's produce (the Go producer
// sends on ProduceStream), the follower's fetch, the leader's ISR change
// and the broker's heartbeat.
var responseMethods = []string{
	"/sluice.v1.Log/ProduceStream",
	"/sluice.v1.Log/ProduceStream",
	"/sluice.internal.v1.Replica/ReplicaFetchStream",
	"/sluice.internal.v1.Controller/AlterPartition",
	"/sluice.internal.v1.Controller/BrokerHeartbeat",
}

// txnMethods are the transaction path's internal RPCs whose responses
// DropResponses and DelayResponses interfere with when the workload runs
// transactions: the coordinator's markers to partition leaders (served by
// the leaders) and a partition leader's AddPartitionsToTxn to the
// coordinator (served by the coordinator).
var txnMethods = []string{
	"/sluice.internal.v1.TxnBroker/WriteTxnMarkers",
	"/sluice.internal.v1.TxnBroker/AddPartitionsToTxn",
}

// requestMethods are the RPCs DelayRequests holds: the client's produce
// (the Go producer's ProduceStream, each message held; its unary Produce
// only by script), a transactional producer's EndTxn (served by the
// coordinator) and a partition leader's AddPartitionsToTxn (served by the
// coordinator). The last two only with transactions.
var requestMethods = []string{
	"/sluice.v1.Log/ProduceStream",
	"/sluice.v1.Transactions/EndTxn",
	"/sluice.internal.v1.TxnBroker/AddPartitionsToTxn",
}

// methodByName resolves a script's method: a full gRPC method name, or
// the last element of one of responseMethods, txnMethods or
// requestMethods ("WriteTxnMarkers"), or "Produce".
func methodByName(name string) (string, bool) {
	all := append(slices.Clone(responseMethods), txnMethods...)
	all = append(all, requestMethods...)
	for _, m := range append(all, "/sluice.v1.Log/Produce") {
		if m == name || strings.HasSuffix(m, "/"+name) {
			return m, true
		}
	}
	return "", false
}

// ParseScript checks a comma-separated script ("kill:leader,pause,...");
// a response fault may name its RPC third
// ("drop-responses:leader:WriteTxnMarkers").
func ParseScript(s string) ([]string, error) {
	var out []string
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		kind, target, method := splitEntry(e)
		if !slices.Contains(Kinds, Kind(kind)) {
			return nil, fmt.Errorf("chaos: unknown fault kind %q in %q (kinds: %v)", kind, e, Kinds)
		}
		if target != "" && !slices.Contains(Targets, Target(target)) {
			return nil, fmt.Errorf("chaos: unknown target %q in %q (targets: %v)", target, e, Targets)
		}
		if method != "" {
			if Kind(kind) != DropResponses && Kind(kind) != DelayResponses && Kind(kind) != DelayRequests {
				return nil, fmt.Errorf("chaos: %q: only %s, %s and %s take an RPC", e, DropResponses, DelayResponses, DelayRequests)
			}
			if _, ok := methodByName(method); !ok {
				return nil, fmt.Errorf("chaos: unknown RPC %q in %q (RPCs: %v %v %v)", method, e, responseMethods, txnMethods, requestMethods)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// NewSchedule draws a schedule from cfg.Seed: the same seed and config
// give the same schedule.
func NewSchedule(cfg ScheduleConfig) []Fault {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	methods := cfg.Methods
	if len(methods) == 0 {
		methods = responseMethods
		if cfg.Transactions {
			methods = append(slices.Clone(responseMethods), txnMethods...)
		}
	}
	targets := Targets
	if !cfg.Transactions {
		// Without transactions, the draw of seeds from before them.
		targets = slices.DeleteFunc(slices.Clone(Targets), func(t Target) bool { return t == Coordinator })
	}
	kinds := Kinds
	if !cfg.Transactions {
		// No transaction ever reaches a phase.
		kinds = slices.DeleteFunc(slices.Clone(Kinds), func(k Kind) bool { return k.phase() != "" })
	}
	var out []Fault
	at := between(cfg.GapMin, cfg.GapMax)
	for i := 0; at < cfg.Duration; i++ {
		f := Fault{At: at, Duration: between(cfg.FaultMin, cfg.FaultMax), Pick: rng.Uint64()}
		f.Kind, f.Target = kinds[rng.IntN(len(kinds))], targets[rng.IntN(len(targets))]
		var method string
		if len(cfg.Script) > 0 {
			var kind, target string
			kind, target, method = splitEntry(cfg.Script[i%len(cfg.Script)])
			f.Kind = Kind(kind)
			if target != "" {
				f.Target = Target(target)
			}
		}
		f.Partition = rng.Int32N(max(cfg.Partitions, 1))
		switch f.Kind {
		case Pause:
			f.Duration = max(f.Duration, cfg.MinPause)
		case Latency:
			f.Latency = between(20*time.Millisecond, 200*time.Millisecond).Round(time.Millisecond)
		case DropResponses:
			f.Method = methods[rng.IntN(len(methods))]
			f.Probability = 0.2 + 0.6*rng.Float64()
		case DelayResponses:
			f.Method = methods[rng.IntN(len(methods))]
			f.Latency = cfg.RequestTimeout + between(0, time.Second).Round(time.Millisecond)
		case DelayRequests:
			held := requestMethods[:1]
			if cfg.Transactions {
				held = requestMethods
			}
			f.Method = held[rng.IntN(len(held))]
			// Released after the rule is cleared and after the client's
			// request timeout on top: by then the client has retried
			// (against the healed node or a new one) and moved on.
			f.Latency = f.Duration + cfg.RequestTimeout + between(0, time.Second).Round(time.Millisecond)
		}
		if m, ok := methodByName(method); ok && method != "" {
			f.Method = m // the script's choice; the draw above kept the sequence
		}
		if t, ok := phaseTargets[f.Kind]; ok {
			f.Target = t
		}
		if f.Kind == DelayRequests && len(cfg.Script) == 0 {
			// A held request must reach the node that serves it: the
			// partition leader for a produce, the coordinator for the
			// transaction RPCs.
			f.Target = Leader
			if cfg.Transactions && !strings.HasPrefix(f.Method, "/sluice.v1.Log/") {
				f.Target = Coordinator
			}
		}
		out = append(out, f)
		at += f.Duration + between(cfg.GapMin, cfg.GapMax)
	}
	return out
}

// resolve picks the node a fault hits in the cluster's current state.
func (r *runner) resolve(ctx context.Context, f Fault) (int32, error) {
	ids := r.cluster.IDs()
	switch f.Target {
	case Controller:
		d, err := r.admin.DescribeCluster(ctx)
		if err != nil {
			return 0, err
		}
		if d.GetControllerLeader() == 0 {
			return 0, fmt.Errorf("no active controller known")
		}
		return d.GetControllerLeader(), nil
	case Leader, Follower:
		md, err := r.admin.Metadata(ctx, r.cfg.Workload.Topic)
		if err != nil {
			return 0, err
		}
		for _, t := range md.GetTopics() {
			for _, p := range t.GetPartitions() {
				if p.GetPartition() != f.Partition {
					continue
				}
				if f.Target == Leader {
					if p.GetLeaderId() <= 0 {
						return 0, fmt.Errorf("partition %d has no leader", f.Partition)
					}
					return p.GetLeaderId(), nil
				}
				var followers []int32
				for _, id := range p.GetReplicas() {
					if id != p.GetLeaderId() {
						followers = append(followers, id)
					}
				}
				if len(followers) == 0 {
					return 0, fmt.Errorf("partition %d has no follower", f.Partition)
				}
				return followers[f.Pick%uint64(len(followers))], nil
			}
		}
		return 0, fmt.Errorf("partition %d not in metadata", f.Partition)
	}
	if tids := r.cfg.Workload.transactionalIDs(); f.Target == Coordinator && len(tids) > 0 {
		id := tids[f.Pick%uint64(len(tids))]
		co, err := r.admin.FindCoordinator(ctx, id)
		if err != nil {
			return 0, fmt.Errorf("coordinator of %s: %w", id, err)
		}
		return co.NodeID, nil
	}
	return ids[f.Pick%uint64(len(ids))], nil
}

// inject starts fault f on node id and returns the function that heals it.
func (r *runner) inject(f Fault, id int32) (heal func() error, err error) {
	c := r.cluster
	switch f.Kind {
	case Kill, KillCoordinatorOngoing, KillCoordinatorPrepare, KillLeaderMarkers:
		c.Note(id, "fault: SIGKILL (%s)", f.Kind)
		c.Kill(id)
		return func() error {
			c.Note(id, "heal: restart")
			return c.Restart(id)
		}, nil
	case KillTwo:
		others := without(c.IDs(), id)
		second := others[f.Pick%uint64(len(others))]
		for _, n := range []int32{id, second} {
			c.Note(n, "fault: SIGKILL (with node %d)", id+second-n)
			c.Kill(n)
		}
		return func() error {
			for _, n := range []int32{second, id} {
				c.Note(n, "heal: restart")
				if err := c.Restart(n); err != nil {
					return err
				}
			}
			return nil
		}, nil
	case Pause:
		c.Note(id, "fault: SIGSTOP")
		if err := c.Pause(id); err != nil {
			return nil, err
		}
		return func() error {
			c.Note(id, "heal: SIGCONT")
			return c.Resume(id)
		}, nil
	case Partition:
		side := []int32{id}
		if len(c.Nodes) >= 5 {
			others := without(c.IDs(), id)
			side = append(side, others[f.Pick%uint64(len(others))])
		}
		rest := without(c.IDs(), side...)
		for _, a := range side {
			c.Note(a, "fault: partitioned from %v", rest)
			for _, b := range rest {
				c.Link(a, b).Cut(true)
				c.Link(b, a).Cut(true)
			}
		}
		return func() error {
			for _, a := range side {
				c.Note(a, "heal: partition from %v", rest)
				for _, b := range rest {
					c.Link(a, b).Cut(false)
					c.Link(b, a).Cut(false)
				}
			}
			return nil
		}, nil
	case PartitionPair:
		others := without(c.IDs(), id)
		peer := others[f.Pick%uint64(len(others))]
		c.Note(id, "fault: partitioned from node %d only", peer)
		c.Note(peer, "fault: partitioned from node %d only", id)
		c.Link(id, peer).Cut(true)
		c.Link(peer, id).Cut(true)
		return func() error {
			c.Note(id, "heal: partition from node %d", peer)
			c.Note(peer, "heal: partition from node %d", id)
			c.Link(id, peer).Cut(false)
			c.Link(peer, id).Cut(false)
			return nil
		}, nil
	case Latency:
		c.Note(id, "fault: latency %v on every link", f.Latency)
		for _, o := range without(c.IDs(), id) {
			c.Link(id, o).SetLatency(f.Latency)
			c.Link(o, id).SetLatency(f.Latency)
		}
		return func() error {
			c.Note(id, "heal: latency")
			for _, o := range without(c.IDs(), id) {
				c.Link(id, o).SetLatency(0)
				c.Link(o, id).SetLatency(0)
			}
			return nil
		}, nil
	case DropResponses, DelayResponses, DelayRequests:
		rule := faultRule{Method: f.Method}
		switch f.Kind {
		case DropResponses:
			rule.DropResponse = f.Probability
		case DelayResponses:
			rule.DelayResponseMs = f.Latency.Milliseconds()
		case DelayRequests:
			rule.DelayRequestMs = f.Latency.Milliseconds()
		}
		c.Note(id, "fault: %s %+v", f.Kind, rule)
		if err := putRules(c.Node(id).HTTP, []faultRule{rule}); err != nil {
			return nil, err
		}
		return func() error {
			c.Note(id, "heal: %s", f.Kind)
			return putRules(c.Node(id).HTTP, nil)
		}, nil
	}
	return nil, fmt.Errorf("chaos: unknown fault kind %q", f.Kind)
}

// faultRule is one rule of sluiced's /debug/faults (--fault-injection).
type faultRule = proccluster.FaultRule

// putRules replaces node's fault rules (nil clears them).
func putRules(httpAddr string, rules []faultRule) error {
	return proccluster.PutFaultRules(httpAddr, rules)
}

// without returns ids minus drop.
func without(ids []int32, drop ...int32) []int32 {
	var out []int32
	for _, id := range ids {
		if !slices.Contains(drop, id) {
			out = append(out, id)
		}
	}
	return out
}
