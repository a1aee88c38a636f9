package cluster

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/cluster/faultnet/faultnettest"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// startHealthServer serves grpc.health.v1 on a loopback port until the
// test ends.
func startHealthServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String()
}

// A pool with a dial map reaches a mapped peer through the map's target
// (the forwarder sees the connection), and still keys the connection by
// the real address; an unmapped peer is dialed directly.
func TestConnPoolDialsThroughDialMap(t *testing.T) {
	mapped, direct := startHealthServer(t), startHealthServer(t)
	fwd := faultnettest.New(t, mapped, false)
	pool := NewConnPoolWithDialMap(faultnet.DialMap{mapped: fwd.Addr()})
	defer pool.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, addr := range []string{mapped, direct} {
		cc, err := pool.Get(addr)
		if err != nil {
			t.Fatal(err)
		}
		if cc.Target() != addr {
			t.Errorf("connection for %s targets %s", addr, cc.Target())
		}
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health check of %s: %v %v", addr, resp, err)
		}
	}
	if n := fwd.Conns(); n != 1 {
		t.Fatalf("forwarder accepted %d connections, want 1 (the mapped peer's only)", n)
	}

	// The forwarder is the only way the pool reaches the mapped peer: with
	// it gone, calls fail although the peer is up.
	fwd.Close()
	cc, _ := pool.Get(mapped)
	cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer ccancel()
	if _, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("mapped peer reached with its forwarder closed")
	}
}

// Without a dial map the pool uses gRPC's own dialer (no custom dialer is
// installed): the default path is unchanged.
func TestConnPoolWithoutDialMap(t *testing.T) {
	if p := NewConnPoolWithDialMap(nil); p.dialMap != nil {
		t.Fatal("empty dial map installed")
	}
	addr := startHealthServer(t)
	pool := NewConnPool()
	defer pool.Close()
	cc, err := pool.Get(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
}

// stallingController answers no CreateTopics: each call waits for its
// context to end.
type stallingController struct {
	internalv1.UnimplementedControllerServer
}

func (stallingController) CreateTopics(ctx context.Context, _ *sluicev1.CreateTopicsRequest) (*internalv1.ControllerCreateTopicsResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A voter that does not answer before the caller's deadline yields
// NOT_CONTROLLER ("no active controller reachable"), which clients retry
// and report as such, not the nested call's own DeadlineExceeded (a broker
// passing that on made `topic create` without a quorum fail with raw gRPC
// text instead of naming the controller).
func TestControllerCallDeadlineIsNotController(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	internalv1.RegisterControllerServer(s, stallingController{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	defer func() {
		s.Stop()
		<-done
	}()
	pool := NewConnPool()
	defer pool.Close()
	cl := NewControllerClient(pool, func() []ControllerEndpoint {
		return []ControllerEndpoint{{ID: 1, Address: lis.Addr().String()}}
	})
	for _, attempt := range []time.Duration{100 * time.Millisecond, 10 * time.Second} {
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		err := cl.Call(ctx, attempt, func(ctx context.Context, c internalv1.ControllerClient) error {
			_, err := c.CreateTopics(ctx, &sluicev1.CreateTopicsRequest{})
			return err
		})
		cancel()
		if errs.Code(err) != sluicev1.ErrorCode_NOT_CONTROLLER {
			t.Errorf("attempt bound %v: Call = %v (code %v), want NOT_CONTROLLER", attempt, err, errs.Code(err))
		}
	}
}
