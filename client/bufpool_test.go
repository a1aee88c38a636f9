package client

import (
	"bytes"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
)

// Building into a recycled buffer must give exactly what a fresh Builder
// does, so that the broker's fast canonical path applies and CRCs agree.
func TestRecycledBufferMatchesBuilder(t *testing.T) {
	type rec struct {
		ts         int64
		key, value []byte
		headers    []batch.RecordHeader
	}
	recs := []rec{
		{1000, nil, []byte("a"), nil},
		{999, []byte("k"), nil, []batch.RecordHeader{{Key: "h", Value: []byte("v")}, {Key: "", Value: nil}}},
		{5000, []byte("key"), bytes.Repeat([]byte("x"), 300), nil},
		{1000, nil, nil, nil},
	}
	var bld batch.Builder
	var enc batch.Builder
	bld.Reset(1000)
	pool := bufPool{size: 64 << 10}
	recycled := pool.get()
	recycled = append(recycled, bytes.Repeat([]byte{0xee}, 200)...) // stale contents
	enc.ResetBuffer(recycled, 1000)
	for _, r := range recs {
		bld.Add(r.ts, r.key, r.value, r.headers)
		enc.Add(r.ts, r.key, r.value, r.headers)
		if enc.Size() != bld.Size() {
			t.Fatalf("size %d, builder %d", enc.Size(), bld.Size())
		}
	}
	want := bld.Finish(batch.PlainProducer, 0)
	got := enc.Finish(batch.PlainProducer, 0)
	if !bytes.Equal(got, want) {
		t.Fatalf("encoder output differs from batch.Builder")
	}
	if _, err := batch.Verify(got); err != nil {
		t.Fatal(err)
	}
}
