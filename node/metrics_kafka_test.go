package node_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/internal/wait"
)

// checkKafkaMetricsMove drives tn's Kafka listener with franz-go — an
// idempotent produce to topic (InitProducerId, Produce), a Metadata
// naming a topic that does not exist — and a frame of an unknown API,
// and checks the Kafka door's metrics moved: requests by API and
// outcome, their durations, the error code by name, the bytes both ways,
// the connection closed for unknown_api. TestMetricsMoveWithRequests
// calls it last, so that the scrape make check-monitoring lints holds
// every Kafka family.
func checkKafkaMetricsMove(t *testing.T, tn *testNode, topic string) {
	t.Helper()
	addr := tn.Node.HTTPAddr()
	before := scrape(t, addr)
	val := func(mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
		v, _ := sample(mfs, name, labels...) // 0 when absent: a series is made at its first count
		return v
	}
	produceOK := []string{"api", "Produce", "outcome", "ok"}
	metadataError := []string{"api", "Metadata", "outcome", "error"}
	unknownTopic := []string{"api", "Metadata", "code", "UNKNOWN_TOPIC_OR_PARTITION"}
	unknownAPI := []string{"reason", "unknown_api"}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(tn.Node.KafkaAddr()), kgo.DefaultProduceTopic(topic), kgo.RetryTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("over the Kafka door")}).FirstErr(); err != nil {
		t.Fatalf("produce over the Kafka door: %v", err)
	}
	meta := kmsg.NewPtrMetadataRequest()
	meta.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("no-such-topic")}}
	resp, err := meta.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 3 {
		t.Fatalf("Metadata of a missing topic: %+v, %v; want UNKNOWN_TOPIC_OR_PARTITION (3)", resp, err)
	}
	// A frame of API key 9999, which no broker serves: closed.
	conn, err := net.DialTimeout("tcp", tn.Node.KafkaAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	f := binary.BigEndian.AppendUint32(nil, 10)
	f = append(f, 0x27, 0x0f, 0, 0, 0, 0, 0, 1, 0xff, 0xff) // key 9999, v0, correlation 1, null client id
	if _, err := conn.Write(f); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("a frame of an unknown API: read %d bytes, %v; want the connection closed", n, err)
	}

	// The writer counts an answer once flushed, which may be after the
	// client read it — on each connection: franz-go produces over a
	// connection of its own, so the Metadata answer being counted says
	// nothing of the Produce answer.
	var after map[string]*dto.MetricFamily
	wait.For(t, 10*time.Second, "the Produce and Metadata answers and the close counted", func() (err error) {
		if after, err = getMetrics(addr); err != nil {
			return err
		}
		for _, c := range []struct {
			name   string
			labels []string
		}{{"sluice_kafka_requests_total", produceOK}, {"sluice_kafka_request_duration_seconds", []string{"api", "Produce"}},
			{"sluice_kafka_requests_total", metadataError}, {"sluice_kafka_connections_closed_total", unknownAPI}} {
			if val(after, c.name, c.labels...) <= val(before, c.name, c.labels...) {
				return fmt.Errorf("%s%v has not moved", c.name, c.labels)
			}
		}
		return nil
	})
	for _, c := range []struct {
		name   string
		labels []string
		min    float64 // at least this much more than before
	}{
		{"sluice_kafka_requests_total", produceOK, 1},
		{"sluice_kafka_requests_total", []string{"api", "InitProducerId", "outcome", "ok"}, 1},
		{"sluice_kafka_requests_total", []string{"api", "ApiVersions", "outcome", "ok"}, 1},
		{"sluice_kafka_request_duration_seconds", []string{"api", "Produce"}, 1},
		{"sluice_kafka_requests_total", metadataError, 1},
		{"sluice_kafka_errors_total", unknownTopic, 1},
		{"sluice_kafka_connections_closed_total", unknownAPI, 1},
		{"sluice_kafka_received_bytes_total", nil, 100},
		{"sluice_kafka_sent_bytes_total", nil, 100},
	} {
		if got, was := mustSample(t, after, c.name, c.labels...), val(before, c.name, c.labels...); got < was+c.min {
			t.Errorf("%s%v = %v, was %v: want at least %v more", c.name, c.labels, got, was, c.min)
		}
	}
	if got, was := mustSample(t, after, "sluice_kafka_connections_closed_total", unknownAPI...), val(before, "sluice_kafka_connections_closed_total", unknownAPI...); got != was+1 {
		t.Errorf("connections closed for unknown_api: %v, was %v; want one more", got, was)
	}
	// Series for every served API exist from the start, at 0 until used.
	if _, ok := sample(after, "sluice_kafka_requests_total", "api", "DescribeProducers", "outcome", "refused"); !ok {
		t.Error(`no sluice_kafka_requests_total{api="DescribeProducers",outcome="refused"} series`)
	}
}
