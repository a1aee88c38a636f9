package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-io/sluice/chaos/checker"
)

// This file is the Kafka transactional producers: franz-go clients with a
// transactional id (chaos-kafka-txn-N), through the Kafka door, speaking
// KIP-890's transaction version 2 as the door finalizes it. Like the gRPC
// ones (txnworkload.go) each runs transactions of 2-5 records over
// random partitions of its topics (Topic-kafka, Topic-kafka-2, ...), one
// in three aborted on purpose (half of those after the records were
// acknowledged), every value unique, every transaction in the history:
// committed when EndTransaction(commit) returned nil, aborted when the
// commit was never sent, unknown when it was sent and not confirmed.
// A commit is tried only when every record of the transaction was
// acknowledged: franz-go turns a commit of a transaction none of whose
// produces succeeded into an abort and still returns nil.

// kafkaTxnID is the Kafka transactional producers' transactional id
// before their number (chaos-kafka-txn-N).
const kafkaTxnID = "chaos-kafka-txn"

// kafkaTxnPatience bounds one EndTransaction (franz-go retries inside it
// for up to kafkaRetryTimeout).
const kafkaTxnPatience = kafkaRetryTimeout + 15*time.Second

// kafkaTransact runs transactions as transactional id
// chaos-kafka-txn-N until the workload stops producing. Each client
// instance is a new name in the history (ktN.1, ktN.2, ...): a commit
// that stays unknown or a client that fails for good ends the instance,
// and the next one's InitProducerId fences it and aborts what it left
// open.
func (w *workload) kafkaTransact(n int) {
	id := fmt.Sprintf("%s-%d", kafkaTxnID, n)
	rng := rand.New(rand.NewPCG(uint64(n), 0x4b7))
	var seq int64 // value uniqueness across instances
	for instance := 1; !w.producingStopped(); instance++ {
		w.runKafkaTxnInstance(id, fmt.Sprintf("kt%d.%d", n, instance), rng, &seq)
	}
}

// runKafkaTxnInstance runs one client instance until it fails or
// producing stops.
func (w *workload) runKafkaTxnInstance(id, name string, rng *rand.Rand, seq *int64) {
	watch := &endTxnWatch{}
	cl, err := kgo.NewClient(w.kafkaOpts(nil, kgo.TransactionalID(id), kgo.TransactionTimeout(w.cfg.TxnTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Millisecond), kgo.WithLogger(watch))...)
	if err != nil {
		w.log.Error("kafka transactional client", "producer", name, "err", err)
		w.pace(time.Second)
		return
	}
	defer cl.Close()
	wseq := int64(0)
	tick := time.NewTicker(time.Second / time.Duration(max(w.cfg.TxnRate, 1)))
	defer tick.Stop()
	for k := 0; ; k++ {
		select {
		case <-w.stopProd:
			return
		case <-w.ctx.Done():
			return
		case <-tick.C:
		}
		if !w.kafkaTxn(cl, watch, id, name, fmt.Sprintf("%s/%d", name, k), rng, seq, &wseq) {
			w.pace(500 * time.Millisecond) // a new instance, not a busy loop against a cluster without quorum
			return
		}
	}
}

// kafkaTxn runs one transaction and returns false when the client
// instance cannot go on.
func (w *workload) kafkaTxn(cl *kgo.Client, watch *endTxnWatch, tid, name, txnID string, rng *rand.Rand, seq, wseq *int64) bool {
	if err := cl.BeginTransaction(); err != nil {
		w.log.Warn("kafka begin transaction", "producer", name, "err", err)
		return false
	}
	ti := w.rec.beginTxn(checker.Txn{ID: txnID, Producer: name, Begin: time.Now()})
	topics := w.cfg.kafkaTxnTopics()
	// The records' partitions are drawn before the first is sent (in the
	// order they always were): a record's callback fires the Ongoing
	// event with parts, so parts is complete once any record is on its way.
	type dest struct {
		topic string
		part  int32
	}
	dests := make([]dest, 2+rng.IntN(4))
	var parts []int32
	for k := range dests {
		dests[k] = dest{topics[rng.IntN(len(topics))], rng.Int32N(w.cfg.Partitions)}
		if log := w.cfg.logOf(dests[k].topic, dests[k].part); !slices.Contains(parts, log) {
			parts = append(parts, log)
		}
	}
	parts = slices.Clip(parts)
	phase := func(ph TxnPhase, committed bool) {
		w.phases.fire(PhaseEvent{Phase: ph, TransactionalID: tid, Txn: txnID, Committed: committed, Partitions: parts})
	}
	var failed, acked atomic.Bool
	for _, d := range dests {
		topic, part := d.topic, d.part
		key := fmt.Sprintf("k%03d", *seq%int64(w.cfg.Keys))
		value := fmt.Sprintf("%s/%s/%d", name, key, *seq)
		i := w.rec.invoke(checker.Write{Producer: name, Partition: w.cfg.logOf(topic, part), Seq: *wseq, Key: key, Value: value,
			Invoke: time.Now(), Txn: txnID})
		*seq++
		*wseq++
		cl.Produce(w.ctx, &kgo.Record{Topic: topic, Partition: part, Key: []byte(key), Value: []byte(value)},
			func(r *kgo.Record, err error) {
				w.rec.completeKafka(i, time.Now(), r.Offset, err)
				if err != nil {
					failed.Store(true)
				} else if acked.CompareAndSwap(false, true) {
					phase(PhaseOngoing, false)
				}
			})
	}
	if rng.IntN(3) == 0 {
		if rng.IntN(2) == 0 {
			// Half the planned aborts wait for the records' acks, so that
			// aborted data sits in the log for read_committed readers to
			// wrongly see; the others drop what is not yet sent.
			ctx, cancel := context.WithTimeout(w.ctx, 4*w.cfg.RequestTimeout)
			_ = cl.Flush(ctx) // a record that fails only makes the abort more needed
			cancel()
		}
		phase(PhasePrepare, false)
		ok := w.kafkaAbort(cl, name, ti, nil)
		if ok {
			phase(PhaseMarkers, false)
		}
		return ok
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.DeliveryTimeout+5*time.Second)
	err := cl.Flush(ctx)
	cancel()
	if err != nil || failed.Load() {
		// Never commit a transaction with a record not acknowledged.
		return w.kafkaAbort(cl, name, ti, errors.Join(errors.New("a record was not acknowledged"), err))
	}
	w.rec.commitInvoked(ti, time.Now())
	watch.sent.Store(false)
	phase(PhasePrepare, true) // the records are flushed: what a kill hits is EndTxn
	ctx, cancel = context.WithTimeout(w.ctx, kafkaTxnPatience)
	err = cl.EndTransaction(ctx, kgo.TryCommit)
	cancel()
	switch {
	case err == nil:
		w.rec.endTxn(ti, time.Now(), checker.TxnCommitted, nil)
		phase(PhaseMarkers, true)
		return true
	case !watch.sent.Load() || errors.Is(err, kerr.OperationNotAttempted):
		// The commit was never sent: abort (franz-go keeps the
		// transaction for the abort when it did not attempt the commit).
		return w.kafkaAbort(cl, name, ti, err)
	default:
		w.rec.endTxn(ti, time.Now(), checker.TxnUnknown, err)
		w.log.Warn("kafka commit outcome unknown", "producer", name, "txn", txnID, "err", err)
		if kafkaFenced(err) {
			w.rec.fence(name, time.Now(), err)
		}
		return false
	}
}

// kafkaAbort aborts transaction ti (cause: why; nil for a planned
// abort). It is recorded aborted whether or not the abort is confirmed:
// its commit was never sent, so the coordinator aborts it (on the
// timeout, or when the next instance's InitProducerId fences this one).
// It returns false when the instance cannot go on.
func (w *workload) kafkaAbort(cl *kgo.Client, name string, ti int, cause error) bool {
	ctx, cancel := context.WithTimeout(w.ctx, kafkaTxnPatience)
	err := cl.AbortBufferedRecords(ctx)
	if err == nil {
		err = cl.EndTransaction(ctx, kgo.TryAbort)
	}
	cancel()
	w.rec.endTxn(ti, time.Now(), checker.TxnAborted, errors.Join(cause, err))
	if err != nil {
		w.log.Warn("kafka abort", "producer", name, "err", err)
		if kafkaFenced(err) {
			w.rec.fence(name, time.Now(), err)
		}
		return false
	}
	return true
}

// kafkaFenced reports whether err says the producer was fenced.
func kafkaFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}
