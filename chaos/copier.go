package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/chaos/checker"
	"github.com/sluice-io/sluice/client"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the transactional copier: it reads Topic (the idempotent
// producers' records) with read_committed and writes each record to
// Topic-out, partition for partition, in transactions that also write its
// next position in each input partition to Topic-pos (same partition
// number). Consumer groups do not exist yet, so the position travels in
// the transaction as a record, as docs/transactions.md shows. The copier
// restarts itself every copierRestartEvery transactions and whenever its
// producer fails for good, and resumes from the positions it reads back:
// output = input exactly once, across restarts and the faults.

const (
	copierID           = "chaos-copier"
	copierRestartEvery = 40
)

// copy runs copier instances until its input is complete (inputComplete)
// and it has caught up with the input's end offsets (bounded by the
// delivery timeout plus a minute after producing stopped, plus the time
// the input takes to complete).
func (w *workload) copy() {
	rng := rand.New(rand.NewPCG(0xc0, 0x9e))
	var give time.Time
	for instance := 1; w.ctx.Err() == nil; instance++ {
		if w.inputIsComplete() && give.IsZero() {
			give = time.Now().Add(w.cfg.DeliveryTimeout + time.Minute)
		}
		if !give.IsZero() && time.Now().After(give) {
			w.log.Warn("copier did not catch up with its input")
			return
		}
		if w.runCopier(fmt.Sprintf("x.%d", instance), rng) {
			return
		}
	}
}

// copierPositions reads the copier's committed positions back from
// Topic-pos with read_committed: the last record of each partition.
func copierPositions(ctx context.Context, cl *client.Client, wc WorkloadConfig) (map[int32]int64, error) {
	pos := map[int32]int64{}
	co, err := cl.NewConsumer(client.WithMaxWait(100 * time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer co.Close()
	left := 0
	ends := map[int32]int64{}
	for p := int32(0); p < wc.Partitions; p++ {
		end, err := cl.ListOffsets(ctx, wc.Topic+"-pos", p, sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0)
		if err != nil {
			return nil, err
		}
		if end > 0 {
			ends[p] = end
			left++
			if err := co.Assign(wc.Topic+"-pos", p, client.OffsetEarliest); err != nil {
				return nil, err
			}
		}
	}
	for left > 0 {
		recs, err := co.Poll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		for _, r := range recs {
			// "pos/<instance>/<txn>/<next>": unique values, next last.
			v := string(r.Value)
			n, err := strconv.ParseInt(v[strings.LastIndexByte(v, '/')+1:], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("copier position %q: %w", v, err)
			}
			pos[r.Partition] = n
		}
		for p, end := range ends {
			if at, ok := co.Position(wc.Topic+"-pos", p); ok && at >= end {
				co.Unassign(wc.Topic+"-pos", p)
				delete(ends, p)
				left--
			}
		}
	}
	return pos, nil
}

// runCopier runs one copier instance; it returns true when the copier is
// done (caught up after producing stopped).
func (w *workload) runCopier(name string, rng *rand.Rand) (done bool) {
	wc := w.cfg
	cl, err := wc.newClient(w.addrs, client.WithRequestTimeout(wc.RequestTimeout))
	if err != nil {
		w.pace(time.Second)
		return false
	}
	defer cl.Close()
	// Also aborts whatever the previous instance left open, so that the
	// positions read next are final.
	p := w.initCopierProducer(cl, copierID)
	if p == nil {
		return false
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	pos, err := copierPositions(ctx, cl, wc)
	cancel()
	if err != nil {
		w.log.Warn("copier positions", "copier", name, "err", err)
		return false
	}
	co, err := cl.NewConsumer(client.WithMaxWait(200 * time.Millisecond))
	if err != nil {
		return false
	}
	defer co.Close()
	for part := int32(0); part < wc.Partitions; part++ {
		start, ok := pos[part]
		if !ok {
			start = client.OffsetEarliest
		}
		if err := co.Assign(wc.Topic, part, start); err != nil {
			return false
		}
	}
	var wseq int64
	for k := 0; k < copierRestartEvery; {
		if w.ctx.Err() != nil {
			return true
		}
		pctx, cancel := context.WithTimeout(w.ctx, 500*time.Millisecond)
		recs, err := co.Poll(pctx)
		cancel()
		if err == nil && len(recs) > 0 {
			recs = append([]client.Record(nil), recs...)
			k++
			switch w.copyTxn(p, co, name, fmt.Sprintf("%s/%d", name, k), recs, pos, rng, &wseq) {
			case copyFailed:
				return false
			case copyCommitted, copyAborted:
			}
			continue
		}
		if w.inputIsComplete() && w.copierCaughtUp(cl, co) {
			return true
		}
	}
	return false // a planned restart
}

// initCopierProducer makes a copier instance's producer, transactional
// id txnID, on cl and initializes its transactions (which aborts what an
// earlier instance with the id left open), trying again until that
// succeeds, the run ends or the producer fails for good. It returns nil
// when it gave up (after a second's pause if the producer could not be
// made); the caller closes the producer it returns.
func (w *workload) initCopierProducer(cl *client.Client, txnID string) *client.Producer {
	wc := w.cfg
	p, err := cl.NewProducer(client.WithTransactionalID(txnID), client.WithTransactionTimeout(wc.TxnTimeout),
		client.WithDeliveryTimeout(wc.DeliveryTimeout), client.WithLinger(time.Millisecond))
	if err != nil {
		w.pace(time.Second)
		return nil
	}
	for {
		ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
		err := p.InitTransactions(ctx)
		cancel()
		if err == nil {
			return p
		}
		var fatal *client.TransactionFatalError
		if w.ctx.Err() != nil || errors.As(err, &fatal) {
			p.Close()
			return nil
		}
	}
}

type copyResult int

const (
	copyCommitted copyResult = iota
	copyAborted              // positions rewound; the records are copied again
	copyFailed               // the instance cannot go on
)

// copyTxn copies recs and the positions after them in one transaction
// (about one in six aborted on purpose), updating pos on commit and
// rewinding co on abort.
func (w *workload) copyTxn(p *client.Producer, co *client.Consumer, name, txnID string, recs []client.Record, pos map[int32]int64, rng *rand.Rand, wseq *int64) copyResult {
	wc := w.cfg
	if err := p.BeginTransaction(); err != nil {
		return copyFailed
	}
	ti := w.rec.beginTxn(checker.Txn{ID: txnID, Producer: name, Begin: time.Now()})
	next := map[int32]int64{}
	send := func(topic string, part int32, key []byte, value, of string) {
		i := w.invokeCopierWrite(name, txnID, topic, part, key, value, of, wseq)
		p.Send(w.ctx, client.Record{Topic: topic, Partition: part, Key: key, Value: []byte(value)},
			func(md client.RecordMetadata, err error) { w.rec.complete(i, time.Now(), md, err) })
	}
	for _, r := range recs {
		send(wc.Topic+"-out", r.Partition, r.Key, fmt.Sprintf("copy/%s/%s", txnID, r.Value), string(r.Value))
		next[r.Partition] = r.Offset + 1
	}
	for part, n := range next {
		send(wc.Topic+"-pos", part, []byte("pos"), fmt.Sprintf("pos/%s/%d", txnID, n), "")
	}
	rewind := func() {
		for part := range next {
			start, ok := pos[part]
			if !ok {
				start = client.OffsetEarliest
			}
			_ = co.Seek(wc.Topic, part, start)
		}
	}
	if rng.IntN(6) == 0 {
		return w.abortCopy(p, name, ti, nil, rewind)
	}
	return w.commitCopy(p, name, ti, rewind, func() {
		for part, n := range next {
			pos[part] = n
		}
	})
}

// abortCopy aborts copy transaction ti (for cause; nil: on purpose) and
// then rewinds the instance's consumer to its positions before it; the
// instance cannot go on if the abort failed.
func (w *workload) abortCopy(p *client.Producer, name string, ti int, cause error, rewind func()) copyResult {
	ok := w.abortTxn(p, name, ti, cause)
	rewind()
	if !ok {
		return copyFailed
	}
	return copyAborted
}

// commitCopy commits copy transaction ti and then calls committed; a
// commit refused as abortable is aborted instead (abortCopy, rewind). An
// unknown outcome ends the instance: the next one reads the committed
// positions back.
func (w *workload) commitCopy(p *client.Producer, name string, ti int, rewind, committed func()) copyResult {
	switch err := w.commitTxn(p, name, ti); {
	case err == nil:
		committed()
		return copyCommitted
	case errors.As(err, new(*client.TransactionAbortableError)):
		return w.abortCopy(p, name, ti, err, rewind)
	default:
		return copyFailed
	}
}

// invokeCopierWrite records in the history that copier instance name
// writes value (key) to topic's partition part in transaction txnID, a
// copy of the input value copyOf ("" for a position record), as its
// write *wseq (which it advances); it returns the write's index for
// complete.
func (w *workload) invokeCopierWrite(name, txnID, topic string, part int32, key []byte, value, copyOf string, wseq *int64) int {
	i := w.rec.invoke(checker.Write{Producer: name, Partition: w.cfg.logOf(topic, part), Seq: *wseq, Key: string(key),
		Value: value, Invoke: time.Now(), Txn: txnID, CopyOf: copyOf})
	*wseq++
	return i
}

// inputIsComplete reports whether inputComplete was called.
func (w *workload) inputIsComplete() bool {
	select {
	case <-w.inputDone:
		return true
	default:
		return false
	}
}

// copierCaughtUp reports whether co has read every input partition to its
// end offset (its LSO). The consumer's position, not the committed one,
// is compared: the input holds transactions too, and a partition that
// ends with a marker or an aborted record ends past the last record the
// copier can read. Every transaction is committed or aborted before the
// next poll, so nothing read is left uncommitted.
func (w *workload) copierCaughtUp(cl *client.Client, co *client.Consumer) bool {
	for part := int32(0); part < w.cfg.Partitions; part++ {
		ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
		end, err := cl.ListOffsets(ctx, w.cfg.Topic, part, sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0)
		cancel()
		if at, ok := co.Position(w.cfg.Topic, part); err != nil || !ok || at < end {
			return false
		}
	}
	return true
}
