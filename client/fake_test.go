package client

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// fakeBroker is one node of an in-memory broker cluster speaking the
// public API, for exercising the client without sluiced. The nodes share
// one fakeState: batches per partition, and per partition the
// idempotent-producer state, checked with the broker's own pure rules
// (storage.ProducerState), so a new leader deduplicates a retry the old
// one wrote, as followers that keep the same state do. Faults are injected
// through the fakeState fields.
type fakeBroker struct {
	sluicev1.UnimplementedLogServer
	sluicev1.UnimplementedAdminServer
	sluicev1.UnimplementedTransactionsServer
	sluicev1.UnimplementedGroupsServer
	*fakeState
	addr string
	node int32
}

// fakeState is what the nodes of a fake cluster share.
type fakeState struct {
	mu      sync.Mutex            // guards the following
	topics  map[string][][][]byte // topic -> partition -> batches
	nodes   map[int32]*fakeBroker
	leaders map[string]int32 // "topic/partition" -> leader node; absent: node 1

	// failing: produce attempts of "topic/partition" left to refuse with
	// NOT_LEADER_OR_FOLLOWER before looking at the batch.
	failing map[string]int
	// lose: appends of "topic/partition" left whose answer is lost: the
	// batch is written, the answer is REQUEST_TIMED_OUT. With moveOnLose
	// the partition's leadership then moves to the next node (the leader
	// replicated the batch and died before answering).
	lose       map[string]int
	moveOnLose bool
	// reject: the next produce attempt of "topic/partition" is refused
	// with this (non-retriable) code and nothing is written.
	reject map[string]sluicev1.ErrorCode
	// metadataUnavailable: Metadata requests left to refuse as a broker
	// that has no cluster metadata yet does (UNAVAILABLE,
	// LEADER_NOT_AVAILABLE); metadataCalls counts every request.
	metadataUnavailable, metadataCalls int
	// starting: nodes that answer as a broker starting up does, with no
	// cluster metadata yet: Metadata LEADER_NOT_AVAILABLE, DescribeCluster
	// an empty cluster (metadata offset 0).
	starting map[int32]bool
	// filteredUpTo: "topic/partition" -> an offset below which the
	// partition holds only batches the broker leaves out for consumers
	// (markers, aborted transactions): a fetch below it answers no
	// batches and NextFetchOffset there, as a real broker does.
	filteredUpTo map[string]int64
	// initError, when set, answers every InitProducerId.
	initError sluicev1.ErrorCode
	// partitionErrors: "topic/partition" -> the error Metadata reports
	// for the partition, with no leader (an offline partition).
	partitionErrors map[string]*errs.Error
	// dropRequests: requests left that are served completely, then
	// answered UNAVAILABLE (the whole answer lost).
	dropRequests int
	// hold, when not nil, parks every produce request until it is closed;
	// held counts the parked requests.
	hold chan struct{}
	held int
	// holdNode, when not 0, limits hold to the produce requests of that
	// node.
	holdNode int32

	producers    map[string]*storage.ProducerState // "topic/partition" -> producer state
	nextPID      int64
	initFailures int // InitProducerId calls left to answer COORDINATOR_LOAD_IN_PROGRESS
	initCalls    int

	// unaryOnly: the nodes serve no ProduceStream (UNIMPLEMENTED), as
	// brokers of an older version; streams counts the ones opened.
	unaryOnly  bool
	streams    int
	unaryCalls int

	produceCalls map[int32]int // produce requests per node
	// throttleMs is answered in every produce and fetch response;
	// produceAt and fetchAt are when each produce and fetch request came,
	// clientIDs the client id of each produce request.
	throttleMs  int32
	produceAt   []time.Time
	fetchAt     []time.Time
	clientIDs   []string
	inflight    map[string]int // produce requests being served, per partition
	maxInflight map[string]int // the most seen at once
	outOfOrder  int            // OUT_OF_ORDER_SEQUENCE_NUMBER answers
	duplicates  int            // duplicate batches answered with their original offset

	txn fakeTxnState   // the transaction coordinator (txn_fake_test.go)
	grp fakeGroupState // the group coordinator (group_fake_test.go)
}

func newFakeState(topics map[string]int) *fakeState {
	st := &fakeState{
		topics: map[string][][][]byte{}, nodes: map[int32]*fakeBroker{}, leaders: map[string]int32{},
		failing: map[string]int{}, lose: map[string]int{}, reject: map[string]sluicev1.ErrorCode{}, produceCalls: map[int32]int{}, producers: map[string]*storage.ProducerState{},
		starting: map[int32]bool{}, nextPID: 1000, inflight: map[string]int{}, maxInflight: map[string]int{},
	}
	for name, n := range topics {
		st.topics[name] = make([][][]byte, n)
	}
	return st
}

// startFake starts a one-node fake cluster and returns its node.
func startFake(t *testing.T, topics map[string]int) *fakeBroker {
	return startFakeCluster(t, topics, 1)
}

// startFakeCluster starts n fake nodes (ids 1..n) over one state and
// returns node 1; every partition is led by node 1 until leaders says
// otherwise.
func startFakeCluster(t *testing.T, topics map[string]int, n int) *fakeBroker {
	t.Helper()
	st := newFakeState(topics)
	for id := int32(1); id <= int32(n); id++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f := &fakeBroker{fakeState: st, addr: l.Addr().String(), node: id}
		st.nodes[id] = f
		s := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize))
		sluicev1.RegisterLogServer(s, f)
		sluicev1.RegisterAdminServer(s, f)
		sluicev1.RegisterTransactionsServer(s, f)
		sluicev1.RegisterGroupsServer(s, f)
		done := make(chan struct{})
		go func() { defer close(done); s.Serve(l) }()
		t.Cleanup(func() {
			st.release()
			s.Stop()
			<-done
		})
	}
	return st.nodes[1]
}

// release lets held requests go and stops holding new ones.
func (st *fakeState) release() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.hold != nil {
		close(st.hold)
		st.hold = nil
	}
}

func (st *fakeState) leader(key string) int32 {
	if id, ok := st.leaders[key]; ok {
		return id
	}
	return 1
}

// records returns the values stored in a partition, in offset order.
func (st *fakeState) records(t *testing.T, topic string, partition int32) []string {
	t.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for _, b := range st.topics[topic][partition] {
		if err := batch.ForEachRecord(b, func(r batch.Record) error {
			out = append(out, string(r.Value))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// headers returns the headers of the batches stored in a partition.
func (st *fakeState) headers(topic string, partition int32) []batch.Header {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []batch.Header
	for _, b := range st.topics[topic][partition] {
		h, _ := batch.ParseHeader(b)
		out = append(out, h)
	}
	return out
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
	f.metadataCalls++
	if f.starting[f.node] || f.metadataUnavailable > 0 {
		if !f.starting[f.node] {
			f.metadataUnavailable--
		}
		return nil, errs.Status(errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "broker %d has no cluster metadata yet (starting up)", f.node), nil)
	}
	resp := &sluicev1.MetadataResponse{}
	for id := int32(1); int(id) <= len(f.nodes); id++ {
		resp.Brokers = append(resp.Brokers, &sluicev1.BrokerMetadata{NodeId: id, Address: f.nodes[id].addr})
	}
	if len(resp.Brokers) == 0 { // a bare fakeBroker (bench_test's viewBroker)
		resp.Brokers = []*sluicev1.BrokerMetadata{{NodeId: 1, Address: f.addr}}
	}
	for _, name := range req.Topics {
		parts, ok := f.topics[name]
		if !ok {
			resp.Topics = append(resp.Topics, &sluicev1.TopicMetadata{Name: name, ErrorCode: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, ErrorMessage: "no such topic"})
			continue
		}
		tm := &sluicev1.TopicMetadata{Name: name}
		for p := range parts {
			leader := f.leader(fmt.Sprintf("%s/%d", name, p))
			pm := &sluicev1.PartitionMetadata{Partition: int32(p), LeaderId: leader, Replicas: []int32{leader}, Isr: []int32{leader}}
			if e := f.partitionErrors[fmt.Sprintf("%s/%d", name, p)]; e != nil {
				pm.LeaderId, pm.ErrorCode, pm.ErrorMessage = -1, e.Code, e.Message
			}
			tm.Partitions = append(tm.Partitions, pm)
		}
		resp.Topics = append(resp.Topics, tm)
	}
	return resp, nil
}

// DescribeCluster answers the fake's brokers, or an empty cluster while
// the node is starting.
func (f *fakeBroker) DescribeCluster(context.Context, *sluicev1.DescribeClusterRequest) (*sluicev1.DescribeClusterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.DescribeClusterResponse{ClusterId: "fake", NodeId: f.node}
	if f.starting[f.node] {
		return resp, nil
	}
	resp.MetadataOffset = 1
	for id := int32(1); int(id) <= len(f.nodes); id++ {
		resp.Brokers = append(resp.Brokers, &sluicev1.BrokerStatus{NodeId: id, Address: f.nodes[id].addr})
	}
	return resp, nil
}

func (f *fakeBroker) InitProducerId(_ context.Context, req *sluicev1.InitProducerIdRequest) (*sluicev1.InitProducerIdResponse, error) {
	if req.TransactionalId != "" {
		return f.initTransactional(req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initCalls++
	if f.initError != sluicev1.ErrorCode_NONE {
		return &sluicev1.InitProducerIdResponse{ProducerId: -1, ProducerEpoch: -1, ErrorCode: f.initError, ErrorMessage: "fake: refused"}, nil
	}
	if f.initFailures > 0 {
		f.initFailures--
		return &sluicev1.InitProducerIdResponse{ProducerId: -1, ProducerEpoch: -1, ErrorCode: sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS, ErrorMessage: "no producer id block yet"}, nil
	}
	id := f.nextPID
	f.nextPID++
	return &sluicev1.InitProducerIdResponse{ProducerId: id}, nil
}

// Produce serves a unary produce call.
func (f *fakeBroker) Produce(ctx context.Context, req *sluicev1.ProduceRequest) (*sluicev1.ProduceResponse, error) {
	f.mu.Lock()
	f.unaryCalls++
	f.mu.Unlock()
	return f.produce(ctx, req)
}

// produce serves one produce request, unary or from a stream: it notes
// when it came and its client id, and answers throttleMs without holding
// the answer (as a broker whose hold a deadline cut short).
func (f *fakeBroker) produce(ctx context.Context, req *sluicev1.ProduceRequest) (*sluicev1.ProduceResponse, error) {
	f.mu.Lock()
	f.produceAt = append(f.produceAt, time.Now())
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		f.clientIDs = append(f.clientIDs, md.Get(ClientIDMetadataKey)...)
	}
	throttle := f.throttleMs
	f.mu.Unlock()
	resp, err := f.produceOnce(req)
	if resp != nil {
		resp.ThrottleTimeMs = throttle
	}
	return resp, err
}

func (f *fakeBroker) produceOnce(req *sluicev1.ProduceRequest) (*sluicev1.ProduceResponse, error) {
	f.mu.Lock()
	f.produceCalls[f.node]++
	f.txn.produceIDs = append(f.txn.produceIDs, req.TransactionalId)
	var keys []string
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			key := fmt.Sprintf("%s/%d", t.Name, p.Partition)
			keys = append(keys, key)
			f.inflight[key]++
			f.maxInflight[key] = max(f.maxInflight[key], f.inflight[key])
		}
	}
	if hold := f.hold; hold != nil && (f.holdNode == 0 || f.holdNode == f.node) {
		f.held++
		f.mu.Unlock()
		<-hold
		f.mu.Lock()
		f.held--
	}
	defer f.mu.Unlock()
	defer func() {
		for _, k := range keys {
			f.inflight[k]--
		}
	}()
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
			if c, ok := f.reject[key]; ok {
				delete(f.reject, key)
				pr.ErrorCode, pr.ErrorMessage = c, "fake: rejected"
				continue
			}
			parts, ok := f.topics[t.Name]
			if !ok || int(p.Partition) >= len(parts) {
				pr.ErrorCode = sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION
				continue
			}
			if f.nodes[f.node] != nil && f.leader(key) != f.node {
				pr.ErrorCode = sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER
				continue
			}
			raw, err := proto.Marshal(p.Batch)
			if err != nil {
				return nil, err
			}
			b, h, err := batch.Canonicalize(raw)
			if err != nil {
				pr.ErrorCode = sluicev1.ErrorCode_CORRUPT_RECORD
				pr.ErrorMessage = err.Error()
				continue
			}
			info, err := storage.BatchInfoFromHeader(h)
			st := f.producers[key]
			if st == nil {
				st = storage.NewProducerState(0)
				f.producers[key] = st
			}
			var d storage.Decision
			if err == nil {
				d, err = st.Check(info)
			}
			if err != nil {
				pr.ErrorCode, pr.ErrorMessage = errs.Code(err), errs.Message(err)
				if pr.ErrorCode == sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER {
					f.outOfOrder++
				}
				continue
			}
			if d.Duplicate {
				f.duplicates++
				pr.BaseOffset = d.FirstOffset
				continue
			}
			base := endOffset(parts[p.Partition])
			batch.SetBaseOffset(b, base)
			parts[p.Partition] = append(parts[p.Partition], b)
			st.Update(info, base, base+int64(h.LastOffsetDelta), h.MaxTimestamp)
			pr.BaseOffset = base
			if f.lose[key] > 0 {
				f.lose[key]--
				pr.ErrorCode, pr.BaseOffset = sluicev1.ErrorCode_REQUEST_TIMED_OUT, -1
				if f.moveOnLose {
					f.leaders[key] = f.leader(key)%int32(len(f.nodes)) + 1
				}
			}
		}
	}
	if f.dropRequests > 0 {
		f.dropRequests--
		return nil, status.Error(codes.Unavailable, "fake: answer lost")
	}
	return resp, nil
}

func (f *fakeBroker) Fetch(_ context.Context, req *sluicev1.FetchRequest) (*sluicev1.FetchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txn.fetchIsolation = append(f.txn.fetchIsolation, req.IsolationLevel)
	f.fetchAt = append(f.fetchAt, time.Now())
	resp := &sluicev1.FetchResponse{ThrottleTimeMs: f.throttleMs}
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
			if to := f.filteredUpTo[fmt.Sprintf("%s/%d", t.Name, fp.Partition)]; fp.FetchOffset < to {
				pd.HighWatermark, pd.LastStableOffset = max(to, pd.HighWatermark), max(to, pd.HighWatermark)
				pd.NextFetchOffset = to
				continue
			}
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

// A Send that opens a batch wakes the sender, so the batch goes when its
// linger elapses even if nothing else happens (no Flush, no full batch).
func TestLoneSendIsSentAfterLinger(t *testing.T) {
	for _, idempotent := range []bool{false, true} {
		t.Run(fmt.Sprintf("idempotent=%v", idempotent), func(t *testing.T) {
			f := startFake(t, map[string]int{"t": 1})
			c, err := New([]string{f.addr})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			p, err := c.NewProducer(WithIdempotence(idempotent), WithLinger(5*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx := context.Background()
			if _, err := p.SendSync(ctx, Record{Topic: "t", Partition: 0, Value: []byte("warm")}); err != nil {
				t.Fatal(err)
			}
			// Not waiting for a condition: this gives the sender loop time
			// to go idle (nothing due), the state the rule is about.
			time.Sleep(50 * time.Millisecond)
			done := make(chan error, 1)
			p.Send(ctx, Record{Topic: "t", Partition: 0, Value: []byte("x")}, func(_ RecordMetadata, err error) { done <- err })
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a lone record was not sent within 5s of its 5ms linger")
			}
		})
	}
}

// SendSync waits for its own record, not for others in flight: with a
// record of another partition held at its broker, a SendSync to a
// partition led elsewhere returns as soon as its record is written (it
// used to flush and wait for every record of the producer). Its record
// goes without lingering, though the producer lingers an hour.
func TestSendSyncWaitsForItsOwnRecordOnly(t *testing.T) {
	f := startFakeCluster(t, map[string]int{"slow": 1, "fast": 1}, 2)
	f.mu.Lock()
	f.leaders["fast/0"] = 2
	f.hold, f.holdNode = make(chan struct{}), 1
	f.mu.Unlock()
	c, err := New([]string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(WithIdempotence(false), WithLinger(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	slow := make(chan error, 1)
	p.Send(context.Background(), Record{Topic: "slow", Partition: 0, Value: []byte("held")}, func(_ RecordMetadata, err error) { slow <- err })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	md, err := p.SendSync(ctx, Record{Topic: "fast", Partition: 0, Value: []byte("sync")})
	if err != nil {
		t.Fatalf("SendSync with another partition's record held: %v", err)
	}
	if md.Offset != 0 {
		t.Errorf("SendSync offset %d, want 0", md.Offset)
	}
	select {
	case err := <-slow:
		t.Fatalf("the held record completed (%v) before its broker answered", err)
	default:
	}
	f.release()
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-slow; err != nil {
		t.Fatalf("the held record: %v", err)
	}
}

// ProduceStream serves each request on the stream with Produce, each in
// its own goroutine (so held requests park as unary ones do). Produce's
// UNAVAILABLE (a lost answer) ends the stream with it, as the broker's
// fault injection does; its other errors are answered as error codes.
func (f *fakeBroker) ProduceStream(st grpc.BidiStreamingServer[sluicev1.ProduceStreamRequest, sluicev1.ProduceStreamResponse]) error {
	f.mu.Lock()
	if f.unaryOnly {
		f.mu.Unlock()
		return status.Error(codes.Unimplemented, "fake: no ProduceStream")
	}
	f.streams++
	f.mu.Unlock()
	var sendMu sync.Mutex // guards Send and closed
	closed := false
	var wg sync.WaitGroup
	end := make(chan error, 1)
	finish := func(err error) {
		select {
		case end <- err:
		default:
		}
	}
	go func() {
		for {
			req, err := st.Recv()
			if err != nil {
				wg.Wait()
				finish(err)
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := f.produce(st.Context(), req.Request)
				m := &sluicev1.ProduceStreamResponse{CorrelationId: req.CorrelationId, Response: resp}
				if status.Code(err) == codes.Unavailable {
					finish(err)
					return
				}
				if err != nil {
					e, _ := errs.FromStatus(err)
					m.ErrorCode, m.ErrorMessage = errs.Code(e), errs.Message(e)
				}
				sendMu.Lock()
				defer sendMu.Unlock()
				if !closed {
					_ = st.Send(m)
				}
			}()
		}
	}()
	err := <-end
	sendMu.Lock()
	closed = true
	sendMu.Unlock()
	if err == io.EOF {
		return nil
	}
	return err
}
