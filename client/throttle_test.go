package client

import (
	"context"
	"testing"
	"time"
)

// KIP-219's client side: after an answer with throttle_time_ms T the
// producer sends nothing more to that broker until T has passed since it
// sent the throttled request; the client id goes in the "client-id"
// metadata; Throttled sums the throttles.
func TestProducerWaitsOutThrottleAndSendsClientID(t *testing.T) {
	for _, unary := range []bool{false, true} {
		name := map[bool]string{false: "stream", true: "unary"}[unary]
		t.Run(name, func(t *testing.T) {
			f := startFake(t, map[string]int{"t": 1})
			const throttle = 300 * time.Millisecond
			f.throttleMs = int32(throttle / time.Millisecond)
			f.unaryOnly = unary
			c, err := New([]string{f.addr}, WithClientID("billing"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			p, err := c.NewProducer(WithAcks(AcksLeader), WithLinger(0))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for range 3 {
				if _, err := p.SendSync(ctx, Record{Topic: "t", Value: []byte("v")}); err != nil {
					t.Fatal(err)
				}
			}
			f.mu.Lock()
			at, ids := append([]time.Time(nil), f.produceAt...), append([]string(nil), f.clientIDs...)
			f.mu.Unlock()
			if len(at) != 3 {
				t.Fatalf("%d produce requests, want 3", len(at))
			}
			for i := 1; i < len(at); i++ {
				if gap := at[i].Sub(at[i-1]); gap < throttle-10*time.Millisecond {
					t.Errorf("request %d came %v after the throttled one, want at least %v", i, gap, throttle)
				}
			}
			if len(ids) != 3 || ids[0] != "billing" {
				t.Errorf("client ids %q", ids)
			}
			if st := p.Throttled(); st.Count != 3 || st.Total != 3*throttle || st.Max != throttle {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// The consumer waits out a fetch answer's throttle before its next fetch
// from that broker.
func TestConsumerWaitsOutThrottle(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	const throttle = 200 * time.Millisecond
	f.throttleMs = int32(throttle / time.Millisecond)
	c, err := New([]string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	co, err := c.NewConsumer(WithMaxWait(10 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Assign("t", 0, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for ctx.Err() == nil {
		co.Poll(ctx)
	}
	f.mu.Lock()
	at := append([]time.Time(nil), f.fetchAt...)
	f.mu.Unlock()
	if len(at) < 2 || len(at) > 6 {
		t.Fatalf("%d fetches in 1 s with a 200 ms throttle", len(at))
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < throttle-10*time.Millisecond {
			t.Errorf("fetch %d came %v after the throttled one", i, gap)
		}
	}
	if st := co.Throttled(); st.Count != int64(len(at)) || st.Max != throttle {
		t.Errorf("stats %+v after %d fetches", st, len(at))
	}
}
