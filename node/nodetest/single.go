package nodetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/node"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Single is one running combined node (controller voter and broker, a
// cluster of its own) with a client connection to it and a connection to
// its internal listener, for tests that act as another node.
type Single struct {
	Node     *node.Node
	Dir      string           // its data dir
	Conn     *grpc.ClientConn // to Node.Addr(): the public services
	Internal *grpc.ClientConn // to Node.InternalAddr(): the inter-node services
	Log      sluicev1.LogClient
	Admin    sluicev1.AdminClient

	tb   testing.TB
	once sync.Once // Stop and Abort end the node once
}

// StartSingle starts a combined node with data in dir (Config(tb, dir),
// then edit if not nil) and waits until it is ready. It fails tb at once if
// the node does not start or is not ready within ReadyTimeout. The node is
// stopped (Stop) by tb's Cleanup unless the test ended it before; dir may
// be started again after that.
func StartSingle(tb testing.TB, dir string, edit func(*node.Config)) *Single {
	tb.Helper()
	cfg := Config(tb, dir)
	if edit != nil {
		edit(&cfg)
	}
	n, err := node.Start(cfg)
	if err != nil {
		tb.Fatalf("start node: %v", err)
	}
	if err := waitReady(n); err != nil {
		n.Abort()
		tb.Fatal(err)
	}
	conn := Dial(tb, n.Addr())
	s := &Single{Node: n, Dir: dir, Conn: conn, Internal: Dial(tb, n.InternalAddr()),
		Log: sluicev1.NewLogClient(conn), Admin: sluicev1.NewAdminClient(conn), tb: tb}
	tb.Cleanup(s.Stop)
	return s
}

// Stop closes the connection and shuts the node down gracefully (bounded
// by StopTimeout), failing tb (Errorf) if Shutdown reports an error. Only
// the first Stop or Abort acts.
func (s *Single) Stop() {
	s.once.Do(func() {
		s.Conn.Close()
		s.Internal.Close()
		ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		if err := s.Node.Shutdown(ctx); err != nil {
			s.tb.Errorf("shutdown: %v", err)
		}
	})
}

// Abort closes the connection and stops the node as if its process died
// (node.Node.Abort). Only the first Stop or Abort acts.
func (s *Single) Abort() {
	s.once.Do(func() {
		s.Conn.Close()
		s.Internal.Close()
		s.Node.Abort()
	})
}

// CreateTopic creates topic name with partitions partitions, replication
// factor 1 and configs, failing the test unless it was created.
func (s *Single) CreateTopic(name string, partitions int32, configs map[string]string) {
	s.tb.Helper()
	resp, err := s.Admin.CreateTopics(requestContext(s.tb), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{
		{Name: name, NumPartitions: partitions, ReplicationFactor: 1, Configs: configs}}})
	if err != nil {
		s.tb.Fatal(err)
	}
	if c := resp.Topics[0].ErrorCode; c != sluicev1.ErrorCode_NONE {
		s.tb.Fatalf("create %s: %v %s", name, c, resp.Topics[0].ErrorMessage)
	}
}

// Fetch fetches topic/partition from offset (read_uncommitted, no leader
// epoch), waiting up to maxWait for data, and fails the test on an RPC
// error; partition errors are in the answer.
func (s *Single) Fetch(topic string, partition int32, offset int64, maxWait time.Duration) *sluicev1.PartitionData {
	s.tb.Helper()
	resp, err := s.Log.Fetch(requestContext(s.tb), &sluicev1.FetchRequest{
		MaxWaitMs: int32(maxWait / time.Millisecond),
		Topics:    []*sluicev1.FetchTopic{{Name: topic, Partitions: []*sluicev1.FetchPartition{{Partition: partition, FetchOffset: offset, CurrentLeaderEpoch: -1}}}},
	})
	if err != nil {
		s.tb.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}
