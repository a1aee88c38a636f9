package api_test

import (
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Metadata marks Sluice's own topics (names starting with "__") internal,
// so a client listing topics can leave them out.
func TestMetadataMarksInternalTopics(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("user", 1, nil)
	txns := sluicev1.NewTransactionsClient(tn.conn)
	// The first FindCoordinator creates __transaction_state.
	if _, err := txns.FindCoordinator(ctx(t), &sluicev1.FindCoordinatorRequest{Keys: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 20*time.Second, "__transaction_state in the metadata", func() bool {
		md, err := tn.admin.Metadata(ctx(t), &sluicev1.MetadataRequest{})
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, tm := range md.Topics {
			switch tm.Name {
			case "user":
				if tm.Internal {
					t.Fatal("topic user is marked internal")
				}
				seen++
			case "__transaction_state":
				if !tm.Internal {
					t.Fatal("__transaction_state is not marked internal")
				}
				seen++
			}
		}
		return seen == 2
	})
}
