package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/chaos/checker"
	"github.com/sluice-io/sluice/client"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the group-mode transactional copier (WorkloadConfig
// CopierMembers > 0): CopierMembers members of one consumer group share
// the input topic's partitions; each copies what it reads to Topic-out,
// partition for partition, in transactions that carry its consumer
// offsets (SendOffsetsToTransaction, KIP-447). Each member slot runs
// instances one after another, all with the slot's transactional id, so
// a new instance fences the previous one's producer. An instance ends
// after copierRestartEvery transactions, gracefully (commit, leave the
// group), or — one in three — by crashing: in the middle of a
// transaction it stops without ending it, and its consumer stops without
// leaving (client.WithLeaveGroupOnClose(false)), so the group moves its
// partitions only after the session timeout and the next instance's
// InitTransactions aborts the abandoned transaction. Output = input
// exactly once, judged by the checker's copy-not-exactly-once class
// against the group's final committed offsets.

const (
	copierGroupID = "chaos-copiers"
	// copierSessionTimeout is the members' session timeout: a crashed
	// member's partitions move after it.
	copierSessionTimeout = 3 * time.Second
)

// groupCopy runs the member slots until the input is complete and every
// input partition was seen at its end by an instance with nothing in
// flight (bounded like copy).
func (w *workload) groupCopy() {
	caught := &caughtUp{at: map[int32]int64{}}
	end := w.startCopierSlots(w.cfg.CopierMembers, 0xc0, func(slot, instance int, rng *rand.Rand, stop <-chan struct{}) {
		if w.cfg.CopierInProcess {
			w.runGroupCopier(slot, instance, rng, stop, caught, true)
			return
		}
		// One instance in three is SIGKILLed, one in six SIGSTOPped
		// into a zombie, 1-8 s after it started.
		var fate memberFate
		switch rng.IntN(6) {
		case 0, 1:
			fate.killAfter = time.Second + time.Duration(rng.Int64N(int64(7*time.Second)))
		case 2:
			fate.pauseAfter = time.Second + time.Duration(rng.Int64N(int64(7*time.Second)))
		}
		w.runGroupMemberProcess(slot, instance, rng.Uint64(), fate, stop, caught)
	})
	defer end()
	cl, err := w.cfg.newClient(w.addrs, client.WithRequestTimeout(w.cfg.RequestTimeout))
	if err != nil {
		w.log.Warn("group copier: no client", "err", err)
		return
	}
	defer cl.Close()
	w.watchCopier("group copier", w.inputIsComplete, func() bool { return w.groupCaughtUp(cl, caught) })
}

// caughtUp holds, per input partition, the position an instance had when
// a poll found nothing more to read and no transaction was in flight.
type caughtUp struct {
	mu sync.Mutex // guards at
	at map[int32]int64
	// emit, in a member process, reports each position to the harness.
	emit func(memberEvent)
}

func (c *caughtUp) set(p int32, pos int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at[p] = pos
	if c.emit != nil {
		c.emit(memberEvent{E: "caught", Partition: p, Position: pos})
	}
}

// groupCaughtUp reports whether every input partition was seen at or past
// its end offset.
func (w *workload) groupCaughtUp(cl *client.Client, caught *caughtUp) bool {
	for part := int32(0); part < w.cfg.Partitions; part++ {
		ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
		end, err := cl.ListOffsets(ctx, w.cfg.Topic, part, sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0)
		cancel()
		caught.mu.Lock()
		at, ok := caught.at[part]
		caught.mu.Unlock()
		if err != nil || (end > 0 && (!ok || at < end)) {
			return false
		}
	}
	return true
}

// runGroupCopier runs one instance of member slot s. With simulateCrash
// (in-process members) one instance in three crashes on its own in the
// middle of a transaction; member processes are killed by the harness
// instead.
func (w *workload) runGroupCopier(slot, instance int, rng *rand.Rand, stop <-chan struct{}, caught *caughtUp, simulateCrash bool) {
	wc := w.cfg
	name := fmt.Sprintf("g%d.%d", slot, instance)
	crash := simulateCrash && rng.IntN(3) == 0
	crashAt := 1 + rng.IntN(copierRestartEvery)
	// In process, one instance in six (and slot 1's second, so that every
	// run has one) is frozen in a transaction into a zombie: its
	// connections held past its transaction and session timeouts (ioGate).
	zombie := simulateCrash && !crash && (rng.IntN(6) == 0 || slot == 1 && instance == 2)
	zombieAt := 1 + rng.IntN(5) // early: an instance may end before long
	gate := &ioGate{}
	defer gate.release()
	cl, err := wc.newClient(w.addrs, client.WithRequestTimeout(wc.RequestTimeout), client.WithDialer(gate.dial))
	if err != nil {
		w.pace(time.Second)
		return
	}
	defer cl.Close()
	p := w.initCopierProducer(cl, fmt.Sprintf("%s-%d", copierID, slot))
	if p == nil {
		return
	}
	defer p.Close()
	var mu sync.Mutex // held across a poll and its transaction; guards committed
	committed := map[client.TopicPartition]int64{}
	co, err := cl.NewConsumer(client.WithGroup(copierGroupID), client.WithAutoCommit(false, 0),
		client.WithAutoOffsetReset(client.OffsetEarliest), client.WithSessionTimeout(copierSessionTimeout),
		client.WithMaxWait(200*time.Millisecond), client.WithLeaveGroupOnClose(!crash),
		client.WithRebalanceListener(copierListener(&mu, committed)))
	if err != nil {
		return
	}
	defer co.Close()
	if err := co.Subscribe(wc.Topic); err != nil {
		return
	}
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
		mu.Lock()
		pctx, cancel := context.WithTimeout(w.ctx, 500*time.Millisecond)
		recs, err := co.Poll(pctx)
		cancel()
		if err != nil || len(recs) == 0 {
			// Poll ends with its context's error when nothing arrived:
			// the member has read everything of its partitions so far.
			if errors.Is(err, context.DeadlineExceeded) && w.ctx.Err() == nil {
				for _, tp := range co.Assignment() {
					if at, ok := co.Position(tp.Topic, tp.Partition); ok {
						caught.set(tp.Partition, at)
					}
				}
			}
			mu.Unlock()
			continue
		}
		recs = append([]client.Record(nil), recs...)
		k++
		var freeze func()
		if zombie && k == zombieAt {
			freeze = func() { w.freezeMember(gate, "group copier", name, &w.memberPauses) }
		}
		res := w.copyGroupTxn(p, co, name, fmt.Sprintf("%s/%d", name, k), recs, committed, rng, &wseq, crash && k == crashAt, freeze)
		mu.Unlock()
		if res != copyCommitted && res != copyAborted {
			return // failed, or crashed on purpose
		}
	}
}

// copierListener is a group copier instance's rebalance listener; mu is
// held across a poll and its transaction and guards committed, the
// positions the instance's own transactions committed (what an abort
// rewinds to). A partition revoked or lost must have nothing in flight
// when the consumer lets it go, and its position must be forgotten: the
// next owner commits past it, and an abort of the transaction in flight
// must not seek the partition back to it should it come back (a fenced
// member rejoins at once and may get the same partitions, positioned at
// the group's committed offsets). Lost runs before the member rejoins, so
// waiting for mu there keeps the rejoin behind the transaction in flight,
// whose offsets the coordinator then refuses under the old membership.
func copierListener(mu *sync.Mutex, committed map[client.TopicPartition]int64) client.RebalanceCallbacks {
	forget := func(parts []client.TopicPartition) {
		mu.Lock()
		defer mu.Unlock()
		for _, tp := range parts {
			delete(committed, tp)
		}
	}
	return client.RebalanceCallbacks{
		Revoked: func(_ context.Context, parts []client.TopicPartition) { forget(parts) },
		Lost:    forget,
	}
}

// freezeMember makes the in-process member name of copier what a
// zombie, counted in zombies: its connections are held (gate) and its
// copy loop waits, for zombieHold — past its transaction timeout and its
// session timeout — then both go on with what they had: the late
// TxnOffsetCommit, produce and EndTxn of a transaction the coordinator
// aborted, under a membership that expired.
func (w *workload) freezeMember(gate *ioGate, what, name string, zombies *atomic.Int64) {
	hold := zombieHold(w.cfg)
	zombies.Add(1)
	w.log.Info(what+" member frozen in a transaction (connections held): a zombie when released", "copier", name, "for", hold)
	gate.hold()
	select {
	case <-time.After(hold):
	case <-w.ctx.Done():
	}
	gate.release()
	w.log.Info(what+" member released as a zombie: its transaction timed out, its membership expired", "copier", name)
}

// copyGroupTxn copies recs in one transaction that also commits the
// consumer's offsets after them (about one in six aborted on purpose),
// updating committed on commit and rewinding co on abort. With crash it
// stops after sending, leaving the transaction open (copyFailed); freeze,
// when not nil, runs after sending (an in-process zombie).
func (w *workload) copyGroupTxn(p *client.Producer, co *client.Consumer, name, txnID string, recs []client.Record,
	committed map[client.TopicPartition]int64, rng *rand.Rand, wseq *int64, crash bool, freeze func()) copyResult {
	wc := w.cfg
	if err := p.BeginTransaction(); err != nil {
		w.log.Warn("begin transaction", "copier", name, "err", err)
		return copyFailed
	}
	ti := w.rec.beginTxn(checker.Txn{ID: txnID, Producer: name, Begin: time.Now()})
	first := map[client.TopicPartition]int64{}
	next := map[client.TopicPartition]int64{}
	for _, r := range recs {
		tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		if _, ok := first[tp]; !ok {
			first[tp] = r.Offset
		}
		next[tp] = r.Offset + 1
		value := fmt.Sprintf("copy/%s/%s", txnID, r.Value)
		i := w.invokeCopierWrite(name, txnID, wc.Topic+"-out", r.Partition, r.Key, value, string(r.Value), wseq)
		p.Send(w.ctx, client.Record{Topic: wc.Topic + "-out", Partition: r.Partition, Key: r.Key, Value: []byte(value)},
			func(md client.RecordMetadata, err error) { w.rec.complete(i, time.Now(), md, err) })
	}
	if crash {
		// Never committed: the next instance's InitTransactions (or the
		// transaction timeout) aborts it.
		w.rec.endTxn(ti, time.Now(), checker.TxnAborted, errors.New("copier crashed in the transaction"))
		w.log.Info("group copier crashes in a transaction", "copier", name, "txn", txnID)
		return copyFailed
	}
	if freeze != nil {
		freeze()
	}
	rewind := func() {
		for tp, off := range first {
			if c, ok := committed[tp]; ok {
				off = c
			}
			_ = co.Seek(tp.Topic, tp.Partition, off)
		}
	}
	abort := func(cause error) copyResult { return w.abortCopy(p, name, ti, cause, rewind) }
	if rng.IntN(6) == 0 {
		return abort(nil)
	}
	ctx, cancel := context.WithTimeout(w.ctx, 4*wc.RequestTimeout)
	err := p.SendOffsetsToTransaction(ctx, next, co.GroupMetadata())
	cancel()
	if err != nil {
		w.log.Warn("send offsets to transaction", "copier", name, "txn", txnID, "err", err)
		if errors.As(err, new(*client.TransactionAbortableError)) {
			return abort(err)
		}
		w.rec.endTxn(ti, time.Now(), checker.TxnAborted, err) // fatal before the commit: never committed
		if errors.Is(err, client.ErrProducerFenced) {
			w.rec.fence(name, time.Now(), err)
		}
		return copyFailed
	}
	return w.commitCopy(p, name, ti, rewind, func() {
		for part, n := range next {
			committed[part] = n
		}
	})
}

// groupCopierEnds reads the group's final committed offsets of every
// input partition (0 where none is committed).
func groupCopierEnds(ctx context.Context, cl *client.Client, wc WorkloadConfig) (map[int32]int64, error) {
	offs, err := cl.FetchOffsets(ctx, copierGroupID, wc.Topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for tp, o := range offs {
		if tp.Topic == wc.Topic && o.Offset >= 0 {
			out[tp.Partition] = o.Offset
		}
	}
	return out, nil
}
