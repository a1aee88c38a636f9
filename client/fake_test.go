package client

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fakeBroker is an in-memory single-node broker speaking the public API,
// for exercising the client without sluiced. It stores canonical batches
// per partition and can inject per-partition produce errors.
type fakeBroker struct {
	sluicev1.UnimplementedLogServer
	sluicev1.UnimplementedAdminServer
	addr string

	mu      sync.Mutex            // guards the following
	topics  map[string][][][]byte // topic -> partition -> batches
	failing map[string]int        // "topic/partition" -> produce errors left to inject
}

func startFake(t *testing.T, topics map[string]int) *fakeBroker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBroker{addr: l.Addr().String(), topics: map[string][][][]byte{}, failing: map[string]int{}}
	for name, n := range topics {
		f.topics[name] = make([][][]byte, n)
	}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize))
	sluicev1.RegisterLogServer(s, f)
	sluicev1.RegisterAdminServer(s, f)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return f
}

func endOffset(batches [][]byte) int64 {
	if len(batches) == 0 {
		return 0
	}
	h, _ := batch.ParseHeader(batches[len(batches)-1])
	return h.NextOffset()
}

func (f *fakeBroker) Metadata(_ context.Context, req *sluicev1.MetadataRequest) (*sluicev1.MetadataResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.MetadataResponse{Brokers: []*sluicev1.BrokerMetadata{{NodeId: 1, Address: f.addr}}}
	for _, name := range req.Topics {
		parts, ok := f.topics[name]
		if !ok {
			resp.Topics = append(resp.Topics, &sluicev1.TopicMetadata{Name: name, ErrorCode: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, ErrorMessage: "no such topic"})
			continue
		}
		tm := &sluicev1.TopicMetadata{Name: name}
		for p := range parts {
			tm.Partitions = append(tm.Partitions, &sluicev1.PartitionMetadata{Partition: int32(p), LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}})
		}
		resp.Topics = append(resp.Topics, tm)
	}
	return resp, nil
}

func (f *fakeBroker) Produce(_ context.Context, req *sluicev1.ProduceRequest) (*sluicev1.ProduceResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.ProduceResponse{}
	for _, t := range req.Topics {
		tr := &sluicev1.TopicProduceResponse{Name: t.Name}
		resp.Topics = append(resp.Topics, tr)
		for _, p := range t.Partitions {
			pr := &sluicev1.PartitionProduceResponse{Partition: p.Partition, BaseOffset: -1, LogAppendTimeMs: -1}
			tr.Partitions = append(tr.Partitions, pr)
			key := fmt.Sprintf("%s/%d", t.Name, p.Partition)
			if f.failing[key] > 0 {
				f.failing[key]--
				pr.ErrorCode = sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER
				continue
			}
			parts, ok := f.topics[t.Name]
			if !ok || int(p.Partition) >= len(parts) {
				pr.ErrorCode = sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION
				continue
			}
			raw, err := proto.Marshal(p.Batch)
			if err != nil {
				return nil, err
			}
			b, _, err := batch.Canonicalize(raw)
			if err != nil {
				pr.ErrorCode = sluicev1.ErrorCode_CORRUPT_RECORD
				pr.ErrorMessage = err.Error()
				continue
			}
			base := endOffset(parts[p.Partition])
			batch.SetBaseOffset(b, base)
			parts[p.Partition] = append(parts[p.Partition], b)
			pr.BaseOffset = base
		}
	}
	return resp, nil
}

func (f *fakeBroker) Fetch(_ context.Context, req *sluicev1.FetchRequest) (*sluicev1.FetchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.FetchResponse{}
	for _, t := range req.Topics {
		tr := &sluicev1.FetchableTopicResponse{Name: t.Name}
		resp.Topics = append(resp.Topics, tr)
		for _, fp := range t.Partitions {
			pd := &sluicev1.PartitionData{Partition: fp.Partition, NextFetchOffset: fp.FetchOffset}
			tr.Partitions = append(tr.Partitions, pd)
			parts, ok := f.topics[t.Name]
			if !ok || int(fp.Partition) >= len(parts) {
				pd.ErrorCode = sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION
				continue
			}
			bs := parts[fp.Partition]
			pd.HighWatermark, pd.LastStableOffset = endOffset(bs), endOffset(bs)
			size := 0
			for _, b := range bs {
				h, _ := batch.ParseHeader(b)
				if h.NextOffset() <= fp.FetchOffset {
					continue
				}
				if size > 0 && size+len(b) > int(fp.PartitionMaxBytes) {
					break
				}
				rb := &sluicev1.RecordBatch{}
				if err := proto.Unmarshal(b, rb); err != nil {
					return nil, err
				}
				pd.Batches = append(pd.Batches, rb)
				pd.NextFetchOffset = h.NextOffset()
				size += len(b)
			}
		}
	}
	return resp, nil
}

func (f *fakeBroker) ListOffsets(_ context.Context, req *sluicev1.ListOffsetsRequest) (*sluicev1.ListOffsetsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.ListOffsetsResponse{}
	for _, t := range req.Topics {
		tr := &sluicev1.ListOffsetsTopicResponse{Name: t.Name}
		resp.Topics = append(resp.Topics, tr)
		for _, lp := range t.Partitions {
			pr := &sluicev1.ListOffsetsPartitionResponse{Partition: lp.Partition}
			if lp.Spec == sluicev1.OffsetSpec_OFFSET_SPEC_LATEST {
				pr.Offset = endOffset(f.topics[t.Name][lp.Partition])
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
	}
	return resp, nil
}

// Records of one partition are stored in Send order and come back from
// the consumer in order with their offsets, also when produce requests are
// retried after NOT_LEADER_OR_FOLLOWER.
func TestProduceConsumeRoundTripKeepsOrder(t *testing.T) {
	f := startFake(t, map[string]int{"t": 3})
	f.failing["t/1"] = 2 // two retriable failures on partition 1
	c, err := New([]string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(WithAcks(AcksLeader), WithBatchBytes(4096), WithLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 3000
	var mu sync.Mutex
	lastOffset := map[int32]int64{0: -1, 1: -1, 2: -1}
	var cbErr error
	for i := 0; i < n; i++ {
		r := Record{Topic: "t", Partition: int32(i % 3), Value: []byte(fmt.Sprintf("v%05d", i)), Headers: []Header{{Key: "h", Value: []byte("x")}}}
		p.Send(ctx, r, func(md RecordMetadata, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				cbErr = err
				return
			}
			if md.Offset != lastOffset[md.Partition]+1 {
				cbErr = fmt.Errorf("partition %d: callback offset %d after %d", md.Partition, md.Offset, lastOffset[md.Partition])
			}
			lastOffset[md.Partition] = md.Offset
		})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if cbErr != nil {
		t.Fatal(cbErr)
	}
	// Unknown topic fails at once with the code.
	_, err = func() (RecordMetadata, error) {
		p2, _ := c.NewProducer()
		defer p2.Close()
		return p2.SendSync(ctx, Record{Topic: "nope", Partition: -1, Value: []byte("x")})
	}()
	if err == nil || !containsCode(err, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION) {
		t.Errorf("unknown topic: got %v", err)
	}

	co, err := c.NewConsumer(WithPartitionMaxBytes(8192), WithMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Assign("t", 1, OffsetEarliest); err != nil {
		t.Fatal(err)
	}
	var got []Record
	for len(got) < n/3 {
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatalf("poll after %d records: %v", len(got), err)
		}
		got = append(got, recs...)
	}
	for i, r := range got {
		if want := fmt.Sprintf("v%05d", 3*i+1); string(r.Value) != want || r.Offset != int64(i) || r.Partition != 1 || len(r.Headers) != 1 {
			t.Fatalf("record %d = {off %d, %q, %d headers}, want {off %d, %q, 1 header}", i, r.Offset, r.Value, len(r.Headers), i, want)
		}
	}
	if pos, ok := co.Position("t", 1); !ok || pos != n/3 {
		t.Errorf("position = %d, %v; want %d", pos, ok, n/3)
	}
	// Seek back: records from the new position only.
	if err := co.Seek("t", 1, 990); err != nil {
		t.Fatal(err)
	}
	recs, err := co.Poll(ctx)
	if err != nil || len(recs) == 0 || recs[0].Offset != 990 {
		t.Fatalf("after Seek(990): %d records, first %+v, err %v", len(recs), recs, err)
	}
}

func containsCode(err error, code sluicev1.ErrorCode) bool {
	return err != nil && errs.Code(err) == code
}

// Errors the broker reports for a topic or partition surface with their
// code, so that callers can branch on errs.Code.
func TestErrorsCarryCodes(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	c, err := New([]string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	co, err := c.NewConsumer()
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	co.Assign("missing", 0, OffsetEarliest)
	if _, err := co.Poll(ctx); !containsCode(err, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION) {
		t.Errorf("poll of an unknown topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}

	p, err := c.NewProducer()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.SendSync(ctx, Record{Topic: "t", Partition: 5, Value: []byte("x")}); !containsCode(err, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION) {
		t.Errorf("send to partition 5 of a 1-partition topic: %v", err)
	}
	md, err := p.SendSync(ctx, Record{Topic: "t", Partition: -1, Key: []byte("k"), Value: []byte("x")})
	if err != nil || md.Offset != 0 || md.Partition != 0 {
		t.Errorf("keyed send: %+v, %v", md, err)
	}
	if _, err := c.ListOffsets(ctx, "missing", 0, sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0); !containsCode(err, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION) {
		t.Errorf("list offsets of an unknown topic: %v", err)
	}
	if off, err := c.ListOffsets(ctx, "t", 0, sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0); err != nil || off != 1 {
		t.Errorf("list offsets latest = %d, %v; want 1", off, err)
	}
}
