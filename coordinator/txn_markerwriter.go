package coordinator

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// PartitionMarkers writes transaction markers to partitions this broker
// leads: the partition side of WriteTxnMarkers, used by BrokerMarkerWriter
// for the partitions it leads itself and by the TxnBroker service for the
// others' markers. Its methods are safe for concurrent use.
type PartitionMarkers struct {
	Replicas *cluster.ReplicaManager
	Metadata *cluster.MetadataCache
	// Barrier, if set, waits until Metadata has caught up with the
	// controller (cluster.BrokerLifecycle.MetadataBarrier). A partition
	// missing from the metadata is declared gone only after it: the
	// partition was in a transaction, so it existed, and this broker's
	// metadata may simply lag (a topic created through another broker —
	// __consumer_offsets on a group's first transactional commit).
	Barrier func(ctx context.Context) error
}

// missingBarrierTimeout bounds the metadata barrier of one marker call.
const missingBarrierTimeout = 5 * time.Second

// exists is partitionExists after the metadata barrier when the
// partition seems missing: UNKNOWN_TOPIC_OR_PARTITION only if it is
// still missing once the metadata caught up; LEADER_NOT_AVAILABLE
// (retriable) if the barrier could not be passed.
func (w PartitionMarkers) exists(ctx context.Context, tp cluster.TopicPartition) error {
	err := partitionExists(w.Metadata, tp)
	if errs.Code(err) != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION || w.Barrier == nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, missingBarrierTimeout)
	defer cancel()
	if berr := w.Barrier(bctx); berr != nil {
		return errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "partition %s is not in this broker's metadata, which could not be checked against the controller: %v", tp, berr)
	}
	return partitionExists(w.Metadata, tp)
}

// WriteMarker appends mk to tp as its leader and returns once it is
// committed (cluster.ReplicaManager.WriteTxnMarker). Answers that
// txn.MarkerWriter's contract reads specially are given only when they hold:
// UNKNOWN_TOPIC_OR_PARTITION only when this broker's metadata (once it
// has any) has no such partition — a partition it knows but does not host
// or lead is NOT_LEADER_OR_FOLLOWER (retriable), never "gone" — and
// NOT_ENOUGH_REPLICAS_AFTER_APPEND, which is committed, is success.
func (w PartitionMarkers) WriteMarker(ctx context.Context, tp cluster.TopicPartition, mk cluster.TxnMarker) error {
	if err := w.exists(ctx, tp); err != nil {
		return err
	}
	err := w.Replicas.WriteTxnMarker(ctx, tp, mk)
	switch errs.Code(err) {
	case sluicev1.ErrorCode_NONE, sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
		return nil
	case sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION:
		// Not hosted here (yet, or any more), but the metadata has it.
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "%s", errs.Message(err))
	}
	return err
}

// partitionExists is nil when metadata has tp; LEADER_NOT_AVAILABLE
// (retriable) before the broker has any metadata; else
// UNKNOWN_TOPIC_OR_PARTITION (the topic was deleted, or never existed).
func partitionExists(metadata *cluster.MetadataCache, tp cluster.TopicPartition) error {
	if metadata.Offset() == 0 {
		return errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "this broker has no cluster metadata yet")
	}
	if metadata.Image().Partition(tp.Topic, tp.Partition) == nil {
		return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "partition %s does not exist", tp)
	}
	return nil
}

// BrokerMarkerWriterConfig is what a BrokerMarkerWriter needs; all
// fields are required.
type BrokerMarkerWriterConfig struct {
	// Self is this broker's node id.
	Self int32
	// Local writes the markers of partitions this broker leads.
	Local PartitionMarkers
	// Pool holds the connections to the other brokers.
	Pool *cluster.ConnPool
}

// BrokerMarkerWriter is the txn.MarkerWriter of a broker (DESIGN §10: a marker
// sender batched per broker). It groups a round's partitions by leader
// from the metadata cache: partitions this broker leads get their marker
// from PartitionMarkers directly; the others one WriteTxnMarkers RPC per
// leader, coalesced with other transactions' markers to the same broker
// (while a request to a broker is in flight the next ones queue, and the
// next request carries them all). A partition without a known leader is
// LEADER_NOT_AVAILABLE (retriable). Close it when done.
type BrokerMarkerWriter struct {
	cfg   BrokerMarkerWriterConfig
	batch *brokerBatcher[*internalv1.TxnMarker, *internalv1.TxnMarkerResult]
}

var _ txn.MarkerWriter = (*BrokerMarkerWriter)(nil)

// NewBrokerMarkerWriter returns a writer; it starts no goroutine until
// markers go to another broker.
func NewBrokerMarkerWriter(cfg BrokerMarkerWriterConfig) *BrokerMarkerWriter {
	w := &BrokerMarkerWriter{cfg: cfg}
	w.batch = newBrokerBatcher(w.send)
	return w
}

// Close ends the requests in flight (their callers see a retriable error)
// and waits for the senders. Markers written after Close fail
// (retriable).
func (w *BrokerMarkerWriter) Close() { w.batch.close() }

// WriteMarkers implements txn.MarkerWriter: every partition of m gets an
// outcome, concurrently, within ctx.
func (w *BrokerMarkerWriter) WriteMarkers(ctx context.Context, m txn.Markers) map[txn.TopicPartition]error {
	out := make(map[txn.TopicPartition]error, len(m.Partitions))
	var mu sync.Mutex // guards out
	set := func(tp txn.TopicPartition, err error) {
		mu.Lock()
		out[tp] = err
		mu.Unlock()
	}
	mk := cluster.TxnMarker{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, CoordinatorEpoch: m.CoordinatorEpoch, Commit: m.Commit,
		Version: markerVersion(m.ClientVersion)}
	im := w.cfg.Local.Metadata.Image()
	var local []txn.TopicPartition
	remote := map[string][]txn.TopicPartition{} // by leader address
	for _, tp := range m.Partitions {
		if err := w.cfg.Local.exists(ctx, tp); err != nil {
			out[tp] = err
			continue
		}
		if im.Partition(tp.Topic, tp.Partition) == nil { // appeared after the barrier
			im = w.cfg.Local.Metadata.Image()
		}
		leader := im.Partition(tp.Topic, tp.Partition).Leader
		switch b := im.Brokers[leader]; {
		case leader == w.cfg.Self:
			local = append(local, tp)
		case leader == controller.NoLeader || b == nil || b.InterBrokerAddress() == "":
			out[tp] = errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "partition %s has no known leader", tp)
		default:
			// The leader's internal listener (decision 41).
			addr := b.InterBrokerAddress()
			remote[addr] = append(remote[addr], tp)
		}
	}
	var wg sync.WaitGroup
	for _, tp := range local {
		wg.Add(1)
		go func() {
			defer wg.Done()
			set(tp, w.cfg.Local.WriteMarker(ctx, tp, mk))
		}()
	}
	for addr, tps := range remote {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &internalv1.TxnMarker{TransactionalId: m.TransactionalID, ProducerId: m.ProducerID, ProducerEpoch: int32(m.ProducerEpoch),
				Committed: m.Commit, CoordinatorEpoch: m.CoordinatorEpoch, TransactionVersion: wireTxnVersion(m.ClientVersion)}
			for _, tp := range tps {
				req.Partitions = append(req.Partitions, &internalv1.TxnPartition{Topic: tp.Topic, Partition: tp.Partition})
			}
			res, err := w.batch.do(ctx, addr, req)
			if err != nil {
				for _, tp := range tps {
					set(tp, err)
				}
				return
			}
			for _, pr := range res.GetPartitions() {
				tp := txn.TopicPartition{Topic: pr.Topic, Partition: pr.Partition}
				var perr error
				if pr.ErrorCode != sluicev1.ErrorCode_NONE {
					perr = errs.New(pr.ErrorCode, "%s", pr.ErrorMessage)
				}
				set(tp, perr) // a partition left out of the answer stays missing: retried
			}
		}()
	}
	wg.Wait()
	return out
}

// send is one WriteTxnMarkers RPC carrying markers.
func (w *BrokerMarkerWriter) send(ctx context.Context, addr string, markers []*internalv1.TxnMarker) ([]*internalv1.TxnMarkerResult, error) {
	cc, err := w.cfg.Pool.Get(addr)
	if err != nil {
		return nil, rpcError(addr, err)
	}
	resp, err := internalv1.NewTxnBrokerClient(cc).WriteTxnMarkers(ctx, &internalv1.WriteTxnMarkersRequest{BrokerId: w.cfg.Self, Markers: markers})
	if err != nil {
		return nil, rpcError(addr, err)
	}
	return resp.Markers, nil
}

// markerVersion is the partition's marker rule for a transaction of
// client version v: TV2 (epoch above the producer's) for TV2, TV1 (at
// least the producer's) for TV1 and Kafka's level 0.
func markerVersion(v txn.ClientVersion) storage.MarkerVersion {
	if v.SupportsEpochBump() {
		return storage.MarkerTV2
	}
	return storage.MarkerTV1
}

// wireTxnVersion is v as the internal TxnMarker's transaction_version: 1
// or 2, never 0 (which a receiver reads as 2, the version of a
// coordinator that predates TV1).
func wireTxnVersion(v txn.ClientVersion) int32 {
	if v.SupportsEpochBump() {
		return 2
	}
	return 1
}

// MarkerVersionFromWire is the marker rule of a WriteTxnMarkers marker
// with transaction_version v (the TxnBroker service's side of
// wireTxnVersion): 1 is TV1; 2 and above, and 0 (absent: a coordinator
// that predates TV1 and wrote only TV2 markers), TV2.
func MarkerVersionFromWire(v int32) storage.MarkerVersion {
	if v == 1 {
		return storage.MarkerTV1
	}
	return storage.MarkerTV2
}
