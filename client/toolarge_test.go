package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// withTopicLimit makes the client's cached metadata of f's topic say
// max.message.bytes = limit, as a broker's metadata does (the fake's
// metadata carries no configs).
func withTopicLimit(t *testing.T, c *Client, f *fakeBroker, topic, limit string) {
	t.Helper()
	resp, err := f.Metadata(context.Background(), &sluicev1.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Topics[0].Configs = map[string]string{"max.message.bytes": limit}
	c.storeMetadata(resp)
}

// Issue 28: a record that, as a batch of its own, is larger than its
// topic's max.message.bytes (from the metadata) fails at once with a
// *RecordTooLargeError that names that limit, and is not sent; one of
// exactly the limit is sent, and the broker stores a batch of exactly that
// size (the client's size is the broker's).
func TestSendRefusesARecordOverItsTopicsMaxMessageBytes(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	c, err := New([]string{f.addr}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	withTopicLimit(t, c, f, "t", "2048")
	p, err := c.NewProducer(WithLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err = p.SendSync(ctx, Record{Topic: "t", Partition: 0, Key: []byte("k"), Value: bytes.Repeat([]byte("x"), 3000)})
	var tl *RecordTooLargeError
	if !errors.As(err, &tl) || !tl.OverTopicLimit() || tl.OverRequestLimit() || tl.MaxMessageBytes != 2048 || tl.Size <= 3000 {
		t.Fatalf("record of 3000 bytes, topic limit 2048: %v (%+v), want a *RecordTooLargeError over the topic's limit only", err, tl)
	}
	if errs.Code(err) != sluicev1.ErrorCode_MESSAGE_TOO_LARGE {
		t.Errorf("code %v, want MESSAGE_TOO_LARGE", errs.Code(err))
	}
	// The size is that of the record alone in a batch, as built.
	var b batch.Builder
	b.Reset(1)
	b.Add(1, []byte("k"), bytes.Repeat([]byte("x"), 3000), nil)
	built := len(b.Finish(batch.PlainProducer, 0))
	if want := fmt.Sprintf(`MESSAGE_TOO_LARGE: record of %d bytes exceeds the max.message.bytes 2048 of topic "t"`, built); err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if got := f.records(t, "t", 0); len(got) != 0 {
		t.Fatalf("%d records reached the broker", len(got))
	}

	// The largest value that fits.
	v := 2048
	for singleBatchSize(Record{Key: []byte("k"), Value: make([]byte, v)}) > 2048 {
		v--
	}
	if _, err := p.SendSync(ctx, Record{Topic: "t", Partition: 0, Key: []byte("k"), Value: bytes.Repeat([]byte("y"), v)}); err != nil {
		t.Fatalf("record of exactly the topic's limit: %v", err)
	}
	f.mu.Lock()
	stored := f.topics["t"][0]
	f.mu.Unlock()
	if len(stored) != 1 || len(stored[0]) != 2048 {
		t.Fatalf("stored batches %d, the first of %d bytes; want one of 2048", len(stored), len(stored[0]))
	}
}

// Records that each fit their topic's max.message.bytes are batched within
// it, not into a batch the broker would refuse as a whole.
func TestBatchesStayWithinTheTopicsMaxMessageBytes(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	c, err := New([]string{f.addr}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	withTopicLimit(t, c, f, "t", "2048")
	p, err := c.NewProducer(WithLinger(time.Second)) // records gather: only the size closes a batch
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var failed atomic.Int64
	for range 20 {
		p.Send(ctx, Record{Topic: "t", Partition: 0, Value: bytes.Repeat([]byte("v"), 300)}, func(_ RecordMetadata, err error) {
			if err != nil {
				failed.Add(1)
			}
		})
	}
	if err := p.Flush(ctx); err != nil || failed.Load() != 0 {
		t.Fatalf("flush: %v; %d records failed", err, failed.Load())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	stored := f.topics["t"][0]
	if len(stored) < 4 {
		t.Errorf("%d batches for 20 records of 300 bytes, want at least 4 within 2048 bytes", len(stored))
	}
	for i, b := range stored {
		if len(b) > 2048 {
			t.Errorf("batch %d has %d bytes, over the topic's 2048", i, len(b))
		}
	}
}
