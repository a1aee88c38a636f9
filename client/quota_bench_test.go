package client_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// BenchmarkQuotaFloodAgainstQuiet measures client quotas end to end on
// one node (docs/security.md "Quotas"): a producer (client id "flood")
// sending as fast as it can against a producer_byte_rate of 1 MiB/s, with
// Kafka's window (11 samples of 1 s), for SLUICE_QUOTA_BENCH_SECONDS
// (default 30); meanwhile another client ("quiet", no quota) sends 1 KiB
// records synchronously with acks=all, its latency compared with the same
// client's on the idle node first. The flood writes one partition, so
// each of its produce requests is one batch: batch=64KiB closes batches
// at 64 KiB, batch=1MiB at the Go client's default of 1 MiB;
// producers=4 floods from four producers (four connections, one quota).
// Each runs once whatever b.N and reports:
//
//   - flood_rate/quota: the flood's acknowledged value bytes per second
//     after the first window (its 10 s burst, as in Kafka) over the quota;
//   - flood_rate_all/quota: the same over the whole run, the burst in;
//   - quiet_p50_ratio, quiet_p99_ratio: the quiet client's latency during
//     the flood over idle.
//
// go test -run '^$' -bench QuotaFlood -benchtime 1x ./client
func BenchmarkQuotaFloodAgainstQuiet(b *testing.B) {
	for _, bc := range []struct {
		name                  string
		batchBytes, producers int
	}{{"batch=64KiB", 64 << 10, 1}, {"batch=1MiB", 1 << 20, 1}, {"batch=64KiB,producers=4", 64 << 10, 4}} {
		b.Run(bc.name, func(b *testing.B) { benchQuotaFlood(b, bc.batchBytes, bc.producers) })
	}
}

func benchQuotaFlood(b *testing.B, batchBytes, producers int) {
	run := 30 * time.Second
	if s := os.Getenv("SLUICE_QUOTA_BENCH_SECONDS"); s != "" {
		d, err := time.ParseDuration(s + "s")
		if err != nil {
			b.Fatal(err)
		}
		run = d
	}
	const quota = 1 << 20
	const window = 10 * time.Second // (samples − 1) × 1 s
	s := nodetest.StartSingle(b, b.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), run+2*time.Minute)
	defer cancel()
	admin, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	for _, topic := range []string{"flood", "quiet"} {
		if err := admin.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
			b.Fatal(err)
		}
	}
	res, err := admin.AlterClientQuotas(ctx, []*sluicev1.ClientQuotaAlteration{{
		Entity: &sluicev1.QuotaEntity{ClientId: &sluicev1.QuotaEntityName{Name: "flood"}},
		Ops:    []*sluicev1.QuotaOp{{Key: client.QuotaProducerByteRate, Value: quota}}}}, false)
	if err != nil || res[0] != nil {
		b.Fatal(err, res)
	}

	quiet := func(d time.Duration) []time.Duration {
		c, err := client.New([]string{s.Node.Addr()}, client.WithClientID("quiet"))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		p, err := c.NewProducer(client.WithAcks(client.AcksAll), client.WithLinger(0))
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		v := make([]byte, 1024)
		var lat []time.Duration
		for end := time.Now().Add(d); time.Now().Before(end); {
			start := time.Now()
			if _, err := p.SendSync(ctx, client.Record{Topic: "quiet", Value: v}); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		return lat
	}
	pct := func(l []time.Duration, q float64) time.Duration { return l[min(int(q*float64(len(l))), len(l)-1)] }

	b.ResetTimer()
	idle := quiet(5 * time.Second)

	// Each flooding producer has a connection (a ProduceStream) of its
	// own; all share the client id, so one quota. One partition: each
	// request is one batch. A small buffer (1 MiB, or two batches): Close
	// does not wait for minutes of throttled data.
	var fps []*client.Producer
	for range producers {
		fc, err := client.New([]string{s.Node.Addr()}, client.WithClientID("flood"))
		if err != nil {
			b.Fatal(err)
		}
		defer fc.Close()
		fp, err := fc.NewProducer(client.WithAcks(client.AcksLeader), client.WithBatchBytes(batchBytes), client.WithBufferBytes(max(1<<20, 2*batchBytes)))
		if err != nil {
			b.Fatal(err)
		}
		fps = append(fps, fp)
	}
	var acked, ackedAfterWindow atomic.Int64
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, fp := range fps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := make([]byte, 1024)
			for {
				select {
				case <-stop:
					return
				default:
				}
				fp.Send(ctx, client.Record{Topic: "flood", Value: v}, func(_ client.RecordMetadata, err error) {
					if err == nil {
						acked.Add(1024)
						if time.Since(start) > window {
							ackedAfterWindow.Add(1024)
						}
					}
				})
			}
		}()
	}
	time.Sleep(window)
	during := quiet(run - window)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	allBytes, lateBytes := acked.Load(), ackedAfterWindow.Load()
	var st client.ThrottleStats
	for _, fp := range fps {
		t := fp.Throttled()
		st.Count, st.Total, st.Max = st.Count+t.Count, st.Total+t.Total, max(st.Max, t.Max)
		fp.Close()
	}
	b.StopTimer()

	rateAll := float64(allBytes) / elapsed.Seconds() / quota
	rateLate := float64(lateBytes) / (elapsed - window).Seconds() / quota
	b.ReportMetric(rateLate, "flood_rate/quota")
	b.ReportMetric(rateAll, "flood_rate_all/quota")
	b.ReportMetric(float64(pct(during, .5))/float64(pct(idle, .5)), "quiet_p50_ratio")
	b.ReportMetric(float64(pct(during, .99))/float64(pct(idle, .99)), "quiet_p99_ratio")
	b.Logf("flood: %d B acked in %v (%.3f of the quota), %.3f after the first %v; %d throttled answers, %v in all, max %v",
		allBytes, elapsed.Round(time.Millisecond), rateAll, rateLate, window, st.Count, st.Total, st.Max)
	b.Logf("quiet: idle p50 %v p99 %v (%d sends); during the flood p50 %v p99 %v (%d sends)",
		pct(idle, .5), pct(idle, .99), len(idle), pct(during, .5), pct(during, .99), len(during))
}
