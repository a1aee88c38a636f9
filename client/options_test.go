package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

func TestOptionValidation(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Error("New with no brokers: want error")
	}
	if _, err := New([]string{"x:1"}, WithDialTimeout(0)); err == nil {
		t.Error("zero dial timeout: want error")
	}
	if _, err := New([]string{"x:1"}, WithRequestTimeout(-time.Second)); err == nil {
		t.Error("negative request timeout: want error")
	}
	c, err := New([]string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bad := map[string]ProducerOption{
		"max in flight 6": WithMaxInFlight(6),
		"max in flight 0": WithMaxInFlight(0),
		"negative linger": WithLinger(-time.Millisecond),
		"tiny batch":      WithBatchBytes(10),
		"zero delivery":   WithDeliveryTimeout(0),
		"unknown acks":    WithAcks(Acks(9)),
		"nil partitioner": WithPartitioner(nil),
		"tiny buffer":     WithBufferBytes(1),
	}
	for name, o := range bad {
		if p, err := c.NewProducer(o); err == nil {
			p.Close()
			t.Errorf("%s: want error", name)
		}
	}
	p, err := c.NewProducer(WithMaxInFlight(5), WithAcks(AcksLeader), WithLinger(0))
	if err != nil {
		t.Fatalf("valid options: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]ConsumerOption{
		"max wait 31s":       WithMaxWait(31 * time.Second),
		"negative min":       WithMinBytes(-1),
		"huge max":           WithMaxBytes(MaxMessageSize + 1),
		"zero partition max": WithPartitionMaxBytes(0),
		"unknown isolation":  WithIsolation(Isolation(7)),
	} {
		if _, err := c.NewConsumer(o); err == nil {
			t.Errorf("%s: want error", name)
		}
	}
	co, err := c.NewConsumer()
	if err != nil {
		t.Fatal(err)
	}
	if err := co.Assign("t", 0, -3); err == nil {
		t.Error("offset -3: want error")
	}
	co.Close()
}

// WithDialer: every connection to a broker is made by the given dialer.
func TestWithDialerMakesTheConnections(t *testing.T) {
	if _, err := New([]string{"x:1"}, WithDialer(nil)); err == nil {
		t.Error("nil dialer: want error")
	}
	f := startFake(t, map[string]int{"t": 1})
	var mu sync.Mutex
	var dialed []string
	c, err := New([]string{f.addr}, WithDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Metadata(ctxT(t), "t"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialed) == 0 || dialed[0] != f.addr {
		t.Errorf("dialer called for %v, want %s", dialed, f.addr)
	}
}
