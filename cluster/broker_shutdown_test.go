package cluster

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// heartbeatVoter answers every broker heartbeat, never with
// ShutdownReady: a controller that has leaderships of the broker left to
// move.
type heartbeatVoter struct {
	fakeMetadataVoter
}

func (v *heartbeatVoter) BrokerHeartbeat(context.Context, *internalv1.BrokerHeartbeatRequest) (*internalv1.BrokerHeartbeatResponse, error) {
	return &internalv1.BrokerHeartbeatResponse{Fenced: true}, nil
}

// shutdownBroker is a registered broker (epoch 5) heartbeating to
// endpoint every 50 ms with session timeout session; only its heartbeat
// loop runs.
func shutdownBroker(t *testing.T, endpoint ControllerEndpoint, session time.Duration) *BrokerLifecycle {
	t.Helper()
	pool := NewConnPool()
	t.Cleanup(pool.Close)
	controllers := NewControllerClient(pool, func() []ControllerEndpoint { return []ControllerEndpoint{endpoint} })
	b := NewBrokerLifecycle(BrokerConfig{NodeID: 7, Address: "127.0.0.1:1", Controllers: controllers, Metadata: NewMetadataCache(),
		HeartbeatInterval: 50 * time.Millisecond, SessionTimeout: session})
	b.mu.Lock()
	b.epoch = 5
	b.mu.Unlock()
	b.goroutines.Go(b.heartbeatLoop)
	t.Cleanup(b.Stop)
	return b
}

// With no controller answering (the last node of a cluster stopping, its
// quorum gone), a controlled shutdown gives up once no heartbeat has been
// answered for the session timeout — an active controller would have
// fenced the broker by then, and without one nothing moves — instead of
// waiting out its whole timeout.
func TestControlledShutdownGivesUpWithoutAController(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // every dial is refused
	b := shutdownBroker(t, ControllerEndpoint{ID: 1, Address: addr}, 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = b.ControlledShutdown(ctx)
	if !errors.Is(err, ErrControllerUnreachable) {
		t.Fatalf("controlled shutdown with no controller: %v, want ErrControllerUnreachable", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("controlled shutdown waited out its timeout: %v", err)
	}
}

// While the controller answers heartbeats, a controlled shutdown waits for
// its ShutdownReady until its own timeout, however long the leaderships
// take to move.
func TestControlledShutdownWaitsWhileTheControllerAnswers(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	internalv1.RegisterControllerServer(s, &heartbeatVoter{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	defer func() {
		s.Stop()
		<-done
	}()
	// A session of 1.5 s: on a loaded machine one heartbeat's round trip
	// (dial included) took over 300 ms, which read as "no controller".
	b := shutdownBroker(t, ControllerEndpoint{ID: 1, Address: lis.Addr().String()}, 1500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second) // several heartbeat rounds, beyond a session

	defer cancel()
	err = b.ControlledShutdown(ctx)
	if errors.Is(err, ErrControllerUnreachable) || errs.Code(err) != sluicev1.ErrorCode_REQUEST_TIMED_OUT {
		t.Fatalf("controlled shutdown with an answering controller: %v, want REQUEST_TIMED_OUT at its own timeout", err)
	}
}
