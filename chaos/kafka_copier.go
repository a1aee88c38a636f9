package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-io/sluice/chaos/checker"
)

// This file is the Kafka copier: KafkaCopierMembers franz-go
// GroupTransactSessions, members of the consumer group
// chaos-kafka-copiers, reading Topic-kafka (the Kafka transactional
// producers' first topic, aborted transactions included) with
// read_committed and copying each record to Topic-kafka-out, partition
// for partition, in transactions that commit the group's offsets
// (TxnOffsetCommit; KIP-447), through the Kafka door. Each member slot
// (transactional id chaos-kafka-copier-N) runs instances one after
// another (kgN.1, kgN.2, ... in the history), goroutines of the harness:
// an instance leaves the group after copierRestartEvery transactions;
// one in three instead crashes in the middle of a transaction (its
// connections severed: no EndTxn, no leave; the group moves its
// partitions after the session timeout and the next instance's
// InitProducerId aborts its transaction); one in six is frozen in a
// transaction past its transaction and session timeouts (its connections
// held by an ioGate) and then goes on as a zombie, whose late offsets and
// EndTxn must be refused. One in six transactions is aborted on purpose;
// the session rewinds to the committed offsets. The checker's
// copy-not-exactly-once class judges the output against the group's
// final offsets, as it does the gRPC copier's.

const (
	kafkaCopierGroup = "chaos-kafka-copiers"
	kafkaCopierTxnID = "chaos-kafka-copier"
	// kafkaCopierQuiet is how long the copier must have had nothing to
	// copy, after the input is complete, before it is judged caught up.
	kafkaCopierQuiet = 3 * time.Second
)

// kafkaCopy runs the member slots until the input is complete and the
// group's committed offsets are past every input record read_committed
// readers have seen (bounded like groupCopy).
func (w *workload) kafkaCopy() {
	var lastCopy atomic.Int64 // unix nanoseconds of the last transaction with records
	lastCopy.Store(time.Now().UnixNano())
	end := w.startCopierSlots(w.cfg.KafkaCopierMembers, 0x4b, func(slot, instance int, rng *rand.Rand, stop <-chan struct{}) {
		w.runKafkaCopier(slot, instance, rng, stop, &lastCopy)
	})
	defer end()
	w.watchCopier("kafka copier",
		func() bool {
			return w.inputIsComplete() && time.Since(time.Unix(0, lastCopy.Load())) >= kafkaCopierQuiet
		},
		func() bool { return w.kafkaGroupCaughtUp(kafkaCopierGroup, w.cfg.kafkaCopierInput()) })
}

// kafkaGroupCaughtUp reports whether group's committed offset of every
// partition of its input topic is past the last record a read_committed
// session read there.
func (w *workload) kafkaGroupCaughtUp(group, topic string) bool {
	ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
	defer cancel()
	offs, err := kafkaGroupOffsets(ctx, w.kafkaAddrs, w.kafkaSec, group, topic)
	if err != nil {
		return false
	}
	last := map[int32]int64{}
	w.rec.mu.Lock()
	for _, rd := range w.rec.reads {
		if rd.Committed && rd.Offset >= last[rd.Partition] {
			last[rd.Partition] = rd.Offset + 1
		}
	}
	w.rec.mu.Unlock()
	for p := int32(0); p < w.cfg.Partitions; p++ {
		if offs[p] < last[w.cfg.logOf(topic, p)] {
			return false
		}
	}
	return true
}

// runKafkaCopier runs one instance of member slot s.
func (w *workload) runKafkaCopier(slot, instance int, rng *rand.Rand, stop <-chan struct{}, lastCopy *atomic.Int64) {
	wc := w.cfg
	name := fmt.Sprintf("kg%d.%d", slot, instance)
	crash := rng.IntN(3) == 0
	crashAt := 1 + rng.IntN(copierRestartEvery)
	zombie := !crash && (rng.IntN(6) == 0 || slot == 1 && instance == 2)
	zombieAt := 1 + rng.IntN(5)
	conns := &kafkaConns{}
	watch := &endTxnWatch{}
	opts := w.kafkaOpts(conns.dial, kgo.TransactionalID(fmt.Sprintf("%s-%d", kafkaCopierTxnID, slot)), kgo.TransactionTimeout(wc.TxnTimeout),
		kgo.ConsumerGroup(kafkaCopierGroup), kgo.ConsumeTopics(wc.kafkaCopierInput()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Millisecond),
		kgo.SessionTimeout(copierSessionTimeout), kgo.RebalanceTimeout(kafkaRebalanceTimeout),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.WithLogger(watch))
	if wc.KafkaGroupProtocol != GroupProtocolClassic {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		w.log.Error("kafka copier session", "copier", name, "err", err)
		w.pace(time.Second)
		return
	}
	crashed := false
	defer func() {
		if !crashed {
			sess.Close() // leaves the group
			return
		}
		// Close's leave goes nowhere: the member stays until its session
		// times out. Closing may wait out franz-go's retries of the
		// leave; the slot's next instance does not wait for it.
		conns.sever()
		w.wg.Add(1)
		go func() { defer w.wg.Done(); sess.Close() }()
	}()
	var wseq int64
	for k := 0; k < copierRestartEvery; {
		select {
		case <-stop:
			return
		default:
		}
		if w.ctx.Err() != nil {
			return
		}
		pctx, cancel := context.WithTimeout(w.ctx, 500*time.Millisecond)
		fs := sess.PollFetches(pctx)
		cancel()
		if fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				w.log.Debug("kafka copier fetch", "copier", name, "topic", t, "partition", p, "err", err)
			}
		})
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		k++
		lastCopy.Store(time.Now().UnixNano())
		txnID := fmt.Sprintf("%s/%d", name, k)
		if err := sess.Begin(); err != nil {
			w.log.Warn("kafka copier begin", "copier", name, "err", err)
			return
		}
		ti := w.rec.beginTxn(checker.Txn{ID: txnID, Producer: name, Begin: time.Now()})
		var failed atomic.Bool
		for _, r := range recs {
			value := fmt.Sprintf("copy/%s/%s", txnID, r.Value)
			i := w.invokeCopierWrite(name, txnID, wc.kafkaCopierOutput(), r.Partition, r.Key, value, string(r.Value), &wseq)
			sess.Produce(w.ctx, &kgo.Record{Topic: wc.kafkaCopierOutput(), Partition: r.Partition, Key: r.Key, Value: []byte(value)},
				func(r *kgo.Record, err error) {
					w.rec.completeKafka(i, time.Now(), r.Offset, err)
					if err != nil {
						failed.Store(true)
					}
				})
		}
		if crash && k == crashAt {
			// Never committed: the next instance's InitProducerId (or the
			// transaction timeout) aborts it.
			crashed = true
			w.kafkaCrashes.Add(1)
			w.rec.endTxn(ti, time.Now(), checker.TxnAborted, errors.New("kafka copier crashed in the transaction"))
			w.log.Info("kafka copier crashes in a transaction", "copier", name, "txn", txnID)
			return
		}
		if zombie && k == zombieAt {
			w.freezeMember(&conns.gate, "kafka copier", name, &w.kafkaZombies)
		}
		goOn := w.endKafkaCopy(sess, watch, name, txnID, ti, rng.IntN(6) == 0, &failed)
		if zombie && k == zombieAt {
			w.rec.mu.Lock()
			t := w.rec.txns[ti]
			w.rec.mu.Unlock()
			w.log.Info("kafka copier zombie's transaction ended", "copier", name, "txn", txnID, "outcome", t.Outcome, "err", t.Err)
		}
		if !goOn {
			return
		}
	}
}

// endKafkaCopy ends copy transaction ti: an abort when planned or when a
// record was not acknowledged, else a commit (with the offsets; the
// session aborts instead if the group rebalanced or refused them). It
// records the outcome and returns false when the instance should end.
func (w *workload) endKafkaCopy(sess *kgo.GroupTransactSession, watch *endTxnWatch, name, txnID string, ti int, abort bool, failed *atomic.Bool) bool {
	ctx, cancel := context.WithTimeout(w.ctx, kafkaTxnPatience)
	defer cancel()
	if !abort {
		// The session flushes in End too; flushed first, a record that
		// failed turns the commit into an abort here.
		if err := sess.Client().Flush(ctx); err != nil || failed.Load() {
			abort = true
		}
	}
	if abort {
		_, err := sess.End(ctx, kgo.TryAbort)
		w.rec.endTxn(ti, time.Now(), checker.TxnAborted, err)
		if err != nil {
			w.log.Warn("kafka copier abort", "copier", name, "txn", txnID, "err", err)
			return false
		}
		return true
	}
	w.rec.commitInvoked(ti, time.Now())
	watch.sent.Store(false)
	committed, err := sess.End(ctx, kgo.TryCommit)
	switch {
	case committed && err == nil:
		w.rec.endTxn(ti, time.Now(), checker.TxnCommitted, nil)
		return true
	case !watch.sent.Load():
		// The session aborted before sending the commit (a rebalance,
		// offsets refused) or failed first: not committed.
		w.rec.endTxn(ti, time.Now(), checker.TxnAborted, err)
		if err != nil {
			w.log.Warn("kafka copier end", "copier", name, "txn", txnID, "err", err)
			if kafkaFenced(err) {
				w.rec.fence(name, time.Now(), err)
			}
			return false
		}
		return true
	default:
		// The commit was sent and not confirmed (the session may have
		// retried it as an abort): unknown. A new instance starts from
		// the group's committed offsets.
		w.rec.endTxn(ti, time.Now(), checker.TxnUnknown, err)
		w.log.Warn("kafka copier commit outcome unknown", "copier", name, "txn", txnID, "err", err)
		if kafkaFenced(err) {
			w.rec.fence(name, time.Now(), err)
		}
		return false
	}
}
