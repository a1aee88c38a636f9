package api_test

import (
	"context"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/coordinator"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// stuckAllocator never returns a block until its context ends (a broker
// whose controller is unreachable).
type stuckAllocator struct{}

func (stuckAllocator) AllocateProducerIDBlock(ctx context.Context) (int64, int64, error) {
	<-ctx.Done()
	return 0, 0, ctx.Err()
}

// TestInitProducerIDWithoutBlock: before any id block has arrived the
// answer is the retriable COORDINATOR_LOAD_IN_PROGRESS, never an id of -1
// presented as success.
func TestInitProducerIDWithoutBlock(t *testing.T) {
	m := coordinator.NewProducerIDManager(stuckAllocator{}, coordinator.ProducerIDManagerConfig{})
	defer m.Close()
	s := api.NewTransactionsService(api.TransactionsConfig{ProducerIDs: m})
	resp, err := s.InitProducerId(ctx(t), &sluicev1.InitProducerIdRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS || resp.ProducerId != -1 {
		t.Fatalf("InitProducerId without a block: %v", resp)
	}
}
