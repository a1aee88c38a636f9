package node

import (
	"testing"
	"time"

	"github.com/sluice-io/sluice/kafka"
)

// TestKafkaMetricsCountWithoutAllocating: counting and timing a Kafka
// request on its API's resolved series allocates nothing, nor does
// counting an error code (a lookup), bytes or a close.
func TestKafkaMetricsCountWithoutAllocating(t *testing.T) {
	m := newKafkaMetrics()
	api := m.API("Produce")
	if n := testing.AllocsPerRun(100, func() {
		api.Done(kafka.OutcomeOK, time.Millisecond)
		api.Done(kafka.OutcomeError, time.Millisecond)
		api.Errors("NOT_LEADER_OR_FOLLOWER", 2)
		m.Received(100)
		m.Sent(100)
		m.Closed(kafka.CloseMalformed)
	}); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
}
