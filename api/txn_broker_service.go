package api

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
)

// txnBrokerWait bounds a TxnBroker request whose caller set no deadline.
const txnBrokerWait = 30 * time.Second

// MarkerAppender writes one transaction marker to a partition this broker
// leads and returns once it is committed (coordinator.PartitionMarkers:
// UNKNOWN_TOPIC_OR_PARTITION only for a partition the metadata does not
// have).
type MarkerAppender interface {
	WriteMarker(ctx context.Context, tp cluster.TopicPartition, mk cluster.TxnMarker) error
}

// TxnBrokerService serves sluice.internal.v1.TxnBroker: partition leaders'
// AddPartitionsToTxn to this broker's transaction coordinator, and
// coordinators' WriteTxnMarkers to the partitions this broker leads. Each
// transaction (resp. partition) is served concurrently, within the RPC's
// deadline (at most maxRequestConcurrency at once); every failure is
// answered per transaction (partition).
type TxnBrokerService struct {
	internalv1.UnimplementedTxnBrokerServer

	coord   coordinator.PartitionAdder
	markers MarkerAppender
}

// NewTxnBrokerService returns the service over this broker's coordinator
// and marker appender.
func NewTxnBrokerService(coord coordinator.PartitionAdder, markers MarkerAppender) *TxnBrokerService {
	return &TxnBrokerService{coord: coord, markers: markers}
}

// withDefaultDeadline bounds ctx by txnBrokerWait when it has no deadline.
func withDefaultDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, txnBrokerWait)
}

// AddPartitionsToTxn implements the TxnBroker service
// (txn.Coordinator.AddPartitions per transaction).
func (s *TxnBrokerService) AddPartitionsToTxn(ctx context.Context, req *internalv1.AddPartitionsToTxnRequest) (*internalv1.AddPartitionsToTxnResponse, error) {
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	resp := &internalv1.AddPartitionsToTxnResponse{Results: make([]*internalv1.AddPartitionsToTxnResult, len(req.Transactions))}
	forEachConcurrently(len(req.Transactions), func(i int) {
		t := req.Transactions[i]
		r := &internalv1.AddPartitionsToTxnResult{TransactionalId: t.TransactionalId}
		resp.Results[i] = r
		epoch, err := producerEpoch(t.ProducerEpoch)
		if err != nil {
			r.ErrorCode, r.ErrorMessage = errs.Code(err), errs.Message(err)
			return
		}
		parts := make([]txn.TopicPartition, 0, len(t.Partitions))
		for _, p := range t.Partitions {
			parts = append(parts, txn.TopicPartition{Topic: p.Topic, Partition: p.Partition})
		}
		// A partition leader adds for a TV2 produce (the gRPC door's, or a
		// Kafka produce v12+) and only verifies for a TV1 one.
		req := txn.AddPartitionsRequest{TransactionalID: t.TransactionalId,
			ProducerID: t.ProducerId, ProducerEpoch: epoch, Partitions: parts, ClientVersion: txn.TV2}
		if t.VerifyOnly {
			req.ClientVersion, req.VerifyOnly = txn.TV1, true
		}
		err = s.coord.AddPartitions(ctx, req)
		r.ErrorCode, r.ErrorMessage = errs.Code(err), errs.Message(err)
	})
	return resp, nil
}

// WriteTxnMarkers implements the TxnBroker service: each marker is
// appended to each of its partitions (MarkerAppender) and answered once
// committed, or with the partition's error.
func (s *TxnBrokerService) WriteTxnMarkers(ctx context.Context, req *internalv1.WriteTxnMarkersRequest) (*internalv1.WriteTxnMarkersResponse, error) {
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	resp := &internalv1.WriteTxnMarkersResponse{Markers: make([]*internalv1.TxnMarkerResult, len(req.Markers))}
	type write struct {
		pr *internalv1.TxnPartitionResult
		mk cluster.TxnMarker
	}
	var writes []write
	for i, m := range req.Markers {
		mr := &internalv1.TxnMarkerResult{ProducerId: m.ProducerId, Partitions: make([]*internalv1.TxnPartitionResult, len(m.Partitions))}
		resp.Markers[i] = mr
		epoch, epochErr := producerEpoch(m.ProducerEpoch)
		mk := cluster.TxnMarker{ProducerID: m.ProducerId, ProducerEpoch: epoch, CoordinatorEpoch: m.CoordinatorEpoch, Commit: m.Committed,
			Version: coordinator.MarkerVersionFromWire(m.TransactionVersion)}
		for j, p := range m.Partitions {
			pr := &internalv1.TxnPartitionResult{Topic: p.Topic, Partition: p.Partition}
			mr.Partitions[j] = pr
			if epochErr != nil {
				pr.ErrorCode, pr.ErrorMessage = errs.Code(epochErr), errs.Message(epochErr)
				continue
			}
			writes = append(writes, write{pr, mk})
		}
	}
	forEachConcurrently(len(writes), func(i int) {
		w := writes[i]
		err := s.markers.WriteMarker(ctx, cluster.TopicPartition{Topic: w.pr.Topic, Partition: w.pr.Partition}, w.mk)
		w.pr.ErrorCode, w.pr.ErrorMessage = errs.Code(err), errs.Message(err)
	})
	return resp, nil
}
