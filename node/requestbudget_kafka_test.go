package node_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
)

// kafkaFrame is req framed as a Kafka request (header v1, v2 when
// flexible).
func kafkaFrame(req kmsg.Request, correlationID int32) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(correlationID))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// The Kafka listener has a request byte budget of its own
// (--queued-max-request-bytes, Kafka's queued.max.request.bytes): eight
// 60 MB Produce frames sent at once over eight connections to a node with
// the smallest budget (128 MiB) are read at most two at a time; the
// others wait, then are answered (each batch is refused: it is not a
// record batch). sluice_request_bytes_in_flight{listener="kafka"} never
// exceeds the budget, requests are counted as having waited, every byte
// is given back, and the node's live heap grows by less than twice the
// budget plus 64 MiB. Before, every frame was read at once (a connection
// reads a whole frame before anything else): 8 × 60 MB, and with 100 MiB
// frames (socket.request.max.bytes) N × 100 MiB for N connections.
func TestKafkaRequestByteBudgetBoundsConcurrentLargeRequests(t *testing.T) {
	const (
		requests = 8
		size     = 60 << 20
		budget   = node.MinQueuedMaxRequestBytes
	)
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		cfg.HTTPListen = "127.0.0.1:0"
		cfg.QueuedMaxRequestBytes = budget
	})
	s.CreateTopic("big", 1, nil)
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 30_000
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: "big", Partitions: []kmsg.ProduceRequestTopicPartition{
		{Partition: 0, Records: make([]byte, size)}}}}
	frame := kafkaFrame(req, 1)
	req = nil

	bs := startBudgetSampler(s, "kafka", 2*time.Millisecond)

	var calls sync.WaitGroup
	errs := make(chan error, requests)
	for i := range requests {
		calls.Go(func() {
			c, err := net.DialTimeout("tcp", s.Node.KafkaAddr(), 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(90 * time.Second))
			if _, err := c.Write(frame); err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
				return
			}
			var size [4]byte
			if _, err := io.ReadFull(c, size[:]); err != nil {
				errs <- fmt.Errorf("request %d: no answer: %w", i, err)
				return
			}
			body := make([]byte, binary.BigEndian.Uint32(size[:]))
			if _, err := io.ReadFull(c, body); err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
				return
			}
			resp := kmsg.NewPtrProduceResponse()
			resp.Version = 9
			if err := resp.ReadFrom(body[5:]); err != nil {
				errs <- fmt.Errorf("request %d: answer: %w", i, err)
				return
			}
			if code := resp.Topics[0].Partitions[0].ErrorCode; code == 0 {
				errs <- fmt.Errorf("request %d: 60 MB of zeros accepted as a batch", i)
			}
		})
	}
	calls.Wait()
	base, peakHeap, peakInFlight, limit := bs.stop(t)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if limit != budget {
		t.Errorf(`sluice_request_bytes_budget{listener="kafka"} = %v, want %d`, limit, budget)
	}
	if peakInFlight <= 0 || peakInFlight > budget {
		t.Errorf(`sluice_request_bytes_in_flight{listener="kafka"} peaked at %v, want within (0, %d]`, peakInFlight, budget)
	}
	if v := mustSample(t, scrape(t, s.Node.HTTPAddr()), "sluice_request_budget_waits_total", "listener", "kafka"); v < 1 {
		t.Errorf("sluice_request_budget_waits_total = %v: no request waited", v)
	}
	wait.For(t, 10*time.Second, "every request's bytes given back", func() error {
		if v := mustSample(t, scrape(t, s.Node.HTTPAddr()), "sluice_request_bytes_in_flight", "listener", "kafka"); v != 0 {
			return fmt.Errorf("%v bytes in flight", v)
		}
		return nil
	})
	bound := uint64(2*budget + 64<<20)
	t.Logf("live heap %d MiB before, peak %d MiB (+%d MiB; bound +%d MiB); bytes in flight peaked at %.0f MiB",
		base>>20, peakHeap>>20, (peakHeap-base)>>20, bound>>20, peakInFlight/(1<<20))
	if peakHeap > base+bound {
		t.Errorf("the live heap grew by %d MiB, more than %d MiB", (peakHeap-base)>>20, bound>>20)
	}
}
