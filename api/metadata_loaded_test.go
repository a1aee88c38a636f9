package api

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A broker that has not received cluster metadata since it started (a
// restart, before the first snapshot arrives) must not tell clients that a
// topic does not exist: the Go client caches that answer and fails every
// send to the topic at once. Found by the chaos harness (kill-two: two of
// three nodes SIGKILLed and restarted). It answers UNAVAILABLE
// (LEADER_NOT_AVAILABLE, retriable) instead, and normally once it has an
// image.
func TestMetadataUnavailableUntilFirstImage(t *testing.T) {
	cache := cluster.NewMetadataCache()
	rm, err := cluster.NewReplicaManager(cluster.ReplicaManagerConfig{DataDir: t.TempDir(), NodeID: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Close()
	s := NewServer(ServerConfig{Replicas: rm, Metadata: cache, Self: Broker{NodeID: 7}})

	_, err = s.Metadata(context.Background(), &sluicev1.MetadataRequest{Topics: []string{"orders"}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("metadata before any image: %v, want UNAVAILABLE", err)
	}
	if got, _ := errs.FromStatus(err); errs.Code(got) != sluicev1.ErrorCode_LEADER_NOT_AVAILABLE {
		t.Fatalf("error code %v, want LEADER_NOT_AVAILABLE (%v)", errs.Code(got), err)
	}
	if _, err := s.leaderPartition("orders", 0); errs.Code(err) != sluicev1.ErrorCode_LEADER_NOT_AVAILABLE {
		t.Fatalf("produce/fetch routing before any image: %v, want LEADER_NOT_AVAILABLE", err)
	}

	// With an image (here: one without the topic), the answer is the
	// image's: the topic really does not exist.
	if err := cache.Update(1, controller.NewImage(), nil); err != nil {
		t.Fatal(err)
	}
	cache.MarkApplied(1)
	resp, err := s.Metadata(context.Background(), &sluicev1.MetadataRequest{Topics: []string{"orders"}})
	if err != nil {
		t.Fatalf("metadata with an image: %v", err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
		t.Fatalf("metadata with an image lacking the topic: %v", resp.Topics)
	}
}
