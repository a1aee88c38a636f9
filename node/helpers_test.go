package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Helpers shared by the node tests of every build (with and without the
// sluicetest tag).

// testNode is a single node (nodetest) with the fault endpoint helpers.
type testNode struct {
	*nodetest.Single
	t *testing.T
}

func startNodeWith(t *testing.T, dir string, edit func(*node.Config)) *testNode {
	t.Helper()
	return &testNode{nodetest.StartSingle(t, dir, edit), t}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// publicRequest is a produce request of one public RecordBatch, as a
// client generated from the .proto in any language builds it.
func publicRequest(t *testing.T, acks sluicev1.Acks, topic string, partition int32, prefix string, n int) *sluicev1.ProduceRequest {
	t.Helper()
	var rb sluicev1.RecordBatch
	if err := proto.Unmarshal(nodetest.Batch(prefix, n, 1000), &rb); err != nil {
		t.Fatal(err)
	}
	return &sluicev1.ProduceRequest{Acks: acks, TimeoutMs: 20_000, Topics: []*sluicev1.TopicProduceData{{Name: topic,
		Partitions: []*sluicev1.PartitionProduceData{{Partition: partition, Batch: &rb}}}}}
}

// tryProduce sends one batch through the server view and returns the gRPC
// error, or the partition's answer.
func (tn *testNode) tryProduce(topic string, raw []byte) (*sluicev1.PartitionProduceResponse, error) {
	req := &internalv1.ProduceRequestView{Acks: sluicev1.Acks_ACKS_ALL, Topics: []*internalv1.TopicProduceDataView{{Name: topic, Partitions: []*internalv1.PartitionProduceDataView{{Partition: 0, Batch: raw}}}}}
	resp := &sluicev1.ProduceResponse{}
	if err := tn.Conn.Invoke(ctx(tn.t), "/sluice.v1.Log/Produce", req, resp); err != nil {
		return nil, err
	}
	return resp.Topics[0].Partitions[0], nil
}

// wantUnavailable checks that err is the injected UNAVAILABLE with msg.
func wantUnavailable(t *testing.T, err error, msg string) {
	t.Helper()
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != msg {
		t.Fatalf("got %v, want UNAVAILABLE %q", err, msg)
	}
}

// checkAcked reads the whole partition from its leader and checks that
// every acknowledged record is there at its offset.
func checkAcked(t *testing.T, ctx context.Context, cl *client.Client, topic string, acked map[int64]string) {
	t.Helper()
	co, err := cl.NewConsumer(client.WithMaxWait(100 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Assign(topic, 0, 0); err != nil {
		t.Fatal(err)
	}
	got := map[int64]string{}
	wait.For(t, 30*time.Second, "every acknowledged record read back", func() error {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		recs, err := co.Poll(pctx)
		cancel()
		if err != nil && pctx.Err() == nil {
			return err
		}
		for _, r := range recs {
			got[r.Offset] = string(r.Value)
		}
		for off, v := range acked {
			if got[off] != v {
				return fmt.Errorf("offset %d: %q, want %q (%d of %d read)", off, got[off], v, len(got), len(acked))
			}
		}
		return nil
	})
}

func httpGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// batchOf decodes a canonical batch into the wire message.
func batchOf(t *testing.T, raw []byte) *sluicev1.RecordBatch {
	t.Helper()
	var b sluicev1.RecordBatch
	if err := proto.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	return &b
}
