package cluster

import (
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
)

// fakeMetadataVoter serves MetadataStream: one snapshot at offset, naming
// itself the controller leader, then keepalives every 100 ms — or, when
// hung, nothing more while the connection stays open (a SIGSTOPped voter).
type fakeMetadataVoter struct {
	internalv1.UnimplementedControllerServer
	id     int32
	offset uint64
	hung   bool
}

func (v *fakeMetadataVoter) MetadataStream(_ *internalv1.MetadataStreamRequest, st internalv1.Controller_MetadataStreamServer) error {
	im := controller.NewImage()
	im.Offset = v.offset
	snap, err := controller.EncodeSnapshot(im)
	if err != nil {
		return err
	}
	if err := st.Send(&internalv1.MetadataUpdate{Offset: v.offset, ControllerLeader: v.id, Snapshot: snap}); err != nil {
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
		if err := st.Send(&internalv1.MetadataUpdate{Offset: v.offset, ControllerLeader: v.id}); err != nil {
			return err
		}
	}
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
	hung := startMetadataVoter(t, &fakeMetadataVoter{id: 1, offset: 10, hung: true})
	live := startMetadataVoter(t, &fakeMetadataVoter{id: 2, offset: 20})
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
