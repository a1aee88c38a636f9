package txn

import (
	"context"
	"slices"
	"sync"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Concurrent AddPartitions of one TV2 transaction are written together.
//
// The partition leaders of a TV2 producer each add their partition when
// the first batch of a transaction reaches them, and those requests come
// together: right after the producer's EndTxn answer, while the previous
// transaction's markers are still being written. Each used to wait for
// the id's slot and then write its own Ongoing record — one replicated
// append after another, the last leader's batch held for all of them.
// Now the first request of a (transactional id, producer id, epoch)
// leads an addBatch and the ones arriving while it waits join it; the
// leader's attempt that decides (anything but CONCURRENT_TRANSACTIONS)
// takes every partition joined so far, seals the batch, and its one write
// answers them all. A request arriving after the seal starts the next
// batch. Only TV2 adds with valid partitions are joined: they differ in
// nothing but their partitions, so one decision holds for all (a TV1
// client's own AddPartitionsToTxn and the verify-only checks go alone).

// addKey is what requests must share to be joined.
type addKey struct {
	id    string
	pid   int64
	epoch int16
}

// addBatch is the requests joined under one leader.
type addBatch struct {
	key addKey
	// req is the leader's request (its partitions aside): what a
	// transaction completing for key adds on its behalf (nextAdds).
	req AddPartitionsRequest
	// parts are the distinct partitions joined (in guards membership:
	// a producer retrying its first batches while it waits adds nothing
	// new), guarded by addJoins.mu until sealed.
	parts []TopicPartition
	in    map[TopicPartition]struct{}
	// sealed: parts is final (the leader's deciding attempt took it) or
	// the leader gave up; no request joins any more.
	sealed bool
	done   chan struct{} // closed once err is set
	err    error
}

// addJoins is the open batches, one per key at most.
type addJoins struct {
	mu    sync.Mutex
	open  map[addKey]*addBatch
	joins int64 // requests that joined a batch rather than leading one (tests)
}

// joinable reports whether req may be joined with others (see above).
func joinable(req AddPartitionsRequest) bool {
	if req.VerifyOnly || req.ClientVersion != TV2 || len(req.Partitions) == 0 {
		return false
	}
	for _, p := range req.Partitions {
		if p.Topic == "" || p.Partition < 0 {
			return false // the core's INVALID_REQUEST, for this request alone
		}
	}
	return true
}

// join adds req's partitions to the open batch of its key and returns it
// (lead false), or opens a batch led by the caller (lead true).
func (j *addJoins) join(req AddPartitionsRequest) (b *addBatch, lead bool) {
	k := addKey{req.TransactionalID, req.ProducerID, req.ProducerEpoch}
	j.mu.Lock()
	defer j.mu.Unlock()
	if b := j.open[k]; b != nil {
		b.add(req.Partitions)
		j.joins++
		return b, false
	}
	if j.open == nil {
		j.open = map[addKey]*addBatch{}
	}
	b = &addBatch{key: k, req: req, in: map[TopicPartition]struct{}{}, done: make(chan struct{})}
	b.add(req.Partitions)
	j.open[k] = b
	return b, true
}

// add joins the partitions of ps b does not hold yet.
func (b *addBatch) add(ps []TopicPartition) {
	for _, p := range ps {
		if _, ok := b.in[p]; !ok {
			b.in[p] = struct{}{}
			b.parts = append(b.parts, p)
		}
	}
}

// decide runs the core for b's partitions so far and seals b unless the
// answer is CONCURRENT_TRANSACTIONS (the leader waits and decides again,
// with whatever joined meanwhile).
func (j *addJoins) decide(b *addBatch, req AddPartitionsRequest, decide func(AddPartitionsRequest) Result) Result {
	j.mu.Lock()
	defer j.mu.Unlock()
	req.Partitions = slices.Clone(b.parts)
	r := decide(req)
	if errs.Code(r.Err) != sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS {
		j.sealLocked(b)
	}
	return r
}

// finish answers every request of b with err (the leader's outcome).
func (j *addJoins) finish(b *addBatch, err error) {
	j.mu.Lock()
	j.sealLocked(b)
	b.err = err
	j.mu.Unlock()
	close(b.done)
}

func (j *addJoins) sealLocked(b *addBatch) {
	if b.sealed {
		return
	}
	b.sealed = true
	if j.open[b.key] == b {
		delete(j.open, b.key)
	}
}

// wait is a joined request's wait for its batch's answer. If ctx ends
// first it answers CONCURRENT_TRANSACTIONS (retriable: the leader still
// works; the partition may yet be added, which a retry then finds).
func (b *addBatch) wait(ctx context.Context) error {
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return errs.New(sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS,
			"transactional id %q: the partitions are being added with others' (%v); retry", errs.Echo(b.key.id), ctx.Err())
	}
}

// nextAdds returns the adds waiting for the transaction of id that
// completes as done (a Complete*): the open batch of done's producer id
// and epoch — the next transaction's partition leaders, whose first
// batches came right after the EndTxn answer and have waited for the
// markers since — with its partitions joined so far. ok is false when
// none wait.
//
// The completion then writes done and the next transaction's Ongoing in
// one batch (Coordinator.complete): one replicated append instead of
// two on the path of the next transaction's first batches. The batch is
// not sealed: its leader's next attempt finds the partitions in the
// Ongoing state and answers at once without a write, or writes those
// joined after this look.
func (j *addJoins) nextAdds(done Metadata) (req AddPartitionsRequest, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	b := j.open[addKey{done.TransactionalID, done.ProducerID, done.ProducerEpoch}]
	if b == nil || b.sealed || len(b.parts) == 0 {
		return AddPartitionsRequest{}, false
	}
	req = b.req
	req.Partitions = slices.Clone(b.parts)
	return req, true
}
