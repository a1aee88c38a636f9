package node

import (
	"context"
	"fmt"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The gRPC health (grpc.health.v1) service names a node serves, for
// probes (docs/kubernetes.md):
//
//   - "" (the server as a whole) is SERVING while the node is Ready: a
//     broker registered, unfenced and caught up with the metadata, a
//     controller-only node once a leader is known. It depends on the
//     quorum and the other nodes: a readiness probe, and what /readyz
//     answers.
//   - LivenessService is SERVING from start until shutdown begins, whatever
//     the quorum or the other nodes do: a liveness (and startup) probe,
//     which must not restart a node because its peers are away.
//
// Both turn NOT_SERVING as soon as Shutdown or Abort begins.
const LivenessService = "liveness"

// Ready reports whether the node serves: a broker once registered,
// unfenced and caught up; a controller-only node once a leader is known.
func (n *Node) Ready() bool {
	if n.broker != nil {
		return n.broker.Ready()
	}
	id, _ := n.ctl.Leader()
	return id >= 0
}

// WaitReady blocks until Ready or ctx is done.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !n.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %d not ready: %w", n.cfg.NodeID, ctx.Err())
		case <-t.C:
		}
	}
	n.syncHealth()
	return nil
}

// syncHealth mirrors Ready into the gRPC health status (and /readyz).
func (n *Node) syncHealth() {
	n.healthMu.Lock()
	defer n.healthMu.Unlock()
	if n.ctx.Err() != nil {
		return // Shutdown owns the status now
	}
	r := n.Ready()
	if r == n.serving {
		return
	}
	n.serving = r
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if r {
		st = healthpb.HealthCheckResponse_SERVING
		n.log.Info("node ready", "node_id", n.cfg.NodeID)
	} else {
		n.log.Warn("node not ready", "node_id", n.cfg.NodeID)
	}
	n.health.SetServingStatus("", st)
}

// readinessLoop mirrors Ready into the gRPC health status (and /readyz).
func (n *Node) readinessLoop() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		n.syncHealth()
	}
}
