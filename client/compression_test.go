package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/kafkarecords"
)

// WithCompression: the producer sends compressed batches with each
// codec, the broker stores them compressed (a gRPC fetch sees the codec
// and compressed_records), and the consumer reads every record back, in
// order, with its key, value and headers.
func TestProducerCompressesConsumerDecompresses(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	c, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		codec, err := client.ParseCompression(name)
		if err != nil || codec.String() != name {
			t.Fatalf("ParseCompression(%q) = %v, %v", name, codec, err)
		}
		topic := "compressed-" + name
		s.CreateTopic(topic, 1, nil)
		p, err := c.NewProducer(client.WithCompression(codec), client.WithLinger(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		const n = 200
		for i := range n {
			p.Send(ctx, client.Record{Topic: topic, Partition: 0, Key: []byte(fmt.Sprintf("k%d", i%7)), Value: []byte(fmt.Sprintf("%s value %d", name, i)),
				Headers: []client.Header{{Key: "i", Value: []byte(fmt.Sprint(i))}}}, func(_ client.RecordMetadata, err error) {
				if err != nil {
					t.Errorf("send: %v", err)
				}
			})
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		p.Close()
		pd := s.Fetch(topic, 0, 0, 0)
		if len(pd.Batches) == 0 {
			t.Fatalf("%s: nothing stored", name)
		}
		for _, b := range pd.Batches {
			if kafkarecords.Codec(b.Attributes&7) != kafkarecords.Codec(codec) || (codec != client.CompressionNone) != (len(b.CompressedRecords) > 0) {
				t.Fatalf("%s: stored batch attributes %x, %d compressed bytes", name, b.Attributes, len(b.CompressedRecords))
			}
		}
		co, err := c.NewConsumer(client.WithMaxWait(50 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := co.Assign(topic, 0, 0); err != nil {
			t.Fatal(err)
		}
		got := 0
		for got < n {
			recs, err := co.Poll(ctx)
			if err != nil {
				t.Fatalf("%s: poll: %v", name, err)
			}
			for _, r := range recs {
				if r.Offset != int64(got) || string(r.Value) != fmt.Sprintf("%s value %d", name, got) || string(r.Key) != fmt.Sprintf("k%d", got%7) ||
					len(r.Headers) != 1 || string(r.Headers[0].Value) != fmt.Sprint(got) {
					t.Fatalf("%s: record %d = %+v", name, got, r)
				}
				got++
			}
		}
		co.Close()
	}
	if _, err := client.ParseCompression("brotli"); err == nil {
		t.Fatal("ParseCompression accepted brotli")
	}
	if _, err := c.NewProducer(client.WithCompression(6)); err == nil {
		t.Fatal("WithCompression(6) accepted")
	}
}
