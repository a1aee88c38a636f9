package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/chaos/checker"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// recorder is the history being written by the workload's goroutines.
type recorder struct {
	mu         sync.Mutex // guards the following
	writes     []checker.Write
	reads      []checker.Read
	txns       []checker.Txn
	watermarks []checker.Watermark
	fences     []string // transactional producers fenced (see fence)
	// emit, when set (in a copier member process), is told every change,
	// in order, under mu (copier_member.go).
	emit func(memberEvent)
}

// invoke appends a write in flight and returns its index.
func (r *recorder) invoke(w checker.Write) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, w)
	if r.emit != nil {
		r.emit(memberEvent{E: "invoke", I: len(r.writes) - 1, Write: &w})
	}
	return len(r.writes) - 1
}

// complete records the outcome of write i.
func (r *recorder) complete(i int, now time.Time, md client.RecordMetadata, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := &r.writes[i]
	w.Complete = now
	if err == nil {
		w.Outcome, w.Offset = checker.OK, md.Offset
	} else {
		w.Outcome, w.Err = outcomeOf(err), err.Error()
	}
	if r.emit != nil {
		r.emit(memberEvent{E: "complete", I: i, At: now, Outcome: w.Outcome, Offset: w.Offset, Err: w.Err})
	}
}

// outcomeOf classifies a produce error. Only a refusal that the broker
// gives before appending, and that the producer does not retry, is a
// definite failure; timeouts, transport errors and expired retries may
// have been written.
func outcomeOf(err error) checker.Outcome {
	var e *errs.Error
	if errors.As(err, &e) && !errs.Retriable(e.Code) {
		switch e.Code {
		case sluicev1.ErrorCode_INVALID_RECORD, sluicev1.ErrorCode_CORRUPT_RECORD, sluicev1.ErrorCode_MESSAGE_TOO_LARGE,
			sluicev1.ErrorCode_RECORD_LIST_TOO_LARGE, sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION, sluicev1.ErrorCode_INVALID_REQUIRED_ACKS:
			return checker.Failed
		}
	}
	return checker.Unknown
}

func (r *recorder) read(rs []checker.Read) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads = append(r.reads, rs...)
}

// counts returns writes acknowledged so far and reads so far.
func (r *recorder) counts() (acked, writes, reads int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.writes {
		if r.writes[i].Outcome == checker.OK && !r.writes[i].Complete.IsZero() {
			acked++
		}
	}
	return acked, len(r.writes), len(r.reads)
}

// history returns a copy of what was recorded. Writes still in flight
// (no completion) are Unknown.
func (r *recorder) history() checker.History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := checker.History{Writes: append([]checker.Write(nil), r.writes...), Reads: append([]checker.Read(nil), r.reads...),
		Txns: append([]checker.Txn(nil), r.txns...), Watermarks: append([]checker.Watermark(nil), r.watermarks...)}
	for i := range h.Writes {
		if h.Writes[i].Complete.IsZero() {
			h.Writes[i].Outcome = checker.Unknown
		}
	}
	return h
}

// WorkloadConfig sizes the workload.
type WorkloadConfig struct {
	Topic      string
	Partitions int32
	Producers  int // idempotent producers, acks=all
	Consumers  int // tailing consumers from the beginning
	Keys       int
	Rate       int // records per second per producer
	// NoIdempotence turns the producers' idempotence off (plain retries):
	// only for showing that the checker catches the duplicates that
	// follow.
	NoIdempotence bool
	// RequestTimeout of the clients; DeliveryTimeout of the producers.
	RequestTimeout, DeliveryTimeout time.Duration

	// TxnProducers run transactions (see txnworkload.go) over every
	// partition of TxnTopics topics: Topic and Topic-2, Topic-3, ...
	// Zero: no transactions, one topic.
	TxnProducers int
	TxnTopics    int
	// TxnTimeout is the producers' transaction timeout; TxnRate the
	// transactions per second per transactional producer.
	TxnTimeout time.Duration
	TxnRate    int
	// UncommittedConsumers tail every partition with read_uncommitted
	// (Consumers read with read_committed, the default).
	UncommittedConsumers int
	// MislabelUncommitted records the read_uncommitted consumers' reads as
	// read_committed ones: only for showing that the checker catches the
	// aborted reads that follow.
	MislabelUncommitted bool
	// Copier runs a transactional copier from Topic to Topic-out: with
	// CopierMembers > 0, that many members of one consumer group with
	// their offsets in the transactions (copier_group.go); with 0, one
	// copier with its positions in Topic-pos (copier.go).
	Copier        bool
	CopierMembers int
	// CopierInProcess runs the group copier's members as goroutines that
	// simulate their crashes, instead of processes killed with SIGKILL
	// (copier_member.go).
	CopierInProcess bool
	// Security is how the clients reach a secured cluster (TLS, SCRAM);
	// Run sets it from Config.Security.
	Security ClientSecurity

	// The Kafka-client workload (franz-go through the nodes' Kafka
	// listeners; kafka_*.go). KafkaTxnProducers run transactions over
	// every partition of TxnTopics topics of their own (Topic-kafka,
	// Topic-kafka-2, ...); KafkaConsumers tail every workload topic with
	// read_committed through the Kafka door; KafkaCopierMembers copy
	// Topic-kafka to Topic-kafka-out as members of one consumer group
	// (franz-go's GroupTransactSession), with the group protocol
	// KafkaGroupProtocol. All zero: no Kafka workload, no Kafka topics.
	KafkaTxnProducers  int
	KafkaConsumers     int
	KafkaCopierMembers int
	KafkaGroupProtocol GroupProtocol
	// RdkCopiers run examples/kafka/python/txn_copier.py (librdkafka,
	// through python3-confluent-kafka; RdkPython, RdkScript) copying
	// Topic-kafka-2 to Topic-rdk-out (rdk_copier.go); zero: none.
	RdkCopiers int
	RdkPython  string
	RdkScript  string
}

// Topics returns the workload's topics: Topic, then Topic-2, ... when
// transactions span several.
func (wc WorkloadConfig) Topics() []string {
	out := []string{wc.Topic}
	for i := 2; wc.TxnProducers > 0 && i <= wc.TxnTopics; i++ {
		out = append(out, fmt.Sprintf("%s-%d", wc.Topic, i))
	}
	if wc.Copier {
		out = append(out, wc.Topic+"-out")
		if wc.CopierMembers == 0 {
			out = append(out, wc.Topic+"-pos")
		}
	}
	out = append(out, wc.kafkaTxnTopics()...)
	if wc.kafkaCopier() {
		out = append(out, wc.kafkaCopierOutput())
	}
	if wc.rdkCopier() {
		out = append(out, wc.rdkOutput())
	}
	return out
}

// txnLogs is how many of the history's partitions (the first ones) the
// transactional producers write to: those of Topic and Topic-2, ...
func (wc WorkloadConfig) txnLogs() int32 {
	return int32(max(1, min(wc.TxnTopics, len(wc.Topics())))) * wc.Partitions
}

// logOf numbers a partition of the workload's topics for the history,
// which knows partitions only: topic i's partition p is i×Partitions+p,
// so the first topic's partitions keep their numbers.
func (wc WorkloadConfig) logOf(topic string, p int32) int32 {
	for i, t := range wc.Topics() {
		if t == topic {
			return int32(i)*wc.Partitions + p
		}
	}
	return -1 - p // not a workload topic: a value read there is wrong-partition
}

// topicPartition is the inverse of logOf.
func (wc WorkloadConfig) topicPartition(log int32) (string, int32) {
	return wc.Topics()[log/wc.Partitions], log % wc.Partitions
}

// logs returns how many partitions the workload's topics have in all.
func (wc WorkloadConfig) logs() int32 { return int32(len(wc.Topics())) * wc.Partitions }

// workload runs producers and tailing consumers until stopped.
type workload struct {
	cfg   WorkloadConfig
	addrs []string
	// kafkaAddrs are the nodes' Kafka listeners (the Kafka workload's
	// seeds).
	kafkaAddrs []string
	// kafkaSec is how the franz-go clients reach them (secured runs).
	kafkaSec kafkaSecurity
	rec      *recorder
	log      *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	prodMu    sync.Mutex // guards producers
	producers []*client.Producer
	stopProd  chan struct{}
	// copierDone is closed when the copier has caught up with its input
	// after inputComplete (or given up), or at once without a copier.
	copierDone chan struct{}
	// inputDone is closed by inputComplete: every write has an outcome,
	// so the copier's input has reached its end.
	inputDone chan struct{}
	// memberKills and memberPauses count the copier member processes
	// SIGKILLed and SIGSTOPped (zombies) by the harness.
	memberKills, memberPauses atomic.Int64
	// phases tells phase-timed faults where the transactions are.
	phases *phaseHook
	// kafkaCopierDone is closed when the Kafka copier has caught up
	// after inputComplete (or given up), or at once without one;
	// kafkaCrashes and kafkaZombies count its members crashed and frozen.
	kafkaCopierDone            chan struct{}
	kafkaCrashes, kafkaZombies atomic.Int64
	// rdkDone is closed when the librdkafka copier has caught up and
	// stopped (or given up), or at once without one; rdk is its state.
	rdkDone chan struct{}
	rdk     rdkState
}

// inputComplete tells the copier that no more input will come (every
// write has completed): it finishes once it has read to the end.
func (w *workload) inputComplete() {
	select {
	case <-w.inputDone:
	default:
		close(w.inputDone)
	}
}

func startWorkload(cfg WorkloadConfig, addrs, kafkaAddrs []string, rec *recorder, log *slog.Logger) (*workload, error) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{cfg: cfg, addrs: addrs, kafkaAddrs: kafkaAddrs, rec: rec, log: log, ctx: ctx, cancel: cancel,
		stopProd: make(chan struct{}), phases: &phaseHook{}, kafkaCopierDone: make(chan struct{}), rdkDone: make(chan struct{})}
	var err error
	if w.kafkaSec, err = cfg.Security.kafka(); err != nil {
		cancel()
		return nil, err
	}
	for i := 0; i < cfg.Producers; i++ {
		cl, err := cfg.newClient(addrs, client.WithRequestTimeout(cfg.RequestTimeout))
		if err != nil {
			w.stop()
			return nil, err
		}
		p, err := cl.NewProducer(client.WithDeliveryTimeout(cfg.DeliveryTimeout), client.WithLinger(2*time.Millisecond),
			client.WithIdempotence(!cfg.NoIdempotence))
		if err != nil {
			cl.Close()
			w.stop()
			return nil, err
		}
		w.prodMu.Lock()
		w.producers = append(w.producers, p)
		w.prodMu.Unlock()
		name := fmt.Sprintf("p%d", i+1)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer cl.Close()
			w.produce(name, p)
		}()
	}
	for i := 0; i < cfg.Consumers; i++ {
		name := fmt.Sprintf("c%d", i+1)
		w.wg.Add(1)
		go func() { defer w.wg.Done(); w.consume(name, client.ReadCommitted) }()
	}
	for i := 0; i < cfg.UncommittedConsumers; i++ {
		name := fmt.Sprintf("u%d", i+1)
		w.wg.Add(1)
		go func() { defer w.wg.Done(); w.consume(name, client.ReadUncommitted) }()
	}
	for i := 0; i < cfg.TxnProducers; i++ {
		w.wg.Add(1)
		go func() { defer w.wg.Done(); w.transact(i + 1) }()
	}
	w.copierDone, w.inputDone = make(chan struct{}), make(chan struct{})
	if cfg.Copier {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer close(w.copierDone)
			if cfg.CopierMembers > 0 {
				w.groupCopy()
			} else {
				w.copy()
			}
		}()
	} else {
		close(w.copierDone)
	}
	w.startKafka()
	return w, nil
}

// startKafka starts the Kafka-client workload's goroutines (kafka*.go).
func (w *workload) startKafka() {
	for i := range w.cfg.KafkaTxnProducers {
		w.wg.Add(1)
		go func() { defer w.wg.Done(); w.kafkaTransact(i + 1) }()
	}
	for i := range w.cfg.KafkaConsumers {
		w.wg.Add(1)
		go func() { defer w.wg.Done(); w.kafkaConsume(fmt.Sprintf("kc%d", i+1)) }()
	}
	if w.cfg.rdkCopier() {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer close(w.rdkDone)
			w.rdkCopy()
		}()
	} else {
		close(w.rdkDone)
	}
	if !w.cfg.kafkaCopier() {
		close(w.kafkaCopierDone)
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(w.kafkaCopierDone)
		w.kafkaCopy()
	}()
}

// produce sends unique values (producer/key/seq) at the configured rate
// until stopProd closes, then flushes (bounded) and closes the producer.
func (w *workload) produce(name string, p *client.Producer) {
	defer p.Close()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	perTick := max(1, w.cfg.Rate/100)
	var seq int64
loop:
	for {
		select {
		case <-w.stopProd:
			break loop
		case <-w.ctx.Done():
			break loop
		case <-tick.C:
		}
		for range perTick {
			key := fmt.Sprintf("k%03d", seq%int64(w.cfg.Keys))
			value := fmt.Sprintf("%s/%s/%d", name, key, seq)
			part := client.HashPartitioner{}.Partition(w.cfg.Topic, []byte(key), w.cfg.Partitions)
			i := w.rec.invoke(checker.Write{Producer: name, Partition: part, Seq: seq, Key: key, Value: value, Invoke: time.Now()})
			seq++
			// Send blocks while the producer's buffer is full (a slow or
			// failed-over cluster): the workload slows down with it.
			p.Send(w.ctx, client.Record{Topic: w.cfg.Topic, Partition: part, Key: []byte(key), Value: []byte(value)},
				func(md client.RecordMetadata, err error) { w.rec.complete(i, time.Now(), md, err) })
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.DeliveryTimeout+5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		w.log.Warn("producer flush", "producer", name, "err", err)
	}
}

// consume tails every partition from the beginning with isolation iso,
// recording what it reads, until the workload stops.
func (w *workload) consume(name string, iso client.Isolation) {
	cl, err := w.cfg.newClient(w.addrs, client.WithRequestTimeout(w.cfg.RequestTimeout))
	if err != nil {
		w.log.Error("consumer client", "err", err)
		return
	}
	defer cl.Close()
	co, err := cl.NewConsumer(client.WithMaxWait(200*time.Millisecond), client.WithIsolation(iso))
	if err != nil {
		w.log.Error("consumer", "err", err)
		return
	}
	defer co.Close()
	for _, topic := range w.cfg.Topics() {
		if iso == client.ReadUncommitted && w.cfg.rdkCopier() && topic == w.cfg.rdkOutput() {
			// An aborted copy and its committed retry carry one value:
			// read_uncommitted would see a duplicate (rdk_copier.go).
			continue
		}
		for p := int32(0); p < w.cfg.Partitions; p++ {
			if err := co.Assign(topic, p, client.OffsetEarliest); err != nil {
				w.log.Error("assign", "err", err)
				return
			}
		}
	}
	for w.ctx.Err() == nil {
		recs, err := co.Poll(w.ctx)
		if err != nil {
			if w.ctx.Err() != nil {
				return
			}
			w.log.Debug("poll", "consumer", name, "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-w.ctx.Done():
			}
			continue
		}
		w.rec.read(toReads(w.cfg, name, iso, recs, time.Now()))
	}
}

func toReads(wc WorkloadConfig, session string, iso client.Isolation, recs []client.Record, now time.Time) []checker.Read {
	out := make([]checker.Read, len(recs))
	for i, r := range recs {
		out[i] = checker.Read{Consumer: session, Partition: wc.logOf(r.Topic, r.Partition), Offset: r.Offset,
			Key: string(r.Key), Value: string(r.Value), Time: now, Committed: iso == client.ReadCommitted || wc.MislabelUncommitted}
	}
	return out
}

// stopProducing stops sending and waits (bounded by the delivery
// timeout) for the producers to flush.
func (w *workload) stopProducing() {
	select {
	case <-w.stopProd:
	default:
		close(w.stopProd)
	}
}

// stop ends everything and waits for every goroutine.
func (w *workload) stop() {
	w.stopProducing()
	w.cancel()
	w.wg.Wait()
}

// readAll reads every partition of the workload's topics from the
// beginning up to its end offset (the last stable offset: it reads with
// read_committed) as session name, within d.
func readAll(addrs []string, wc WorkloadConfig, session string, d time.Duration, rec *recorder) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cl, err := wc.newClient(addrs, client.WithRequestTimeout(5*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	ends := map[int32]int64{}
	for p := int32(0); p < wc.logs(); p++ {
		topic, part := wc.topicPartition(p)
		for {
			end, err := cl.ListOffsets(ctx, topic, part, sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0)
			if err == nil {
				ends[p] = end
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("final read: end offset of partition %d: %w", p, err)
			}
			time.Sleep(200 * time.Millisecond) // retry pacing within ctx
		}
	}
	co, err := cl.NewConsumer(client.WithMaxWait(100 * time.Millisecond))
	if err != nil {
		return err
	}
	defer co.Close()
	left := 0
	for p := int32(0); p < wc.logs(); p++ {
		if ends[p] > 0 {
			topic, part := wc.topicPartition(p)
			if err := co.Assign(topic, part, client.OffsetEarliest); err != nil {
				return err
			}
			left++
		}
	}
	for left > 0 {
		recs, err := co.Poll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("final read: %w (positions short of the end offsets %v)", ctx.Err(), ends)
			}
			continue
		}
		rec.read(toReads(wc, session, client.ReadCommitted, recs, time.Now()))
		for p := int32(0); p < wc.logs(); p++ {
			topic, part := wc.topicPartition(p)
			if pos, ok := co.Position(topic, part); ok && pos >= ends[p] && ends[p] > 0 {
				co.Unassign(topic, part)
				ends[p] = 0
				left--
			}
		}
	}
	return nil
}
