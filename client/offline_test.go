package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The count behind OfflineRetry: it runs while every outcome is
// ErrPartitionOffline, and anything else (another error, success)
// restarts it.
func TestOfflineForCountsOnlyAnUnbrokenStretch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	offline := partitionMetadataError(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "disk")
	other := partitionMetadataError(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "no leader")
	steps := []struct {
		err  error
		at   time.Duration
		want bool
	}{
		{offline, 0, false},
		{offline, OfflineRetry - time.Millisecond, false},
		{other, OfflineRetry, false}, // restarts the count
		{offline, OfflineRetry + time.Second, false},
		{offline, 2*OfflineRetry + time.Second, true},
		{nil, 2*OfflineRetry + 2*time.Second, false},
		{offline, 2*OfflineRetry + 3*time.Second, false},
	}
	var o offlineFor
	for i, s := range steps {
		if got := o.observe(s.err, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d (%v at %v): %v, want %v", i, s.err, s.at, got, s.want)
		}
	}
	if !errors.Is(offline, ErrPartitionOffline) || errors.Is(other, ErrPartitionOffline) {
		t.Errorf("only KAFKA_STORAGE_ERROR from the metadata is ErrPartitionOffline")
	}
	if errs.Code(offline) != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR || offline.Error() != "KAFKA_STORAGE_ERROR: disk" {
		t.Errorf("offline error %q, code %v: want the wire code and message", offline, errs.Code(offline))
	}
}

// Issue 28: a partition the metadata reports offline after a disk failure
// (KAFKA_STORAGE_ERROR, no leader) fails a producer's records with the
// broker's message after OfflineRetry, not at the delivery timeout, and a
// consumer's Poll reports it then; a partition that merely has no leader
// (LEADER_NOT_AVAILABLE) is retried until the delivery timeout as before.
func TestOfflinePartitionFailsFastWithItsMessage(t *testing.T) {
	const msg = "partition t-0 is offline: broker 1's log directory /d/t-0 failed: write /d/t-0/0.log: no space left on device"
	f := startFake(t, map[string]int{"t": 1})
	f.mu.Lock()
	f.partitionErrors = map[string]*errs.Error{"t/0": {Code: sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, Message: msg}}
	f.mu.Unlock()
	c, err := New([]string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := c.NewProducer(WithLinger(0), WithDeliveryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	start := time.Now()
	_, err = p.SendSync(ctx, Record{Topic: "t", Partition: 0, Value: []byte("x")})
	took := time.Since(start)
	if !errors.Is(err, ErrPartitionOffline) || !containsCode(err, sluicev1.ErrorCode_KAFKA_STORAGE_ERROR) || !strings.Contains(err.Error(), msg) {
		t.Errorf("send: %v; want ErrPartitionOffline with KAFKA_STORAGE_ERROR and the broker's message", err)
	}
	if took < OfflineRetry || took > OfflineRetry+5*time.Second {
		t.Errorf("send failed after %v, want about OfflineRetry (%v)", took, OfflineRetry)
	}

	co, err := c.NewConsumer()
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Assign("t", 0, OffsetEarliest); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = co.Poll(ctx)
	took = time.Since(start)
	if !errors.Is(err, ErrPartitionOffline) || !strings.Contains(err.Error(), msg) {
		t.Errorf("poll: %v; want ErrPartitionOffline with the broker's message", err)
	}
	if took < OfflineRetry || took > OfflineRetry+5*time.Second {
		t.Errorf("poll failed after %v, want about OfflineRetry (%v)", took, OfflineRetry)
	}

	// Once the partition is back (a broker restarted with a healthy
	// disk), both go on.
	f.mu.Lock()
	f.partitionErrors = nil
	f.mu.Unlock()
	if _, err := p.SendSync(ctx, Record{Topic: "t", Partition: 0, Value: []byte("back")}); err != nil {
		t.Errorf("send after the partition came back: %v", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	recs, err := co.Poll(pctx)
	pcancel()
	if err != nil || len(recs) != 1 || string(recs[0].Value) != "back" {
		t.Errorf("poll after the partition came back: %v, %v", recs, err)
	}

	// No leader for another reason: retried until the delivery timeout
	// (the next retry would pass it), failing with the server's message.
	f.mu.Lock()
	f.partitionErrors = map[string]*errs.Error{"t/0": {Code: sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, Message: "partition t-0 has no leader"}}
	f.mu.Unlock()
	c.forget("t")
	p2, err := c.NewProducer(WithLinger(0), WithDeliveryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	start = time.Now()
	_, err = p2.SendSync(ctx, Record{Topic: "t", Partition: 0, Value: []byte("y")})
	took = time.Since(start)
	if errors.Is(err, ErrPartitionOffline) || !strings.Contains(err.Error(), "LEADER_NOT_AVAILABLE: partition t-0 has no leader") {
		t.Errorf("send with no leader: %v; want the server's LEADER_NOT_AVAILABLE, not ErrPartitionOffline", err)
	}
	if took < 500*time.Millisecond {
		t.Errorf("send with no leader failed after %v: not retried up to the delivery timeout (1s)", took)
	}
}
