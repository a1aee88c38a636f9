package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-io/sluice/chaos/checker"
)

// This file is what the Kafka-client workload (kafka_txn.go,
// kafka_copier.go) shares: its topics, the franz-go clients' options and
// timeouts, the outcome of a record produced through the Kafka door, and
// the Kafka-door read_committed tailer. Its clients reach the nodes at
// their Kafka listeners (proccluster gives every node one on a free
// loopback port) and follow the cluster's Metadata from there, which
// advertises each broker's Kafka address; everything they write is
// recorded in the same history as the gRPC workload's and judged by the
// same checker.

// GroupProtocol is the consumer group protocol of the Kafka copier's
// franz-go members.
type GroupProtocol string

const (
	// GroupProtocolConsumer is KIP-848's (ConsumerGroupHeartbeat,
	// assignments computed by the coordinator): franz-go with
	// kgo.ServerSideBalancer().
	GroupProtocolConsumer GroupProtocol = "consumer"
	// GroupProtocolClassic is the classic protocol (JoinGroup/SyncGroup,
	// the client-side balancer): franz-go without ServerSideBalancer.
	GroupProtocolClassic GroupProtocol = "classic"
	// GroupProtocolBySeed picks one of the two by the run's seed
	// (ResolveGroupProtocol): even seeds KIP-848, odd ones classic, so
	// that runs with random seeds cover both. Each has run 10 minutes
	// with every fault kind without an anomaly (docs/chaos.md).
	GroupProtocolBySeed GroupProtocol = "seed"
	// DefaultGroupProtocol is GroupProtocolBySeed.
	DefaultGroupProtocol = GroupProtocolBySeed
)

// ResolveGroupProtocol is p, or for GroupProtocolBySeed the protocol the
// seed picks.
func ResolveGroupProtocol(p GroupProtocol, seed uint64) GroupProtocol {
	if p != GroupProtocolBySeed {
		return p
	}
	if seed%2 == 0 {
		return GroupProtocolConsumer
	}
	return GroupProtocolClassic
}

// ParseGroupProtocol parses --kafka-group-protocol: consumer, classic or
// seed ("" is the default).
func ParseGroupProtocol(s string) (GroupProtocol, error) {
	switch GroupProtocol(s) {
	case "":
		return DefaultGroupProtocol, nil
	case GroupProtocolConsumer, GroupProtocolClassic, GroupProtocolBySeed:
		return GroupProtocol(s), nil
	}
	return "", fmt.Errorf("chaos: group protocol %q: want %s, %s or %s", s, GroupProtocolConsumer, GroupProtocolClassic, GroupProtocolBySeed)
}

// kafkaOn reports whether any part of the Kafka-client workload runs.
func (wc WorkloadConfig) kafkaOn() bool {
	return wc.KafkaTxnProducers > 0 || wc.KafkaConsumers > 0 || wc.kafkaCopier() || wc.rdkCopier()
}

// transactionalIDs are the workload's transactional producers' ids, the
// candidates of a fault's coordinator target: the gRPC producers'
// (chaos-txn-N), then the Kafka producers' and the Kafka copier's, so
// that coordinator faults hit the Kafka door's transactions too.
func (wc WorkloadConfig) transactionalIDs() []string {
	var out []string
	for n := 1; n <= wc.TxnProducers; n++ {
		out = append(out, fmt.Sprintf("chaos-txn-%d", n))
	}
	for n := 1; n <= wc.KafkaTxnProducers; n++ {
		out = append(out, fmt.Sprintf("%s-%d", kafkaTxnID, n))
	}
	for n := 1; wc.kafkaCopier() && n <= wc.KafkaCopierMembers; n++ {
		out = append(out, fmt.Sprintf("%s-%d", kafkaCopierTxnID, n))
	}
	for n := 1; n <= wc.RdkCopiers; n++ {
		out = append(out, fmt.Sprintf("%s-%d", rdkCopierTxnID, n))
	}
	return out
}

// kafkaTxnTopics are the Kafka transactional producers' topics:
// Topic-kafka, Topic-kafka-2, ... (TxnTopics of them); none without those
// producers.
func (wc WorkloadConfig) kafkaTxnTopics() []string {
	if wc.KafkaTxnProducers == 0 {
		return nil
	}
	out := []string{wc.Topic + "-kafka"}
	for i := 2; i <= wc.TxnTopics; i++ {
		out = append(out, fmt.Sprintf("%s-kafka-%d", wc.Topic, i))
	}
	return out
}

// kafkaCopier reports whether the Kafka copier runs: it copies the Kafka
// transactional producers' first topic, so it needs them.
func (wc WorkloadConfig) kafkaCopier() bool {
	return wc.KafkaCopierMembers > 0 && wc.KafkaTxnProducers > 0
}

// kafkaCopierInput and kafkaCopierOutput are the Kafka copier's topics.
func (wc WorkloadConfig) kafkaCopierInput() string  { return wc.Topic + "-kafka" }
func (wc WorkloadConfig) kafkaCopierOutput() string { return wc.Topic + "-kafka-out" }

// The franz-go clients' timeouts, chosen so that they ride out every
// fault kind (a kill-two leaves no quorum for several seconds, a pause
// lasts past the session timeouts) instead of failing: a request is given
// up after the workload's request timeout (RequestTimeoutOverhead, on top
// of a produce's or fetch's own wait) and sent again, to the new leader
// or coordinator once Metadata or FindCoordinator says so, for up to
// kafkaRetryTimeout; a record is failed after the delivery timeout.
const (
	kafkaRetryTimeout     = 45 * time.Second
	kafkaRebalanceTimeout = 10 * time.Second
)

// kafkaOpts are every franz-go client's options, extra last: in a
// secured run TLS and SCRAM (kafkaSecurity.opts), through dial when not
// nil (a dialer of the client's own).
func (w *workload) kafkaOpts(dial kafkaDialer, extra ...kgo.Opt) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(w.kafkaAddrs...),
		kgo.RequestTimeoutOverhead(w.cfg.RequestTimeout),
		kgo.RetryTimeout(kafkaRetryTimeout),
		kgo.DialTimeout(w.cfg.RequestTimeout),
		kgo.ProduceRequestTimeout(2 * w.cfg.RequestTimeout),
		kgo.RecordDeliveryTimeout(w.cfg.DeliveryTimeout),
		kgo.MetadataMinAge(250 * time.Millisecond),
		kgo.MetadataMaxAge(5 * time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.ClientID("sluice-chaos"),
	}
	opts = append(opts, w.kafkaSec.opts(dial)...)
	return append(opts, extra...)
}

// kafkaOutcomeOf classifies a record's error from franz-go as
// outcomeOf does the Go client's: only a refusal given before the append
// and never retried is a failure; anything else may have been written.
func kafkaOutcomeOf(err error) checker.Outcome {
	for _, e := range []error{kerr.MessageTooLarge, kerr.InvalidRecord, kerr.CorruptMessage, kerr.InvalidTopicException,
		kerr.InvalidRequiredAcks, kerr.RecordListTooLarge} {
		if errors.Is(err, e) {
			return checker.Failed
		}
	}
	return checker.Unknown
}

// completeKafka records the outcome of write i, produced through the
// Kafka door (offset valid when err is nil).
func (r *recorder) completeKafka(i int, now time.Time, offset int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := &r.writes[i]
	w.Complete = now
	if err == nil {
		w.Outcome, w.Offset = checker.OK, offset
	} else {
		w.Outcome, w.Err = kafkaOutcomeOf(err), err.Error()
	}
}

// kafkaConsume tails every partition of every workload topic from the
// beginning through the Kafka door with read_committed (franz-go
// filters the aborted transactions the broker lists), recording what it
// reads as session name, until the workload stops.
func (w *workload) kafkaConsume(name string) {
	parts := map[string]map[int32]kgo.Offset{}
	for _, t := range w.cfg.Topics() {
		parts[t] = map[int32]kgo.Offset{}
		for p := int32(0); p < w.cfg.Partitions; p++ {
			parts[t][p] = kgo.NewOffset().AtStart()
		}
	}
	cl, err := kgo.NewClient(w.kafkaOpts(nil, kgo.ConsumePartitions(parts), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		w.log.Error("kafka consumer", "consumer", name, "err", err)
		return
	}
	defer cl.Close()
	for w.ctx.Err() == nil {
		fs := cl.PollFetches(w.ctx)
		if w.ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			// Rare, and worth reading: a *kgo.ErrDataLoss, for one, says
			// the client moved its position back (KIP-320 truncation
			// detection), which the checker then sees as records read
			// twice by the session.
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				w.log.Warn("kafka fetch", "consumer", name, "topic", t, "partition", p, "err", err)
			}
		})
		var reads []checker.Read
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			reads = append(reads, checker.Read{Consumer: name, Partition: w.cfg.logOf(r.Topic, r.Partition), Offset: r.Offset,
				Key: string(r.Key), Value: string(r.Value), Time: now, Committed: true})
		})
		w.rec.read(reads)
	}
}

// endTxnWatch is a franz-go logger that notices when an EndTxn with
// commit is about to be sent: franz-go logs "ending transaction" with
// commit=true just before (kgo v1.22.3, Client.EndTransaction). A
// transaction whose commit was never sent cannot have committed (TV2
// commits only on EndTxn), so the workload records it aborted; one whose
// commit was sent and not confirmed is unknown. Without the watch every
// failed End would have to count as unknown.
type endTxnWatch struct{ sent atomic.Bool }

func (e *endTxnWatch) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (e *endTxnWatch) Log(_ kgo.LogLevel, msg string, keyvals ...any) {
	if msg != "ending transaction" {
		return
	}
	for i := 0; i+1 < len(keyvals); i += 2 {
		if k, ok := keyvals[i].(string); ok && k == "commit" {
			if c, ok := keyvals[i+1].(kgo.TransactionEndTry); ok && bool(c) {
				e.sent.Store(true)
			}
		}
	}
}

// kafkaConns is a franz-go dialer whose connections can be frozen (its
// ioGate: an in-process zombie) or severed at once and for good (a
// simulated crash: the client's later requests, its group leave
// included, never reach a broker). Safe for concurrent use.
type kafkaConns struct {
	gate    ioGate
	mu      sync.Mutex // guards the following
	conns   []net.Conn
	severed bool
}

var errSevered = errors.New("chaos: connections severed (simulated crash)")

func (k *kafkaConns) dial(ctx context.Context, _, host string) (net.Conn, error) {
	k.mu.Lock()
	severed := k.severed
	k.mu.Unlock()
	if severed {
		return nil, errSevered
	}
	c, err := k.gate.dial(ctx, host)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.severed {
		c.Close()
		return nil, errSevered
	}
	k.conns = append(k.conns, c)
	return c, nil
}

// sever closes every connection and refuses new ones.
func (k *kafkaConns) sever() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.severed = true
	for _, c := range k.conns {
		c.Close()
	}
	k.conns = nil
	k.gate.release()
}

// kafkaGroupOffsets reads group's committed offsets of topic through the
// Kafka door (partitions without a commit are left out), as a workload
// client (sec), retrying within ctx until every partition answers
// without an error.
func kafkaGroupOffsets(ctx context.Context, addrs []string, sec kafkaSecurity, group, topic string) (map[int32]int64, error) {
	cl, err := kgo.NewClient(append(sec.opts(nil), kgo.SeedBrokers(addrs...), kgo.RequestTimeoutOverhead(3*time.Second))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		offs, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			err = offs.Error()
		}
		if err == nil {
			out := map[int32]int64{}
			offs.Each(func(o kadm.OffsetResponse) {
				if o.Topic == topic && o.At >= 0 {
					out[o.Partition] = o.At
				}
			})
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("offsets of group %s: %w", group, err)
		case <-time.After(200 * time.Millisecond): // retry pacing within ctx
		}
	}
}

// KafkaCounts is what went through the Kafka door in a run: the Kafka
// producers' and copier's writes and transactions (producer names kt*
// and kg*), the records the copier copied in committed transactions and
// the Kafka consumers' reads (sessions kc*).
type KafkaCounts struct {
	Writes, WritesOK                        int
	TxnsCommitted, TxnsAborted, TxnsUnknown int // as the checker judges them
	CopiesCommitted, Reads                  int
}

func (k KafkaCounts) String() string {
	return fmt.Sprintf("writes %d (ok %d), transactions %d committed, %d aborted, %d unknown; %d records copied in committed copier transactions; %d records read by the Kafka consumers",
		k.Writes, k.WritesOK, k.TxnsCommitted, k.TxnsAborted, k.TxnsUnknown, k.CopiesCommitted, k.Reads)
}

// kafkaCounts counts h's Kafka-door share.
func kafkaCounts(h checker.History) KafkaCounts {
	kafka := func(name string) bool { return strings.HasPrefix(name, "kt") || strings.HasPrefix(name, "kg") }
	var k KafkaCounts
	for _, w := range h.Writes {
		if kafka(w.Producer) {
			k.Writes++
			if w.Outcome == checker.OK {
				k.WritesOK++
			}
		}
	}
	committed := map[string]bool{}
	for _, t := range h.Txns {
		if !kafka(t.Producer) {
			continue
		}
		switch {
		case t.CommitInvoke.IsZero() || !t.Complete.IsZero() && t.Outcome == checker.TxnAborted:
			k.TxnsAborted++
		case t.Complete.IsZero() || t.Outcome == checker.TxnUnknown:
			k.TxnsUnknown++
		default:
			k.TxnsCommitted++
			committed[t.ID] = true
		}
	}
	for _, w := range h.Writes {
		if strings.HasPrefix(w.Producer, "kg") && committed[w.Txn] {
			k.CopiesCommitted++
		}
	}
	for _, rd := range h.Reads {
		if strings.HasPrefix(rd.Consumer, "kc") {
			k.Reads++
		}
	}
	return k
}
