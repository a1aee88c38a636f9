package coordinator

import (
	"context"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// PartitionAdder is the part of the txn.Coordinator a
// BrokerTxnVerifier and the TxnBroker service use.
type PartitionAdder interface {
	AddPartitions(ctx context.Context, req txn.AddPartitionsRequest) error
}

var _ PartitionAdder = (*txn.Coordinator)(nil)

// BrokerTxnVerifierConfig is what a BrokerTxnVerifier needs; all fields
// are required.
type BrokerTxnVerifierConfig struct {
	// Self is this broker's node id.
	Self int32
	// Locator routes a transactional id to its coordinator.
	Locator *Locator
	// Coordinator is this broker's transaction coordinator.
	Coordinator PartitionAdder
	// Pool holds the connections to the other brokers.
	Pool *cluster.ConnPool
}

// BrokerTxnVerifier is the cluster.TxnVerifier of a broker: a partition
// leader adds its partition to a transaction at the transaction's
// coordinator (TV2), or verifies that it is in (TV1, verifyOnly). The coordinator is found as FindCoordinator finds it
// (Locator.Lookup; the topic is never created here: a transactional
// producer found its coordinator first). This broker's own coordinator is
// called directly; another is sent AddPartitionsToTxn, coalesced per
// broker (while one request to a broker is in flight the next ones queue,
// and the next request carries them all, merging the entries of one
// transaction, producer epoch and verify-only flag). One attempt per call: retriable
// answers go back to the caller. Close it when done.
type BrokerTxnVerifier struct {
	cfg   BrokerTxnVerifierConfig
	batch *brokerBatcher[*internalv1.AddPartitionsToTxnTransaction, error]
}

var _ cluster.TxnVerifier = (*BrokerTxnVerifier)(nil)

// NewBrokerTxnVerifier returns a verifier.
func NewBrokerTxnVerifier(cfg BrokerTxnVerifierConfig) *BrokerTxnVerifier {
	v := &BrokerTxnVerifier{cfg: cfg}
	v.batch = newBrokerBatcher(v.send)
	return v
}

// Close ends the requests in flight (retriable errors for their callers)
// and waits for the senders.
func (v *BrokerTxnVerifier) Close() { v.batch.close() }

// AddPartition implements cluster.TxnVerifier.
func (v *BrokerTxnVerifier) AddPartition(ctx context.Context, transactionalID string, producerID int64, producerEpoch int16, tp cluster.TopicPartition, verifyOnly bool) error {
	c, err := v.cfg.Locator.Lookup(transactionalID)
	if err != nil {
		return err
	}
	if c.NodeID == v.cfg.Self {
		// TV2: the leader adds for the producer; TV1: the producer added,
		// the leader verifies (as the TxnBroker service does for others).
		req := txn.AddPartitionsRequest{TransactionalID: transactionalID,
			ProducerID: producerID, ProducerEpoch: producerEpoch, Partitions: []txn.TopicPartition{tp}, ClientVersion: txn.TV2}
		if verifyOnly {
			req.ClientVersion, req.VerifyOnly = txn.TV1, true
		}
		return v.cfg.Coordinator.AddPartitions(ctx, req)
	}
	answer, err := v.batch.do(ctx, c.InternalAddress, &internalv1.AddPartitionsToTxnTransaction{TransactionalId: transactionalID,
		ProducerId: producerID, ProducerEpoch: int32(producerEpoch), VerifyOnly: verifyOnly,
		Partitions: []*internalv1.TxnPartition{{Topic: tp.Topic, Partition: tp.Partition}}})
	if err != nil {
		return err
	}
	return answer
}

// send is one AddPartitionsToTxn RPC for txns; entries of the same
// transaction, producer id, epoch and verify-only flag are merged into one (the coordinator
// would answer all but one CONCURRENT_TRANSACTIONS), and each gets its
// transaction's answer. The returned "responses" are the per-entry errors.
func (v *BrokerTxnVerifier) send(ctx context.Context, addr string, txns []*internalv1.AddPartitionsToTxnTransaction) ([]error, error) {
	type key struct {
		id     string
		pid    int64
		epoch  int32
		verify bool
	}
	merged := map[key]int{} // key -> index in req.Transactions
	at := make([]int, len(txns))
	req := &internalv1.AddPartitionsToTxnRequest{BrokerId: v.cfg.Self}
	for i, t := range txns {
		k := key{t.TransactionalId, t.ProducerId, t.ProducerEpoch, t.VerifyOnly}
		j, ok := merged[k]
		if !ok {
			j = len(req.Transactions)
			merged[k] = j
			req.Transactions = append(req.Transactions, &internalv1.AddPartitionsToTxnTransaction{
				TransactionalId: t.TransactionalId, ProducerId: t.ProducerId, ProducerEpoch: t.ProducerEpoch, VerifyOnly: t.VerifyOnly})
		}
		req.Transactions[j].Partitions = append(req.Transactions[j].Partitions, t.Partitions...)
		at[i] = j
	}
	cc, err := v.cfg.Pool.Get(addr)
	if err != nil {
		return nil, rpcError(addr, err)
	}
	resp, err := internalv1.NewTxnBrokerClient(cc).AddPartitionsToTxn(ctx, req)
	if err != nil {
		return nil, rpcError(addr, err)
	}
	if len(resp.Results) != len(req.Transactions) {
		return nil, errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "%s answered %d results for %d transactions", addr, len(resp.Results), len(req.Transactions))
	}
	out := make([]error, len(txns))
	for i, j := range at {
		if r := resp.Results[j]; r.ErrorCode != sluicev1.ErrorCode_NONE {
			out[i] = errs.New(r.ErrorCode, "%s", r.ErrorMessage)
		}
	}
	return out, nil
}
