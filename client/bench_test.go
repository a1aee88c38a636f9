package client

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/proto/batch"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// viewBroker is a minimal broker on the raw-bytes server views (like
// sluiced): produce canonicalizes and keeps batches in memory, fetch
// returns them as bytes. It measures the client's own cost.
type viewBroker struct {
	*fakeBroker
	mu      sync.Mutex
	batches [][]byte
}

func startViewBroker(tb testing.TB) *viewBroker {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	vb := &viewBroker{fakeBroker: &fakeBroker{fakeState: newFakeState(map[string]int{"t": 1}), addr: l.Addr().String(), node: 1}}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize))
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "sluice.v1.Log",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Produce", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				req := &internalv1.ProduceRequestView{}
				if err := dec(req); err != nil {
					return nil, err
				}
				resp := &sluicev1.ProduceResponse{}
				vb.mu.Lock()
				defer vb.mu.Unlock()
				for _, t := range req.Topics {
					tr := &sluicev1.TopicProduceResponse{Name: t.Name}
					resp.Topics = append(resp.Topics, tr)
					for _, p := range t.Partitions {
						b, _, err := batch.Canonicalize(p.Batch)
						if err != nil {
							return nil, err
						}
						base := endOffset(vb.batches)
						batch.SetBaseOffset(b, base)
						vb.batches = append(vb.batches, b)
						tr.Partitions = append(tr.Partitions, &sluicev1.PartitionProduceResponse{Partition: p.Partition, BaseOffset: base, LogAppendTimeMs: -1})
					}
				}
				return resp, nil
			}},
			{MethodName: "ListOffsets", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				req := &sluicev1.ListOffsetsRequest{}
				if err := dec(req); err != nil {
					return nil, err
				}
				return &sluicev1.ListOffsetsResponse{Topics: []*sluicev1.ListOffsetsTopicResponse{{Name: "t", Partitions: []*sluicev1.ListOffsetsPartitionResponse{{Partition: 0}}}}}, nil
			}},
			{MethodName: "Fetch", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				req := &sluicev1.FetchRequest{}
				if err := dec(req); err != nil {
					return nil, err
				}
				vb.mu.Lock()
				defer vb.mu.Unlock()
				resp := &internalv1.FetchResponseView{}
				for _, t := range req.Topics {
					tr := &internalv1.FetchableTopicResponseView{Name: t.Name}
					resp.Topics = append(resp.Topics, tr)
					for _, fp := range t.Partitions {
						pd := &internalv1.PartitionDataView{Partition: fp.Partition, NextFetchOffset: fp.FetchOffset, HighWatermark: endOffset(vb.batches)}
						size := 0
						for _, b := range vb.batches {
							h, _ := batch.ParseHeader(b)
							if h.NextOffset() <= fp.FetchOffset {
								continue
							}
							if size > 0 && size+len(b) > int(fp.PartitionMaxBytes) {
								break
							}
							pd.Batches = append(pd.Batches, b)
							pd.NextFetchOffset = h.NextOffset()
							size += len(b)
						}
						tr.Partitions = append(tr.Partitions, pd)
					}
				}
				return resp, nil
			}},
		},
	}, nil)
	sluicev1.RegisterAdminServer(s, vb.fakeBroker)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(l) }()
	tb.Cleanup(func() { s.Stop(); <-done })
	return vb
}

// BenchmarkProduceConsume100B measures produce (acks=1) then consume of
// 100-byte records against an in-memory view broker.
func BenchmarkProduceConsume100B(b *testing.B) {
	vb := startViewBroker(b)
	c, err := New([]string{vb.addr})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(WithAcks(AcksLeader))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	value := make([]byte, 100)
	var acked atomic.Int64
	cb := func(_ RecordMetadata, err error) {
		if err != nil {
			b.Error(err)
		}
		acked.Add(1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		p.Send(ctx, Record{Topic: "t", Partition: 0, Value: value}, cb)
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "produce-rec/s")
	p.Close()
	co, _ := c.NewConsumer()
	defer co.Close()
	co.Assign("t", 0, OffsetEarliest)
	start = time.Now()
	got := 0
	for got < b.N {
		recs, err := co.Poll(ctx)
		if err != nil {
			b.Fatal(err)
		}
		got += len(recs)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "consume-rec/s")
}
