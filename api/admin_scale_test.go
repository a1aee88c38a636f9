package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"

	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// scaleImage is the metadata image of issue 31's target: topics topics of
// partitions partitions each, replication factor 3 on brokers 1..3, every
// replica in sync, leaders spread round robin.
func scaleImage(topics, partitions int) *controller.Image {
	im := controller.NewImage()
	im.ClusterID, im.Offset = "c-scale", 1
	for id := int32(1); id <= 3; id++ {
		im.Brokers[id] = &controller.Broker{ID: id, Address: fmt.Sprintf("127.0.0.1:95%d0", id), Epoch: int64(id)}
	}
	for i := range topics {
		t := &controller.Topic{Name: fmt.Sprintf("topic-%04d", i), ID: fmt.Sprintf("id-%04d", i), Configs: map[string]string{"min.insync.replicas": "2"}}
		for p := range partitions {
			r := []int32{int32(1 + (i+p)%3), int32(1 + (i+p+1)%3), int32(1 + (i+p+2)%3)}
			t.Partitions = append(t.Partitions, &controller.PartitionState{Replicas: r, ISR: append([]int32(nil), r...), Leader: r[0], LeaderEpoch: 1})
		}
		im.Topics[t.Name] = t
	}
	return im
}

// failDisk marks every replica of broker id offline, as a broker whose
// log directory failed reports them, and takes them out of the ISR.
func failDisk(im *controller.Image, id int32) {
	b := im.Brokers[id]
	for _, name := range im.TopicNames() {
		t := im.Topics[name]
		for p, ps := range t.Partitions {
			if !slices.Contains(ps.Replicas, id) {
				continue
			}
			b.OfflineReplicas = append(b.OfflineReplicas, controller.OfflineReplica{Topic: name, TopicID: t.ID, Partition: int32(p),
				Path: fmt.Sprintf("/var/lib/sluice/logs/%s-%d", name, p), Error: fmt.Sprintf("write /var/lib/sluice/logs/%s-%d/00000000000000000000.log: input/output error", name, p)})
			ps.ISR = slices.DeleteFunc(ps.ISR, func(r int32) bool { return r == id })
			if ps.Leader == id {
				ps.Leader = ps.ISR[0]
			}
		}
	}
}

// scaleServer is a Server whose metadata is im and which knows no
// controller voter (DescribeCluster's quorum part is then empty): enough
// for the handlers that answer from the image.
func scaleServer(tb testing.TB, im *controller.Image) *Server {
	tb.Helper()
	cache := cluster.NewMetadataCache()
	if err := cache.Update(im.Offset, im, nil); err != nil {
		tb.Fatal(err)
	}
	cache.MarkApplied(im.Offset)
	pool := cluster.NewConnPool()
	tb.Cleanup(func() { pool.Close() })
	return NewServer(ServerConfig{Metadata: cache, Pool: pool, Self: Broker{NodeID: 1},
		Controllers: cluster.NewControllerClient(pool, func() []cluster.ControllerEndpoint { return nil })})
}

// BenchmarkAdminScale measures the answers of the admin RPCs behind
// `sluice topic list|describe` and `cluster status` at 1,000 topics of 10
// partitions (10,000 partitions, replication factor 3): bytes on the wire
// (proto size) and handler time; Metadata/list/authorized is the listing
// with every topic checked by the authorizer. Run it with
// go test -run '^$' -bench AdminScale ./api/.
func BenchmarkAdminScale(b *testing.B) {
	s := scaleServer(b, scaleImage(1000, 10))
	// The same cluster after broker 1's disk failed: it reported each of
	// its 10,000 replicas offline (decision 42).
	im := scaleImage(1000, 10)
	failDisk(im, 1)
	failed := scaleServer(b, im)
	// The same cluster with authorization: the caller may describe the
	// topics of 100 prefixes (every topic), so a listing checks each.
	authorized := scaleServer(b, scaleImage(1000, 10))
	var acls []auth.ACL
	for i := range 100 {
		acls = append(acls, auth.ACL{ResourceType: auth.ResourceTopic, Name: fmt.Sprintf("topic-%02d", i), Pattern: auth.PatternPrefixed,
			Principal: "User:alice", Host: auth.WildcardHost, Operation: auth.OpDescribe, Permission: auth.Allow})
	}
	authorized.authz = NewAuthz(auth.NewAuthorizer(acls, nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
	alice := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 50000}})
	alice = auth.WithCaller(alice, auth.Caller{Principal: auth.User("alice")})
	ctx := context.Background()
	cases := []struct {
		name string
		call func() (proto.Message, error)
	}{
		{"Metadata/all", func() (proto.Message, error) { return s.Metadata(ctx, &sluicev1.MetadataRequest{}) }},
		{"Metadata/one", func() (proto.Message, error) {
			return s.Metadata(ctx, &sluicev1.MetadataRequest{Topics: []string{"topic-0500"}})
		}},
		{"Metadata/list", func() (proto.Message, error) {
			return s.Metadata(ctx, &sluicev1.MetadataRequest{ExcludePartitions: true, ExcludeConfigs: true})
		}},
		{"Metadata/list/authorized", func() (proto.Message, error) {
			return authorized.Metadata(alice, &sluicev1.MetadataRequest{ExcludePartitions: true, ExcludeConfigs: true})
		}},
		{"Metadata/page-2000", func() (proto.Message, error) {
			return s.Metadata(ctx, &sluicev1.MetadataRequest{PageSize: 2000, PageToken: "topic-0500"})
		}},
		{"Metadata/under-replicated", func() (proto.Message, error) {
			return s.Metadata(ctx, &sluicev1.MetadataRequest{PartitionFilter: sluicev1.PartitionFilter_PARTITION_FILTER_UNDER_REPLICATED})
		}},
		{"Metadata/under-replicated/disk-failed/page-2000", func() (proto.Message, error) {
			return failed.Metadata(ctx, &sluicev1.MetadataRequest{PartitionFilter: sluicev1.PartitionFilter_PARTITION_FILTER_UNDER_REPLICATED, PageSize: 2000})
		}},
		{"DescribeCluster", func() (proto.Message, error) { return s.DescribeCluster(ctx, &sluicev1.DescribeClusterRequest{}) }},
		{"DescribeCluster/disk-failed", func() (proto.Message, error) {
			return failed.DescribeCluster(ctx, &sluicev1.DescribeClusterRequest{})
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var size int
			for b.Loop() {
				m, err := c.call()
				if err != nil {
					b.Fatal(err)
				}
				size = proto.Size(m)
			}
			b.ReportMetric(float64(size), "bytes/answer")
		})
	}
}
