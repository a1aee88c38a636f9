package cluster

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fakeMetadataVoter serves MetadataStream: one snapshot at offset, naming
// itself the controller leader, then keepalives every 100 ms — or, when
// hung, nothing more while the connection stays open (a SIGSTOPped voter).
// With notController it refuses every stream as a voter that does not
// lead; with pauseOnce, its first stream goes silent that long after the
// snapshot and then goes on at offset+10 (a leader whose broker was
// stopped, or which stalled, for a moment).
type fakeMetadataVoter struct {
	internalv1.UnimplementedControllerServer
	id            int32
	offset        atomic.Uint64
	hung          bool
	notController bool
	pauseOnce     atomic.Int64 // nanoseconds; taken by the first stream
}

func (v *fakeMetadataVoter) MetadataStream(_ *internalv1.MetadataStreamRequest, st internalv1.Controller_MetadataStreamServer) error {
	if v.notController {
		return errs.Status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the controller", v.id), nil)
	}
	if d := time.Duration(v.pauseOnce.Swap(0)); d > 0 {
		if err := v.sendSnapshot(st, v.offset.Load()); err != nil {
			return err
		}
		v.offset.Add(10) // later streams serve the next offset
		select {
		case <-st.Context().Done():
			return nil
		case <-time.After(d):
		}
	}
	if err := v.sendSnapshot(st, v.offset.Load()); err != nil {
		return err
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-st.Context().Done():
			return nil
		case <-t.C:
		}
		if v.hung {
			continue
		}
		if err := st.Send(&internalv1.MetadataUpdate{Offset: v.offset.Load(), ControllerLeader: v.id}); err != nil {
			return err
		}
	}
}

func (v *fakeMetadataVoter) sendSnapshot(st internalv1.Controller_MetadataStreamServer, offset uint64) error {
	im := controller.NewImage()
	im.Offset = offset
	snap, err := controller.EncodeSnapshot(im)
	if err != nil {
		return err
	}
	return st.Send(&internalv1.MetadataUpdate{Offset: offset, ControllerLeader: v.id, Snapshot: snap})
}

// startMetadataVoter serves v on a loopback port until the test ends.
func startMetadataVoter(t *testing.T, v *fakeMetadataVoter) ControllerEndpoint {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	internalv1.RegisterControllerServer(s, v)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return ControllerEndpoint{ID: v.id, Address: lis.Addr().String()}
}

// A broker whose metadata stream goes silent (the voter serving it hangs
// with its connection open) gives it up after the idle timeout and
// follows the stream of another voter, trying the silent one last: its
// metadata does not stay frozen for as long as the voter hangs.
func TestMetadataStreamSilentVoterIsLeft(t *testing.T) {
	h := &fakeMetadataVoter{id: 1, hung: true}
	h.offset.Store(10)
	hung := startMetadataVoter(t, h)
	l := &fakeMetadataVoter{id: 2}
	l.offset.Store(20)
	live := startMetadataVoter(t, l)
	pool := NewConnPool()
	defer pool.Close()
	controllers := NewControllerClient(pool, func() []ControllerEndpoint { return []ControllerEndpoint{hung, live} })
	controllers.SetLeader(1) // the hung voter was the leader
	cache := NewMetadataCache()
	b := NewBrokerLifecycle(BrokerConfig{NodeID: 7, Address: "127.0.0.1:1", Controllers: controllers, Metadata: cache,
		MetadataStreamIdle: 300 * time.Millisecond, HeartbeatInterval: time.Hour})
	b.goroutines.Go(b.metadataLoop) // the heartbeat loop is not under test
	defer b.Stop()

	wait.Until(t, 10*time.Second, "the hung voter's snapshot applied", func() bool { return cache.Image().Offset >= 10 })
	wait.For(t, 10*time.Second, "the live voter's metadata followed", func() error {
		if off := cache.Image().Offset; off != 20 {
			return fmt.Errorf("image at offset %d", off)
		}
		return nil
	})
}

// A stream from the real leader that seemed silent (the broker itself was
// stopped for a moment) is left once, not for good: after one attempt at
// another voter, which answers NOT_CONTROLLER, the broker subscribes to
// the leader again and follows its metadata.
func TestMetadataStreamSilenceOfTheLeaderIsForgiven(t *testing.T) {
	other := startMetadataVoter(t, &fakeMetadataVoter{id: 1, notController: true})
	v := &fakeMetadataVoter{id: 2}
	v.offset.Store(10)
	v.pauseOnce.Store(int64(time.Second))
	leader := startMetadataVoter(t, v)
	pool := NewConnPool()
	defer pool.Close()
	controllers := NewControllerClient(pool, func() []ControllerEndpoint { return []ControllerEndpoint{other, leader} })
	controllers.SetLeader(2)
	cache := NewMetadataCache()
	b := NewBrokerLifecycle(BrokerConfig{NodeID: 7, Address: "127.0.0.1:1", Controllers: controllers, Metadata: cache,
		MetadataStreamIdle: 300 * time.Millisecond, HeartbeatInterval: time.Hour})
	b.goroutines.Go(b.metadataLoop)
	defer b.Stop()

	wait.Until(t, 10*time.Second, "the leader's first snapshot applied", func() bool { return cache.Image().Offset >= 10 })
	wait.For(t, 10*time.Second, "the leader followed again after its silence", func() error {
		if off := cache.Image().Offset; off != 20 {
			return fmt.Errorf("image at offset %d", off)
		}
		return nil
	})
}
