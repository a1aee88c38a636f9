package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/proccluster"
)

// groupClusterArgs make group membership quick enough for tests: members
// heartbeat every 200 ms and may ask for short sessions.
var groupClusterArgs = []string{"--offsets-topic-partitions", "3", "--transaction-state-partitions", "3",
	"--group-heartbeat-interval", "200ms", "--group-min-session-timeout", "500ms"}

// bgCLI is a sluice CLI process running in the background (a consumer).
type bgCLI struct {
	cmd  *exec.Cmd
	mu   sync.Mutex // guards out
	out  bytes.Buffer
	errb bytes.Buffer
	done chan struct{}
}

func (b *bgCLI) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out.Write(p)
}

// lines returns the complete lines printed so far.
func (b *bgCLI) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.out.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.Split(s[:i], "\n")
	}
	return nil
}

// startCLI starts the sluice CLI against every node; the process is
// SIGKILLed at cleanup if still running.
func (c *testCluster) startCLI(t *testing.T, args ...string) *bgCLI {
	t.Helper()
	b := &bgCLI{done: make(chan struct{})}
	b.cmd = exec.Command(c.sluice, append([]string{"--brokers=" + strings.Join(c.addrs(c.ids()), ",")}, args...)...)
	b.cmd.Env = proccluster.Env()
	b.cmd.Stdout, b.cmd.Stderr = b, &b.errb
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = b.cmd.Wait()
		close(b.done)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
		if t.Failed() {
			t.Logf("sluice %v stderr:\n%s", args, b.errb.String())
		}
	})
	return b
}

// stop ends b with sig and waits (at most 20 s).
func (b *bgCLI) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	_ = b.cmd.Process.Signal(sig)
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("consumer did not exit after %v", sig)
	}
}

// printed maps each value b printed (consume --print-offsets lines are
// "partition:offset<TAB>value") to its partitions.
func printed(lines []string) map[string]string {
	out := map[string]string{}
	for _, l := range lines {
		po, v, ok := strings.Cut(l, "\t")
		if !ok {
			continue
		}
		part, _, _ := strings.Cut(po, ":")
		out[v] = part
	}
	return out
}

func countPrinted(lines []string, prefix string) map[string]int {
	n := map[string]int{}
	for _, l := range lines {
		if _, v, ok := strings.Cut(l, "\t"); ok && strings.HasPrefix(v, prefix) {
			n[v]++
		}
	}
	return n
}

// produceSpread produces vals round-robin over partitions with acks=all,
// failing the test unless every record is acknowledged.
func (c *testCluster) produceSpread(t *testing.T, topic string, partitions int32, vals []string) {
	t.Helper()
	cl, err := client.New(c.addrs(c.ids()), client.WithRequestTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.NewProducer(client.WithDeliveryTimeout(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var failed []error
	for i, v := range vals {
		p.Send(ctx, client.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(v)}, func(_ client.RecordMetadata, err error) {
			if err != nil {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
			}
		})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d records failed, first: %v", len(failed), len(vals), failed[0])
	}
}

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// TestGroupMembersShareTheTopicAndTakeOverFromAKilledOne: two real
// `sluice consume --group` processes on three real nodes. The first
// reads everything; when the second joins, the partitions are split
// between them, with no record printed twice (the leaving owner commits
// what it printed before it releases a partition) and none missed; when
// one is SIGKILLed, the other takes its partitions after the session
// timeout and reads what follows. `group describe` shows the survivor
// owning everything with no lag.
func TestGroupMembersShareTheTopicAndTakeOverFromAKilledOne(t *testing.T) {
	c := startTestCluster(t, 3, groupClusterArgs...)
	all := c.ids()
	const topic, group = "shared", "readers"
	c.createTopic(20*time.Second, all, topic, "--partitions", "6", "--replication-factor", "3")
	consumer := func() *bgCLI {
		return c.startCLI(t, "consume", topic, "--group", group, "--from-beginning", "--print-offsets", "--session-timeout", "2s")
	}
	waitPrinted := func(what string, cs []*bgCLI, want []string) {
		t.Helper()
		c.eventually(60*time.Second, what, func() error {
			seen := map[string]bool{}
			for _, b := range cs {
				for v := range printed(b.lines()) {
					seen[v] = true
				}
			}
			missing := 0
			for _, v := range want {
				if !seen[v] {
					missing++
				}
			}
			if missing > 0 {
				return fmt.Errorf("%d of %d not printed yet", missing, len(want))
			}
			return nil
		})
	}

	a := consumer()
	first := values("one", 120)
	c.produceSpread(t, topic, 6, first)
	waitPrinted("the first member reads everything", []*bgCLI{a}, first)

	b := consumer()
	// The split: wait until each member prints records of the second
	// batch, then check the two sets of partitions are disjoint.
	second := values("two", 240)
	c.eventually(60*time.Second, "both members own partitions", func() error {
		out, _, err := c.cli(10*time.Second, all, "group", "describe", group)
		if err != nil {
			return err
		}
		var d struct {
			Members []struct {
				Assignment []struct {
					Partitions []int32 `json:"partitions"`
				} `json:"assignment"`
			} `json:"members"`
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if len(d.Members) != 2 {
			return fmt.Errorf("%d members", len(d.Members))
		}
		for _, m := range d.Members {
			n := 0
			for _, a := range m.Assignment {
				n += len(a.Partitions)
			}
			if n != 3 {
				return fmt.Errorf("a member owns %d partitions: %s", n, out)
			}
		}
		return nil
	})
	c.produceSpread(t, topic, 6, second)
	waitPrinted("the two members read the second batch", []*bgCLI{a, b}, second)
	pa, pb := map[string]bool{}, map[string]bool{}
	for v, p := range printed(a.lines()) {
		if strings.HasPrefix(v, "two") {
			pa[p] = true
		}
	}
	for v, p := range printed(b.lines()) {
		if strings.HasPrefix(v, "two") {
			pb[p] = true
		}
	}
	if len(pa) == 0 || len(pb) == 0 {
		t.Errorf("one member read nothing after the split: %v / %v", pa, pb)
	}
	for p := range pa {
		if pb[p] {
			t.Errorf("partition %s read by both members after the split", p)
		}
	}
	for _, cs := range []*bgCLI{a, b} {
		for v, n := range countPrinted(cs.lines(), "") {
			if n > 1 {
				t.Errorf("%s printed %d times by one member", v, n)
			}
		}
	}
	both := countPrinted(append(a.lines(), b.lines()...), "")
	for _, v := range append(first, second...) {
		if both[v] != 1 {
			t.Errorf("%s printed %d times across the members (a graceful rebalance must not repeat records)", v, both[v])
		}
	}

	// SIGKILL b: after its session timeout a owns every partition.
	b.stop(t, syscall.SIGKILL)
	third := values("three", 120)
	c.produceSpread(t, topic, 6, third)
	waitPrinted("the survivor reads the third batch", []*bgCLI{a}, third)
	c.eventually(30*time.Second, "describe shows one member and no lag", func() error {
		out, _, err := c.cli(10*time.Second, all, "group", "describe", group)
		if err != nil {
			return err
		}
		var d struct {
			Members []json.RawMessage `json:"members"`
			Offsets []struct {
				Lag int64 `json:"lag"`
			} `json:"offsets"`
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if len(d.Members) != 1 || len(d.Offsets) != 6 {
			return fmt.Errorf("%d members, %d partitions: %s", len(d.Members), len(d.Offsets), out)
		}
		for _, o := range d.Offsets {
			if o.Lag != 0 {
				return fmt.Errorf("lag %d: %s", o.Lag, out)
			}
		}
		return nil
	})
	a.stop(t, syscall.SIGTERM)
	out, stderr, err := c.cli(10*time.Second, all, "group", "list")
	if err != nil || !strings.Contains(out, group) {
		t.Fatalf("group list: %v %s %s", err, out, stderr)
	}
}
