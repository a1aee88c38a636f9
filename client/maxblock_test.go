package client

import (
	"context"
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Send waits (up to max block) while the cluster cannot give the topic's
// metadata yet, rather than failing the record: found by the chaos
// harness, where a producer's lookup that reached only a restarting broker
// failed records of an existing topic at once.
func TestSendWaitsForMetadataWithinMaxBlock(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	f.metadataUnavailable = 4
	c, err := New([]string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(WithAcks(AcksLeader))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	md, err := p.SendSync(ctx, Record{Topic: "t", Partition: -1, Value: []byte("v")})
	if err != nil {
		t.Fatalf("send while the broker had no metadata for a while: %v", err)
	}
	if md.Offset != 0 {
		t.Fatalf("offset %d, want 0", md.Offset)
	}
	f.mu.Lock()
	calls := f.metadataCalls
	f.mu.Unlock()
	if calls < 5 {
		t.Fatalf("%d metadata requests; the 4 refused ones were not retried", calls)
	}
	if got := f.records(t, "t", 0); len(got) != 1 || got[0] != "v" {
		t.Fatalf("stored %q", got)
	}
}

// Past max block the record fails, unsent; a topic that does not exist
// still fails at once.
func TestSendFailsAfterMaxBlock(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	c, err := New([]string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(WithAcks(AcksLeader), WithMaxBlock(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f.mu.Lock()
	f.metadataUnavailable = 1 << 30
	f.mu.Unlock()
	start := time.Now()
	_, err = p.SendSync(ctx, Record{Topic: "t", Partition: -1, Value: []byte("v")})
	if !containsCode(err, sluicev1.ErrorCode_LEADER_NOT_AVAILABLE) {
		t.Fatalf("send with no metadata past max block: %v, want LEADER_NOT_AVAILABLE", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("failed after %v, before max block 300ms", d)
	}
	if got := f.records(t, "t", 0); len(got) != 0 {
		t.Fatalf("stored %q", got)
	}

	f.mu.Lock()
	f.metadataUnavailable = 0
	f.mu.Unlock()
	_, err = p.SendSync(ctx, Record{Topic: "nope", Partition: -1, Value: []byte("x")})
	if !containsCode(err, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION) {
		t.Fatalf("unknown topic: %v", err)
	}
	if err := WithMaxBlock(0)(&producerConfig{}); err == nil {
		t.Fatal("WithMaxBlock(0) accepted")
	}
}
