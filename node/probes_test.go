package node_test

import (
	"context"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
)

// Liveness never depends on the quorum: a voter whose two peers are not
// running answers SERVING for node.LivenessService while its readiness
// ("") stays NOT_SERVING; once the others start, readiness follows.
func TestLivenessIndependentOfQuorum(t *testing.T) {
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.Start(1)
	hc := healthpb.NewHealthClient(c.Dial(1))
	status := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health check of %q: %v", service, err)
		}
		return resp.Status
	}
	if st := status(node.LivenessService); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness of a voter without quorum: %v, want SERVING", st)
	}
	if st := status(""); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("readiness of a voter without quorum: %v, want NOT_SERVING", st)
	}
	c.Start(2)
	c.Start(3)
	wait.Until(t, 30*time.Second, "node 1 ready once the quorum runs", func() bool {
		return status("") == healthpb.HealthCheckResponse_SERVING
	})
	if st := status(node.LivenessService); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness of a ready node: %v", st)
	}
}
