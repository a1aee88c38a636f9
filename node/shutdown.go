package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// Abort stops the node as if its process died, for failure tests: no
// controlled shutdown, no gossip leave, no Raft leadership hand-off, no
// drain. Logs and stores are still closed so the test can restart it.
func (n *Node) Abort() {
	n.stopOnce.Do(func() {
		n.healthMu.Lock()
		n.cancel()
		n.health.Shutdown()
		n.healthMu.Unlock()
		n.closeGroups()
		n.closeTransactions()
		if n.producerIDs != nil {
			n.producerIDs.Close()
		}
		if n.broker != nil {
			n.broker.Stop()
		}
		if n.ctlService != nil {
			n.ctlService.Close()
		}
		n.grpc.Stop()
		n.internalGRPC.Stop()
		if n.kafka != nil {
			_ = n.kafka.Close()
		}
		_ = n.members.Shutdown()
		if n.ctl != nil {
			_ = n.ctl.Abort()
		}
		if n.replicas != nil {
			_ = n.replicas.Close()
		}
		if n.httpSrv != nil {
			_ = n.httpSrv.Close()
		}
		n.pool.Close()
		close(n.stopped)
		n.goroutines.Wait()
		n.log.Info("sluice node aborted", "node_id", n.cfg.NodeID)
	})
}

// Shutdown stops the node: health NOT_SERVING; controlled shutdown (the
// controller moves this broker's leaderships away, bounded by
// ControlledShutdownTimeout); drain in-flight requests (bounded by ctx and
// ShutdownTimeout); leave gossip; stop the controller voter (handing off
// leadership); close logs cleanly. Safe to call more than once.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() {
		n.healthMu.Lock()
		n.cancel() // stops syncHealth from flipping the status back
		n.health.Shutdown()
		n.healthMu.Unlock()
		if n.broker != nil && n.broker.Epoch() > 0 {
			cctx, cancel := context.WithTimeout(ctx, n.controlledShutdownTimeout())
			if err := n.broker.ControlledShutdown(cctx); err != nil {
				n.log.Warn("controlled shutdown incomplete; stopping anyway", "err", err)
			} else {
				n.log.Info("controlled shutdown done: leaderships moved away")
			}
			cancel()
		}
		// The transaction coordinator uses the producer-id manager and the
		// replica manager: it stops first, after the group coordinator,
		// whose transactional offsets go through its verifier.
		n.closeGroups()
		n.closeTransactions()
		if n.producerIDs != nil {
			n.producerIDs.Close()
		}
		if n.broker != nil {
			n.broker.Stop()
		}
		n.stopServing(ctx)
		n.cancel()
		if err := n.members.Leave(time.Second); err != nil {
			n.log.Debug("gossip leave", "err", err)
		}
		_ = n.members.Shutdown()
		var errsList []error
		if n.ctl != nil {
			errsList = append(errsList, n.ctl.Shutdown())
		}
		if n.replicas != nil {
			errsList = append(errsList, n.replicas.Close())
		}
		n.pool.Close()
		close(n.stopped)
		n.goroutines.Wait()
		n.stopErr = errors.Join(errsList...)
		n.log.Info("sluice node stopped", "node_id", n.cfg.NodeID)
	})
	return n.stopErr
}

func (n *Node) controlledShutdownTimeout() time.Duration {
	if n.cfg.ControlledShutdownTimeout > 0 {
		return n.cfg.ControlledShutdownTimeout
	}
	return 10 * time.Second
}

// stopServing ends metadata streams and the other long-lived streams,
// drains in-flight requests and stops the gRPC servers (client and
// internal, together, within one ShutdownTimeout), closes the Kafka
// server (its connections end, with the requests in them) and stops the
// HTTP server.
func (n *Node) stopServing(ctx context.Context) {
	if n.ctlService != nil {
		n.ctlService.Close()
	}
	close(n.draining)
	servers := []*grpc.Server{n.grpc, n.internalGRPC}
	drained := make(chan struct{})
	n.goroutines.Go(func() {
		var wg sync.WaitGroup
		for _, s := range servers {
			wg.Go(s.GracefulStop)
		}
		if n.kafka != nil {
			// No graceful drain in the Kafka protocol: a client whose
			// connection closes retries on the partition's new leader,
			// which controlled shutdown has moved by now.
			wg.Go(func() { _ = n.kafka.Close() })
		}
		wg.Wait()
		close(drained)
	})
	t := time.NewTimer(n.cfg.ShutdownTimeout)
	select {
	case <-drained:
	case <-ctx.Done():
	case <-t.C:
	}
	for _, s := range servers {
		s.Stop() // a no-op on a server already stopped
	}
	t.Stop()
	<-drained
	if n.httpSrv != nil {
		hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = n.httpSrv.Shutdown(hctx)
		cancel()
	}
}
