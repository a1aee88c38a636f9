package codec

import (
	"bytes"
	"sync"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// countingPool is a mem.BufferPool that records what comes back.
type countingPool struct {
	mu  sync.Mutex
	got int
	put []*[]byte
}

func (p *countingPool) Get(n int) *[]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got++
	b := make([]byte, n)
	return &b
}

func (p *countingPool) Put(b *[]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.put = append(p.put, b)
}

func (p *countingPool) returned() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.put)
}

// Batches read into BatchBuffers are encoded as references to those
// buffers, the bytes are proto.Marshal's, and a buffer goes back to the
// pool only when the sender and every encoded piece have let go of it.
func TestBatchBuffersKeepBatchesUntilWritten(t *testing.T) {
	pool := &countingPool{}
	bufs := &BatchBuffers{Pool: pool}
	a := bufs.Alloc(20_000) // two batches read into one buffer
	for i := range a {
		a[i] = byte(i)
	}
	b := bufs.Alloc(9_000) // never used by the message
	for i := range b {
		b[i] = 0xee
	}
	other := bytes.Repeat([]byte{3}, 5_000) // not from the buffers
	m := &internalv1.ReplicaFetchResponse{Partitions: []*internalv1.ReplicaFetchPartitionData{
		{Topic: "t", HighWatermark: 7, Batches: [][]byte{a[100:8_000], a[8_000:19_000]}},
		{Topic: "u", Partition: 1, Batches: [][]byte{other}},
	}}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Codec{}.Marshal(&OutgoingReplicaFetchResponse{ReplicaFetchResponse: m, Buffers: bufs})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Materialize(), want) {
		t.Fatal("encoding differs from proto.Marshal")
	}
	aliased := 0
	for _, piece := range got {
		if inside(piece.ReadOnlyData(), a) && piece.Len() > 0 {
			aliased++
		}
	}
	if aliased != 2 {
		t.Fatalf("%d pieces reference the read buffer, want 2 (one per batch read into it)", aliased)
	}
	bufs.Free() // the sender is done: only the unused buffer goes back
	if n := pool.returned(); n != 1 {
		t.Fatalf("%d buffers back in the pool after the sender's Free, want 1 (the unused one)", n)
	}
	got.Free() // gRPC has written the message
	if n := pool.returned(); n != 2 {
		t.Fatalf("%d buffers back in the pool once written, want 2", n)
	}
	bufs.Free() // a second Free is harmless
	var none *BatchBuffers
	none.Free()
}

// Without BatchBuffers (a unary answer, or a consumer read) the encoding
// is the batches themselves, as before.
func TestBatchBuffersPieceOfForeignBytes(t *testing.T) {
	bufs := &BatchBuffers{Pool: &countingPool{}}
	defer bufs.Free()
	x := []byte("not from a buffer")
	p := bufs.piece(x)
	if !bytes.Equal(p.ReadOnlyData(), x) || !inside(p.ReadOnlyData(), x) {
		t.Fatal("a foreign batch must be encoded as itself")
	}
	if _, ok := within(x, x[2:]); !ok {
		t.Fatal("within: a sub-slice lies within its slice")
	}
	if _, ok := within(x[2:], x); ok {
		t.Fatal("within: a slice does not lie within its sub-slice")
	}
}

// The hand-written encoding of a ProduceStreamRequest is byte for byte
// what deterministic proto.Marshal produces, and its batches inside added
// buffers are references to them, kept until the encoding is freed.
func TestProduceStreamRequestEncoding(t *testing.T) {
	big := bytes.Repeat([]byte{9}, 70_000)
	msgs := map[string]*internalv1.ProduceStreamRequestView{
		"empty":          {},
		"no request":     {CorrelationId: 5},
		"empty request":  {CorrelationId: 1 << 40, Request: &internalv1.ProduceRequestView{}},
		"topic, no data": {CorrelationId: 2, Request: &internalv1.ProduceRequestView{Acks: sluicev1.Acks(1), Topics: []*internalv1.TopicProduceDataView{{Name: "t"}}}},
		"batches": {CorrelationId: 3, Request: &internalv1.ProduceRequestView{TransactionalId: "tx-1", Acks: sluicev1.Acks(2), TimeoutMs: 30_000,
			Topics: []*internalv1.TopicProduceDataView{
				{Name: "a", Partitions: []*internalv1.PartitionProduceDataView{{Partition: 0, Batch: big[:1000]}, {Partition: 7, Batch: nil}, {Partition: -3, Batch: big}}},
				{Name: "", Partitions: []*internalv1.PartitionProduceDataView{{Partition: 1 << 30, Batch: []byte("x")}}},
			}}},
	}
	for name, m := range msgs {
		t.Run(name, func(t *testing.T) {
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Codec{}.Marshal(&OutgoingProduceStreamRequest{ProduceStreamRequestView: m})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Materialize(), want) {
				t.Fatalf("encoding differs from proto.Marshal:\n got %x\nwant %x", got.Materialize(), want)
			}
			// And it decodes in place to the same request.
			var back ProduceStreamRequest
			if err := (Codec{}).Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			back.Release()
			got.Free()
		})
	}

	// A batch buffer added by the producer: referenced, not copied, and
	// recycled only once both the producer and the encoding let go.
	pool := &countingPool{}
	data := pool.Get(50_000)
	batchBuf := mem.NewBuffer(data, pool)
	m := &internalv1.ProduceStreamRequestView{CorrelationId: 9, Request: &internalv1.ProduceRequestView{
		Topics: []*internalv1.TopicProduceDataView{{Name: "a", Partitions: []*internalv1.PartitionProduceDataView{{Batch: (*data)[:40_000]}}}}}}
	bufs := &BatchBuffers{}
	bufs.Add(batchBuf)
	got, err := Codec{}.Marshal(&OutgoingProduceStreamRequest{ProduceStreamRequestView: m, Buffers: bufs})
	if err != nil {
		t.Fatal(err)
	}
	referenced := false
	for _, piece := range got {
		if piece.Len() == 40_000 && inside(piece.ReadOnlyData(), *data) {
			referenced = true
		}
	}
	if !referenced {
		t.Fatal("the batch was copied, not referenced")
	}
	bufs.Free()
	batchBuf.Free() // the producer recycles the batch
	if pool.returned() != 0 {
		t.Fatal("the batch buffer went back to the pool while the encoding still uses it")
	}
	got.Free()
	if pool.returned() != 1 {
		t.Fatalf("%d buffers back in the pool once written, want 1", pool.returned())
	}
}
