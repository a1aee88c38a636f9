package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// BenchmarkProduceStreamAcksAll measures acks=all produce of one record
// per request over a ProduceStream to the leader of a partition with
// three replicas (min.insync.replicas 2), in an in-process cluster: sync
// waits for each answer before sending the next request (an op is one
// record's round trip: append, replication to the followers, HW move,
// answer); pipelined keeps 16 requests in flight. It uses only the public
// API, so the same file measures older commits.
func BenchmarkProduceStreamAcksAll(b *testing.B) {
	for _, bc := range []struct {
		name   string
		window int
	}{{"sync", 1}, {"pipelined", 16}} {
		b.Run(bc.name, func(b *testing.B) {
			tc := nodetest.NewCluster(b, []int32{1, 2, 3}, true, nil)
			tc.ConfigureAll(func(_ int32, cfg *node.Config) { cfg.ReplicaLagTimeMax = time.Minute })
			tc.StartAll()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			admin := sluicev1.NewAdminClient(tc.Dial(1))
			r, err := admin.CreateTopics(ctx, &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "bench", NumPartitions: 1, ReplicationFactor: 3,
				Configs: map[string]string{"min.insync.replicas": "2"}}}})
			if err != nil || r.Topics[0].ErrorCode != 0 {
				b.Fatalf("create: %v %v", err, r)
			}
			tc.WaitTopic("bench", 1)
			var leader int32
			wait.For(b, 10*time.Second, "bench-0 has a leader with a full ISR", func() error {
				md, err := admin.Metadata(ctx, &sluicev1.MetadataRequest{Topics: []string{"bench"}})
				if err != nil {
					return err
				}
				pm := md.Topics[0].Partitions[0]
				if pm.LeaderId <= 0 || len(pm.Isr) != 3 {
					return fmt.Errorf("leader %d, ISR %v", pm.LeaderId, pm.Isr)
				}
				leader = pm.LeaderId
				return nil
			})
			st, err := sluicev1.NewLogClient(tc.Dial(leader)).ProduceStream(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var rb sluicev1.RecordBatch
			if err := proto.Unmarshal(nodetest.Batch("v", 1, 1000), &rb); err != nil {
				b.Fatal(err)
			}
			req := &sluicev1.ProduceRequest{Acks: sluicev1.Acks_ACKS_ALL, TimeoutMs: 30_000, Topics: []*sluicev1.TopicProduceData{{Name: "bench",
				Partitions: []*sluicev1.PartitionProduceData{{Partition: 0, Batch: &rb}}}}}
			recv := func() {
				a, err := st.Recv()
				if err != nil {
					b.Fatal(err)
				}
				if p := a.GetResponse().GetTopics()[0].Partitions[0]; p.ErrorCode != sluicev1.ErrorCode_NONE {
					b.Fatalf("request %d: %v", a.CorrelationId, p)
				}
			}
			// Warm up: connections, the followers' fetch sessions.
			for i := range 100 {
				if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: int64(-1 - i), Request: req}); err != nil {
					b.Fatal(err)
				}
				recv()
			}
			b.ReportAllocs()
			b.ResetTimer()
			inFlight := 0
			for i := range b.N {
				if inFlight == bc.window {
					recv()
					inFlight--
				}
				if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: int64(i), Request: req}); err != nil {
					b.Fatal(err)
				}
				inFlight++
			}
			for ; inFlight > 0; inFlight-- {
				recv()
			}
			b.StopTimer()
			if err := st.CloseSend(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
