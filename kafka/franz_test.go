package kafka_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// startKafkaNode starts a single node with its Kafka listener on a free
// loopback port.
func startKafkaNode(t *testing.T) *nodetest.Single {
	t.Helper()
	return nodetest.StartSingle(t, t.TempDir(), func(c *node.Config) { c.KafkaListen = "127.0.0.1:0" })
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newClient is a franz-go client of addr; opts come after the defaults.
func newClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RetryTimeout(20 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestFranzGoProduceConsume: franz-go, unmodified, creates a topic with
// kadm, produces idempotently (its default) with keys, null and empty
// values and headers, and consumes everything back in order; a gRPC
// reader of the same partitions sees the same records at the same
// offsets.
func TestFranzGoProduceConsume(t *testing.T) {
	s := startKafkaNode(t)
	addr := s.Node.KafkaAddr()
	ctx := testContext(t, 60*time.Second)
	adm := kadm.NewClient(newClient(t, addr))
	const topic = "orders"
	res, err := adm.CreateTopics(ctx, 3, 1, nil, topic)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[topic]; r.Err != nil {
		t.Fatalf("create: %v (%s)", r.Err, r.ErrMessage)
	}
	prod := newClient(t, addr, kgo.DefaultProduceTopic(topic))
	const n = 3000
	want := make(map[int32][]*kgo.Record)
	var recs []*kgo.Record
	for i := range n {
		r := &kgo.Record{Key: []byte("k" + strconv.Itoa(i%17)), Value: []byte(fmt.Sprintf("value-%d", i)),
			Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(strconv.Itoa(i))}, {Key: "empty", Value: []byte{}}}}
		switch i % 100 {
		case 7:
			r.Value = nil // null value
		case 8:
			r.Value = []byte{} // empty, not null
		case 9:
			r.Key = nil
		}
		recs = append(recs, r)
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		want[r.Partition] = append(want[r.Partition], r)
	}
	for p, rs := range want {
		for i, r := range rs {
			if r.Offset != int64(i) {
				t.Fatalf("partition %d record %d at offset %d", p, i, r.Offset)
			}
		}
	}

	cons := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	got := make(map[int32][]*kgo.Record)
	total := 0
	for total < n {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", total, n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], r)
			total++
		})
	}
	for p, rs := range want {
		g := got[p]
		if len(g) != len(rs) {
			t.Fatalf("partition %d: %d records consumed, %d produced", p, len(g), len(rs))
		}
		for i, w := range rs {
			r := g[i]
			if r.Offset != w.Offset || string(r.Key) != string(w.Key) || string(r.Value) != string(w.Value) ||
				(r.Key == nil) != (w.Key == nil) || (r.Value == nil) != (w.Value == nil) || len(r.Headers) != len(w.Headers) {
				t.Fatalf("partition %d record %d: got offset %d key %q value %q (nil %v), want offset %d key %q value %q (nil %v)",
					p, i, r.Offset, r.Key, r.Value, r.Value == nil, w.Offset, w.Key, w.Value, w.Value == nil)
			}
			for j, h := range w.Headers {
				if r.Headers[j].Key != h.Key || string(r.Headers[j].Value) != string(h.Value) {
					t.Fatalf("partition %d record %d header %d: %+v, want %+v", p, i, j, r.Headers[j], h)
				}
			}
			if r.Timestamp.UnixMilli() != w.Timestamp.UnixMilli() {
				t.Fatalf("partition %d record %d: timestamp %v, want %v", p, i, r.Timestamp, w.Timestamp)
			}
			if r.ProducerID != w.ProducerID || r.ProducerEpoch != w.ProducerEpoch {
				t.Fatalf("partition %d record %d: producer %d/%d, want %d/%d", p, i, r.ProducerID, r.ProducerEpoch, w.ProducerID, w.ProducerEpoch)
			}
		}
	}

	// The gRPC door reads the same records at the same offsets.
	for p, rs := range want {
		type rec struct {
			offset     int64
			key, value string
			headers    int
		}
		var grpcRecs []rec
		for off := int64(0); off < int64(len(rs)); {
			pd := s.Fetch(topic, p, off, 0)
			if len(pd.Batches) == 0 {
				t.Fatalf("gRPC fetch of %s-%d at %d: nothing", topic, p, off)
			}
			for _, b := range pd.Batches {
				// franz-go compresses (snappy) by default: the batch is
				// served as stored, and proto/batch decompresses it, as
				// the Go client does.
				for _, r := range grpcRecords(t, b) {
					if r.Offset >= off {
						grpcRecs = append(grpcRecs, rec{r.Offset, string(r.Key), string(r.Value), len(r.Headers)})
					}
				}
				off = b.BaseOffset + int64(b.LastOffsetDelta) + 1
			}
		}
		for i, w := range rs {
			r := grpcRecs[i]
			if r.offset != w.Offset || r.key != string(w.Key) || r.value != string(w.Value) || r.headers != len(w.Headers) {
				t.Fatalf("gRPC partition %d record %d: %+v, want offset %d key %q value %q", p, i, r, w.Offset, w.Key, w.Value)
			}
		}
	}
}

// grpcRecords decodes a batch a gRPC fetch answered (generated code's
// message), compressed or not, with proto/batch.
func grpcRecords(t *testing.T, m *sluicev1.RecordBatch) []batch.Record {
	t.Helper()
	raw, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := batch.Canonicalize(raw)
	if err != nil {
		t.Fatalf("a fetched batch does not re-encode: %v", err)
	}
	var out []batch.Record
	if err := batch.ForEachRecord(b, func(r batch.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
