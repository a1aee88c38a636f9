package kafka_test

import (
	"flag"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/kafka"
)

var kafkaProbeEntries = flag.Int("kafka-probe-entries", 200_000, "entries in each TestAmplifyingKafkaRequestsRefused request (docs/operations.md measured a million)")

// TestAmplifyingKafkaRequestsRefused: a request of a million entries
// through the Kafka door (keys, groups, ids, members, topics,
// partitions) closes the connection unanswered once parsed, and costs the
// node what its parse costs — before, each was authorized, looked up and
// answered entry by entry. The node serves a request at the bound, and a
// client as before, afterwards.
func TestAmplifyingKafkaRequestsRefused(t *testing.T) {
	s := startKafkaNode(t)
	s.CreateTopic("t", 1, nil)
	addr := s.Node.KafkaAddr()
	canary := func(round string) {
		t.Helper()
		c := kafka.Dial(t, addr)
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 12
		req.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("t")}}
		if _, err := c.Write(kafka.Frame(req, 7)); err != nil {
			t.Fatal(err)
		}
		id, body := kafka.ReadAnswer(t, c)
		resp := kmsg.NewPtrMetadataResponse()
		resp.Version = 12
		if err := resp.ReadFrom(body[1:]); err != nil || id != 7 || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
			t.Fatalf("canary %s the probes: answer %d %v %+v", round, id, err, resp.Topics)
		}
	}
	canary("before")
	for _, p := range kafka.Probes {
		t.Run(p.Name, func(t *testing.T) {
			req := p.Req(*kafkaProbeEntries)
			f := kafka.Frame(req, 1)
			parse := parseCost(t, req, f)
			c := kafka.Dial(t, addr)
			c.SetDeadline(time.Now().Add(60 * time.Second))
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			if _, err := c.Write(f); err != nil {
				t.Fatal(err)
			}
			var b [1]byte
			n, err := c.Read(b[:])
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%.1f MB request, %.1f MiB allocated (its parse alone: %.1f MiB): read %d bytes, %v", float64(len(f))/1e6,
				float64(allocated)/(1<<20), float64(parse)/(1<<20), n, err)
			if n != 0 || err == nil {
				t.Errorf("answered (%d bytes read), want the connection closed unanswered", n)
			}
			// The frame read, its parse (kmsg builds each entry: a few
			// times the frame), and nothing per entry besides; the
			// race detector's allocations grow both alike.
			if limit := 2*parse + 2*uint64(len(f)) + 16<<20; allocated > limit {
				t.Errorf("the request cost %.0f MiB of allocations, want at most %.0f MiB", float64(allocated)/(1<<20), float64(limit)/(1<<20))
			}
		})
	}
	// At the bound: answered.
	c := kafka.Dial(t, addr)
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.Version, req.CoordinatorKeys = 4, kafka.Keys(10_000)
	if _, err := c.Write(kafka.Frame(req, 3)); err != nil {
		t.Fatal(err)
	}
	id, body := kafka.ReadAnswer(t, c)
	resp := kmsg.NewPtrFindCoordinatorResponse()
	resp.Version = 4
	if err := resp.ReadFrom(body[1:]); err != nil || id != 3 || len(resp.Coordinators) != 10_000 {
		t.Fatalf("FindCoordinator of 10,000 keys: answer %d %v, %d coordinators", id, err, len(resp.Coordinators))
	}
	canary("after")
}

// parseCost is what parsing frame f's body (as req's type) allocates in
// this process: the part of a refused request's cost that is its parse.
func parseCost(t *testing.T, req kmsg.Request, f []byte) uint64 {
	t.Helper()
	// Size, key, version, correlation id, client id "test" (header v1),
	// and the header's tagged fields when flexible.
	body := f[4+2+2+4+2+4:]
	if req.IsFlexible() {
		body = body[1:]
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := kmsg.RequestForKey(req.Key())
	r.SetVersion(req.GetVersion())
	if err := r.ReadFrom(body); err != nil {
		t.Fatalf("parse %T: %v", r, err)
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(r)
	return after.TotalAlloc - before.TotalAlloc
}
