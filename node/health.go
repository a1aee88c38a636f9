package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
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
//
//   - LivenessService is SERVING from start until shutdown begins, whatever
//     the quorum or the other nodes do: a liveness (and startup) probe,
//     which must not restart a node because its peers are away.
//
//   - every service the node serves by its full name ("sluice.v1.Log",
//     "sluice.v1.Admin", "sluice.v1.Transactions", "sluice.v1.Groups" on a
//     broker, the sluice.internal.v1 ones it registers) follows "": a
//     client generated from the .proto files may check the service it is
//     about to call, as gRPC's health protocol intends. A service the node
//     does not serve (a broker's on a controller-only node) answers
//     NOT_FOUND.
//
// All turn NOT_SERVING as soon as Shutdown or Abort begins.
const LivenessService = "liveness"

// healthServices returns the services of a gRPC server whose health
// follows readiness, sorted: all but the health and reflection services
// themselves.
func healthServices(info map[string]grpc.ServiceInfo) []string {
	var names []string
	for name := range info {
		if name == healthpb.Health_ServiceDesc.ServiceName || strings.HasPrefix(name, "grpc.reflection.") {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Ready reports whether the node serves: a broker once registered,
// unfenced and caught up, and while none of its replicas is offline after
// a disk error (decision 42); a controller-only node once a leader is
// known. NotReadyReasons says why not.
func (n *Node) Ready() bool { return len(n.NotReadyReasons()) == 0 }

// NotReadyReasons says why the node is not Ready, one line per reason
// (none when it is): "broker: ..." while registering or catching up,
// "storage: partition t-0 at <dir>: <op> <file>: <os error>" per replica
// offline after a disk error, "controller: ..." while a controller-only
// node knows no leader. /readyz answers them.
func (n *Node) NotReadyReasons() []string {
	if n.broker == nil {
		if id, _ := n.ctl.Leader(); id < 0 {
			return []string{"controller: no controller leader is known"}
		}
		return nil
	}
	var out []string
	if !n.broker.Ready() {
		out = append(out, "broker: not registered, fenced, or not caught up with the metadata yet")
	}
	for _, f := range n.replicas.OfflineReplicas() {
		out = append(out, "storage: "+f.Reason())
	}
	return out
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
		n.log.Warn("node not ready", "node_id", n.cfg.NodeID, "reasons", n.NotReadyReasons())
	}
	n.health.SetServingStatus("", st)
	for _, name := range n.healthServices {
		n.health.SetServingStatus(name, st)
	}
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
