package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A quota in the metadata is in force on the broker, and its throttles
// are counted per principal and kind on /metrics.
func TestQuotaThrottleTimeIsCountedPerPrincipal(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.QuotaWindowSamples, c.QuotaWindowSize = 2, 100*time.Millisecond
	})
	if _, err := tn.Admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "m", NumPartitions: 1, ReplicationFactor: 1}}}); err != nil {
		t.Fatal(err)
	}
	// The default user (here User:ANONYMOUS) at 1 B/s: the first batch is
	// throttled, for the cap of 200 ms.
	res, err := tn.Admin.AlterClientQuotas(ctx(t), &sluicev1.AlterClientQuotasRequest{Entries: []*sluicev1.ClientQuotaAlteration{{
		Entity: &sluicev1.QuotaEntity{User: &sluicev1.QuotaEntityName{IsDefault: true}},
		Ops:    []*sluicev1.QuotaOp{{Key: "producer_byte_rate", Value: 1}}}}})
	if err != nil || res.Results[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("%v %v", res, err)
	}
	if pr, err := tn.tryProduce("m", nodetest.Batch("v", 10, 1)); err != nil || pr.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("%v %v", pr, err)
	}
	_, body := httpGet(t, tn.Node.HTTPAddr(), "/metrics")
	for _, want := range []string{`sluice_quota_throttle_time_seconds_total{kind="produce",principal="User:ANONYMOUS"} 0.2`,
		`sluice_quota_throttled_requests_total{kind="produce",principal="User:ANONYMOUS"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// The request quota applies to the unary RPCs answered from the broker's
// memory too (api.RequestQuotaInterceptor): a caller over its
// request_percentage flooding Metadata is held, and the throttles are
// counted under kind "request".
func TestRequestQuotaHoldsOtherRPCsAndIsCounted(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.QuotaWindowSamples, c.QuotaWindowSize = 2, 100*time.Millisecond
	})
	// The default user (here User:ANONYMOUS) at 0.01 % of a thread:
	// 10 µs a second. Every Metadata call takes more.
	res, err := tn.Admin.AlterClientQuotas(ctx(t), &sluicev1.AlterClientQuotasRequest{Entries: []*sluicev1.ClientQuotaAlteration{{
		Entity: &sluicev1.QuotaEntity{User: &sluicev1.QuotaEntityName{IsDefault: true}},
		Ops:    []*sluicev1.QuotaOp{{Key: "request_percentage", Value: 0.01}}}}})
	if err != nil || res.Results[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("%v %v", res, err)
	}
	// The quota reaches the node's enforcement with its metadata, a moment
	// after AlterClientQuotas answers: call until one answer is held,
	// within 10 s (50 calls could all fit in that moment).
	held := false
	for deadline := time.Now().Add(10 * time.Second); !held && time.Now().Before(deadline); {
		start := time.Now()
		if _, err := tn.Admin.Metadata(ctx(t), &sluicev1.MetadataRequest{}); err != nil {
			t.Fatal(err)
		}
		// The cap is 200 ms: a throttled answer is held about that long.
		held = time.Since(start) >= 150*time.Millisecond
	}
	if !held {
		t.Fatal("10 s of Metadata calls over the request quota, none held")
	}
	_, body := httpGet(t, tn.Node.HTTPAddr(), "/metrics")
	for _, want := range []string{`sluice_quota_throttle_time_seconds_total{kind="request",principal="User:ANONYMOUS"}`,
		`sluice_quota_throttled_requests_total{kind="request",principal="User:ANONYMOUS"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
