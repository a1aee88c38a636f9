package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-io/sluice/proto/batch"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// TestIdempotentRetryRecognisedAfterKill9: a broker with producer state is
// SIGKILLed (no clean shutdown, no snapshot at close) and restarted; a
// retry of the producer's last batch still gets its original offset and
// nothing is written twice.
func TestIdempotentRetryRecognisedAfterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs sluiced")
	}
	c := startTestCluster(t, 1)
	sluice, listen := c.sluice, c.node(1).Listen
	if _, stderr, err := runCLI(t, sluice, "", "--brokers="+listen, "topic", "create", "idem", "--partitions", "1", "--replication-factor", "1"); err != nil {
		t.Fatalf("topic create: %v\n%s", err, stderr)
	}

	dialCtx := func() (*grpc.ClientConn, context.Context, context.CancelFunc) {
		cc, err := grpc.NewClient(listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		return cc, ctx, cancel
	}
	cc, ctx, cancel := dialCtx()
	ip, err := sluicev1.NewTransactionsClient(cc).InitProducerId(ctx, &sluicev1.InitProducerIdRequest{})
	if err != nil || ip.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("InitProducerId: %v %v", ip, err)
	}
	produce := func(cc *grpc.ClientConn, ctx context.Context, seq int32) *sluicev1.PartitionProduceResponse {
		var b batch.Builder
		b.Reset(1000)
		for i := 0; i < 5; i++ {
			b.Add(1000, nil, []byte(fmt.Sprintf("seq-%d", int(seq)+i)), nil)
		}
		raw := b.Finish(batch.Producer{ID: ip.ProducerId, Epoch: ip.ProducerEpoch, BaseSequence: seq}, 0)
		req := &internalv1.ProduceRequestView{Acks: sluicev1.Acks_ACKS_ALL, Topics: []*internalv1.TopicProduceDataView{{Name: "idem",
			Partitions: []*internalv1.PartitionProduceDataView{{Partition: 0, Batch: raw}}}}}
		resp := &sluicev1.ProduceResponse{}
		if err := cc.Invoke(ctx, "/sluice.v1.Log/Produce", req, resp); err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0]
	}
	for seq := int32(0); seq < 50; seq += 5 {
		if r := produce(cc, ctx, seq); r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != int64(seq) {
			t.Fatalf("batch at seq %d: %v", seq, r)
		}
	}
	cancel()
	cc.Close()

	c.kill(1)
	c.restart(1)
	cc, ctx, cancel = dialCtx()
	defer cc.Close()
	defer cancel()
	if r := produce(cc, ctx, 45); r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 45 {
		t.Fatalf("retry of the last batch after kill -9: %v, want the original offset 45", r)
	}
	if r := produce(cc, ctx, 55); r.ErrorCode != sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER {
		t.Fatalf("gap after kill -9: %v", r)
	}
	if r := produce(cc, ctx, 50); r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 50 {
		t.Fatalf("next batch after kill -9: %v", r)
	}
	out, stderr, err := runCLI(t, sluice, "", "--brokers="+listen, "consume", "idem", "--partition", "0", "--from-beginning", "--max-messages", "55", "--timeout", "5s")
	if err != nil {
		t.Fatalf("consume: %v\n%s", err, stderr)
	}
	want := ""
	for i := 0; i < 55; i++ {
		want += fmt.Sprintf("seq-%d\n", i)
	}
	if out != want {
		t.Fatalf("log after kill -9 and retries:\n%s\nwant each of seq-0..seq-54 once", out)
	}
}
