package api

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/coordinator"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// initProducerIDWait bounds how long InitProducerId waits for a block of
// ids before answering COORDINATOR_LOAD_IN_PROGRESS.
const initProducerIDWait = time.Second

// TransactionsService serves sluice.v1.Transactions.
type TransactionsService struct {
	sluicev1.UnimplementedTransactionsServer

	ids *coordinator.ProducerIDManager
}

// NewTransactionsService returns the service over a broker's producer-id
// manager.
func NewTransactionsService(ids *coordinator.ProducerIDManager) *TransactionsService {
	return &TransactionsService{ids: ids}
}

// InitProducerId implements the Transactions service: an idempotent
// producer gets a new id at epoch 0. Transactional ids need the
// transaction coordinator, which is not built yet: they are refused with
// a clear error rather than given a non-transactional id.
func (s *TransactionsService) InitProducerId(ctx context.Context, req *sluicev1.InitProducerIdRequest) (*sluicev1.InitProducerIdResponse, error) {
	if req.TransactionalId != "" {
		return &sluicev1.InitProducerIdResponse{ProducerId: -1, ProducerEpoch: -1,
			ErrorCode:    sluicev1.ErrorCode_INVALID_REQUEST,
			ErrorMessage: "transactional ids are not supported yet; omit transactional_id for an idempotent producer"}, nil
	}
	wctx, cancel := context.WithTimeout(ctx, initProducerIDWait)
	defer cancel()
	id, err := s.ids.Next(wctx)
	if err != nil {
		code, msg := errs.Code(err), errs.Message(err)
		if code == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
			code = sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS
		}
		return &sluicev1.InitProducerIdResponse{ProducerId: -1, ProducerEpoch: -1, ErrorCode: code, ErrorMessage: msg}, nil
	}
	return &sluicev1.InitProducerIdResponse{ProducerId: id, ProducerEpoch: 0}, nil
}
