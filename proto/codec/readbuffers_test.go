package codec

import (
	"bytes"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
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

// Batches read into ReadBuffers are encoded as references to those
// buffers, the bytes are proto.Marshal's, and a buffer goes back to the
// pool only when the sender and every encoded piece have let go of it.
func TestReadBuffersKeepBatchesUntilWritten(t *testing.T) {
	pool := &countingPool{}
	bufs := &ReadBuffers{Pool: pool}
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
	var none *ReadBuffers
	none.Free()
}

// Without ReadBuffers (a unary answer, or a consumer read) the encoding
// is the batches themselves, as before.
func TestReadBuffersPieceOfForeignBytes(t *testing.T) {
	bufs := &ReadBuffers{Pool: &countingPool{}}
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
