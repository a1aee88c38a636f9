package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/node/nodetest"
)

// A topic named twice in Subscribe is subscribed once: the coordinator
// refuses a heartbeat whose subscription repeats a topic (api/limits.go,
// issue 29), so the client must not send one.
func TestSubscribeNamingATopicTwiceConsumesIt(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	s.CreateTopic("t", 1, nil)
	c, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := c.NewProducer()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.SendSync(ctx, client.Record{Topic: "t", Partition: 0, Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	co, err := c.NewConsumer(client.WithGroup("g"), client.WithAutoOffsetReset(client.OffsetEarliest), client.WithMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Subscribe("t", "t"); err != nil {
		t.Fatal(err)
	}
	for {
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatalf("poll with a subscription naming t twice: %v", err)
		}
		if len(recs) > 0 {
			if string(recs[0].Value) != "v" {
				t.Fatalf("polled %q, want v", recs[0].Value)
			}
			return
		}
	}
}
