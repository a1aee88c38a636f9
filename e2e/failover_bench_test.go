package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkFailover measures, on one three-node cluster, how long a SIGKILL
// of the controller leader L takes to be repaired, as clients see it:
//
//   - ms/controller-failover: kill → a survivor's "cluster status" names a
//     new controller leader;
//   - ms/partition-failover: kill → every partition of a 6-partition, RF 3
//     topic is led by a live node ("topic describe" from a survivor).
//
// Medians over the iterations, and their maxima (max-ms/...). Each
// iteration creates a fresh topic, so that L leads its share of partitions
// and every ISR is full (brokers do not replicate yet: after a failover the
// ISRs stay shrunk), kills L, measures, then restarts L and waits until it
// is unfenced again. Both times include the CLI's own latency per poll
// (process start, dial, RPC: tens of ms) plus up to one poll interval (wait.Interval).
//
//	go test -run '^$' -bench BenchmarkFailover -benchtime 5x ./e2e/
func BenchmarkFailover(b *testing.B) {
	c := startTestCluster(b, 3)
	all := c.ids()
	var controller, partitions []time.Duration
	for b.Loop() {
		i := len(controller)
		var st clusterJSON
		c.eventually(20*time.Second, "healthy three-node cluster", func() (err error) {
			if st, err = c.status(all); err != nil {
				return err
			}
			return checkHealthy(st, all)
		})
		leader := st.ControllerLeader
		before, _ := brokerIn(st, leader)
		topic := fmt.Sprintf("failover-%d", i)
		c.createTopic(20*time.Second, all, topic, topicFlags...)
		c.eventually(10*time.Second, "topic "+topic+" led by every node", func() error {
			d, err := c.describe(all, topic)
			if err != nil {
				return err
			}
			return checkLedBy(d, all)
		})

		killed := time.Now()
		c.kill(leader)
		survivors := without(all, leader)
		elected := c.eventually(20*time.Second, "a new controller leader seen by a survivor", func() error {
			s, err := c.status(survivors)
			if err != nil {
				return err
			}
			if s.ControllerLeader == 0 || s.ControllerLeader == leader {
				return fmt.Errorf("controller_leader %d (killed %d)", s.ControllerLeader, leader)
			}
			return nil
		})
		moved := c.eventually(20*time.Second, "every partition led by a survivor", func() error {
			d, err := c.describe(survivors, topic)
			if err != nil {
				return err
			}
			return checkLedBy(d, survivors)
		})
		controller = append(controller, elected.Sub(killed))
		partitions = append(partitions, moved.Sub(killed))
		b.Logf("iteration %d: killed controller leader %d: new controller seen after %v, partitions moved after %v",
			i, leader, controller[i].Round(time.Millisecond), partitions[i].Round(time.Millisecond))

		c.restart(leader)
		c.eventually(20*time.Second, "restarted broker unfenced with a new epoch", func() error {
			s, err := c.status(all)
			if err != nil {
				return err
			}
			if bk, ok := brokerIn(s, leader); !ok || bk.Fenced || bk.Epoch <= before.Epoch {
				return fmt.Errorf("broker %d: %+v (registered %v), want unfenced with epoch > %d", leader, bk, ok, before.Epoch)
			}
			return nil
		})
	}
	b.ReportMetric(ms(median(controller)), "ms/controller-failover")
	b.ReportMetric(ms(slices.Max(controller)), "max-ms/controller-failover")
	b.ReportMetric(ms(median(partitions)), "ms/partition-failover")
	b.ReportMetric(ms(slices.Max(partitions)), "max-ms/partition-failover")
}

// median returns the median of ds (the mean of the middle two for an even
// count). ds must not be empty.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
