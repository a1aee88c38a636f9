package node_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

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

// gRPC's health protocol is asked per service: each service a node serves
// answers by its full name with the node's readiness (NOT_SERVING without
// a quorum, SERVING once ready), and a service it does not serve answers
// NOT_FOUND. Liveness is its own name and stays SERVING throughout.
func TestHealthPerServiceFollowsReadiness(t *testing.T) {
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.Start(1)
	hc := healthpb.NewHealthClient(c.Dial(1))
	check := func(service string) (healthpb.HealthCheckResponse_ServingStatus, codes.Code) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN, status.Code(err)
		}
		return resp.Status, codes.OK
	}
	public := []string{"sluice.v1.Log", "sluice.v1.Admin", "sluice.v1.Transactions", "sluice.v1.Groups"}
	for _, s := range append([]string{""}, public...) {
		if st, code := check(s); code != codes.OK || st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health of %q without quorum: %v (%v), want NOT_SERVING", s, st, code)
		}
	}
	if _, code := check("sluice.v1.NoSuchService"); code != codes.NotFound {
		t.Errorf("health of an unknown service: %v, want NotFound", code)
	}
	c.Start(2)
	c.Start(3)
	wait.Until(t, 30*time.Second, "every service of node 1 SERVING once the quorum runs", func() bool {
		for _, s := range append([]string{""}, public...) {
			if st, code := check(s); code != codes.OK || st != healthpb.HealthCheckResponse_SERVING {
				return false
			}
		}
		return true
	})
	if st, code := check(node.LivenessService); code != codes.OK || st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("liveness: %v (%v)", st, code)
	}
}
