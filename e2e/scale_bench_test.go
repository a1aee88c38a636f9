//go:build linux

// The scale benchmark reads its nodes' /proc entries (CPU, RSS, descriptors).

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-io/sluice/internal/proccluster"
	"github.com/sluice-io/sluice/internal/wait"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// BenchmarkScale measures how a fresh three-node cluster of real sluiced
// processes carries many partitions (issue 31), once for every partition
// count N in $SCALE_PARTITIONS (a comma list, default "1000,3000,10000"),
// each N a sub-benchmark on a cluster of its own:
//
//   - ms/create: N/10 topics of 10 partitions, replication factor 3, sent
//     in CreateTopics requests of scaleTopicsPerRequest topics one after
//     the other, until every node's DescribeCluster shows all of them led
//     (no offline partition);
//   - after scaleSettle of quiet, over scaleWindow with no client traffic,
//     each node's CPU (% of one core, from /proc/PID/stat utime+stime),
//     and at the end of the window its RSS (/proc/PID/status VmRSS), open
//     descriptors (/proc/PID/fd) and go_goroutines (one /metrics scrape,
//     whose size is logged too); the max-.../node metrics are the largest
//     of the three nodes;
//   - ms/failover: SIGKILL of a broker that is not the controller leader →
//     the controller leader's DescribeCluster shows no partition led by it
//     and none offline; one that has not happened within
//     scaleFailoverTimeout fails the benchmark, but the restart is still
//     measured;
//   - ms/restart-serving: restart of that broker (process start, which
//     includes opening its logs) → it is unfenced with a new epoch and no
//     partition is under-replicated (it is back in every ISR: every
//     partition has a replica on it).
//
// Each sub-benchmark logs each phase as it ends (what a failed run still
// shows) and its row of the table under a header. Polls go
// through DescribeCluster, whose cost does not grow with what it answers.
// b.N is ignored: a run takes minutes, so each N runs once (-benchtime
// 1x). With $SCALE_CPUPROFILE=DIR, a 15 s CPU profile of the controller
// leader, taken right after the window (the cluster still idle), is
// written to DIR/scale-N-node-ID.pprof. Linux only (/proc). A broker
// accepts at most half its open-files limit in replicas (issue 29): 10,000
// partitions of replication factor 3 put 10,000 replicas on each of the
// three brokers, the most a limit of 20,000 allows; more need a higher
// hard limit (ulimit -n). The log names each node's limit.
//
//	make bench-scale
//	SCALE_PARTITIONS=1000 go test -tags sluicetest -run '^$' -bench BenchmarkScale -benchtime 1x -timeout 60m ./e2e/
func BenchmarkScale(b *testing.B) {
	counts, err := scalePartitionCounts(os.Getenv("SCALE_PARTITIONS"))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range counts {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			r := runScale(b, n)
			b.Log(scaleHeader + "\n" + r.row())
			b.ReportMetric(ms(r.create), "ms/create")
			if r.failover > 0 {
				b.ReportMetric(ms(r.failover), "ms/failover")
			}
			b.ReportMetric(ms(r.serving), "ms/restart-serving")
			b.ReportMetric(r.max(func(u nodeUse) float64 { return u.cpuPercent }), "max-cpu-%/node")
			b.ReportMetric(r.max(func(u nodeUse) float64 { return u.rssMiB }), "max-rss-MiB/node")
			b.ReportMetric(r.max(func(u nodeUse) float64 { return float64(u.fds) }), "max-fds/node")
			b.ReportMetric(r.max(func(u nodeUse) float64 { return float64(u.goroutines) }), "max-goroutines/node")
		})
	}
}

// The shape of BenchmarkScale's topics and its measuring windows.
const (
	scalePartitionsPerTopic = 10
	scaleTopicsPerRequest   = 100
	scaleSettle             = 10 * time.Second
	scaleWindow             = 30 * time.Second
	scaleProfile            = 15 * time.Second
	// scaleFailoverTimeout bounds the failover: leaderships move in
	// about 2 s (README); far longer is a failure, not a slow result.
	scaleFailoverTimeout = 90 * time.Second
)

// scalePartitionCounts parses $SCALE_PARTITIONS; "" is the default list.
// Every count must be a positive multiple of scalePartitionsPerTopic.
func scalePartitionCounts(s string) ([]int, error) {
	if s == "" {
		s = "1000,3000,10000"
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n%scalePartitionsPerTopic != 0 {
			return nil, fmt.Errorf("SCALE_PARTITIONS=%q: %q is not a positive multiple of %d", s, f, scalePartitionsPerTopic)
		}
		out = append(out, n)
	}
	return out, nil
}

// scalePhaseTimeout bounds each waited-for phase (create, failover,
// restart) of a run with n partitions: generous, as the machine may be
// shared; a phase that needs it is a finding in itself.
func scalePhaseTimeout(n int) time.Duration {
	return time.Minute + time.Duration(n)*30*time.Millisecond
}

// nodeUse is one node's resource use in the idle window.
type nodeUse struct {
	cpuPercent float64 // of one core, averaged over the window
	rssMiB     float64
	fds        int
	goroutines int
	fdLimit    string  // soft "Max open files" of /proc/PID/limits
	metricsKiB float64 // size of one /metrics scrape
}

// scaleResult is one row of BenchmarkScale's table.
type scaleResult struct {
	partitions         int
	controller, victim int32
	create             time.Duration
	use                []nodeUse     // by node id - 1
	failover, serving  time.Duration // failover 0: not within scaleFailoverTimeout
	stuck              int32         // partitions the victim still led then
}

const scaleHeader = "partitions  create  idle CPU % (n1/n2/n3)  RSS MiB (n1/n2/n3)  fds (n1/n2/n3)  goroutines (n1/n2/n3)  failover  restart-to-serving  (controller, killed; /metrics KiB; fd limit)"

// row formats r under scaleHeader.
func (r scaleResult) row() string {
	col := func(f func(nodeUse) string) string {
		var s []string
		for _, u := range r.use {
			s = append(s, f(u))
		}
		return strings.Join(s, "/")
	}
	failover := r.failover.Round(time.Millisecond).String()
	if r.failover == 0 {
		failover = fmt.Sprintf(">%v (%d left)", scaleFailoverTimeout, r.stuck)
	}
	return fmt.Sprintf("%10d  %6v  %22s  %18s  %14s  %21s  %8s  %18v  (n%d, n%d; %s; %s)", r.partitions,
		r.create.Round(10*time.Millisecond),
		col(func(u nodeUse) string { return strconv.FormatFloat(u.cpuPercent, 'f', 1, 64) }),
		col(func(u nodeUse) string { return strconv.FormatFloat(u.rssMiB, 'f', 0, 64) }),
		col(func(u nodeUse) string { return strconv.Itoa(u.fds) }),
		col(func(u nodeUse) string { return strconv.Itoa(u.goroutines) }),
		failover, r.serving.Round(time.Millisecond), r.controller, r.victim,
		col(func(u nodeUse) string { return strconv.FormatFloat(u.metricsKiB, 'f', 0, 64) }),
		col(func(u nodeUse) string { return u.fdLimit }))
}

// max is the largest of f over r's nodes.
func (r scaleResult) max(f func(nodeUse) float64) float64 {
	var m float64
	for _, u := range r.use {
		m = max(m, f(u))
	}
	return m
}

// runScale runs BenchmarkScale's phases for n partitions on a cluster of
// its own, stopped (SIGKILL) when b ends.
func runScale(b *testing.B, n int) scaleResult {
	var args []string
	if os.Getenv("SCALE_CPUPROFILE") != "" {
		args = append(args, "--pprof")
	}
	c := startTestCluster(b, 3, args...)
	if dir := os.Getenv("SCALE_CPUPROFILE"); dir != "" {
		// The nodes' logs too, for the phases' timelines (registered
		// after the cluster: runs before its data is removed).
		b.Cleanup(func() {
			for _, id := range c.ids() {
				if data, err := os.ReadFile(c.node(id).LogPath); err == nil {
					_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("scale-%d-node-%d.log", n, id)), data, 0o644)
				}
			}
		})
	}
	all := c.ids()
	admins := make([]sluicev1.AdminClient, len(all)) // by node id - 1
	for i, addr := range c.addrs(all) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cc.Close() })
		admins[i] = sluicev1.NewAdminClient(cc)
	}
	admin := func(id int32) sluicev1.AdminClient { return admins[id-1] }
	timeout := scalePhaseTimeout(n)
	r := scaleResult{partitions: n}

	var before *sluicev1.DescribeClusterResponse
	c.eventually(30*time.Second, "healthy three-node cluster", func() (err error) {
		if before, err = describeCluster(admin(1)); err != nil {
			return err
		}
		return checkClusterHealthy(before, all)
	})
	want := totalPartitions(before) + n
	var profiles sync.WaitGroup
	if dir := os.Getenv("SCALE_CPUPROFILE"); dir != "" {
		// Every node's CPU during the first scaleProfile of the creation.
		for _, id := range all {
			path := filepath.Join(dir, fmt.Sprintf("scale-%d-create-node-%d.pprof", n, id))
			profiles.Go(func() {
				if err := cpuProfile(c.node(id).HTTP, scaleProfile, path); err != nil {
					b.Errorf("CPU profile of node %d during the creation: %v", id, err)
				}
			})
		}
	}
	start := time.Now()
	createScaleTopics(b, admin(1), n/scalePartitionsPerTopic)
	b.Logf("%d CreateTopics requests answered after %v", (n/scalePartitionsPerTopic+scaleTopicsPerRequest-1)/scaleTopicsPerRequest,
		time.Since(start).Round(time.Millisecond))
	led := c.eventually(timeout, fmt.Sprintf("every node sees %d partitions led", want), scalePoll(func() error {
		for _, id := range all {
			d, err := describeCluster(admin(id))
			if err != nil {
				return err
			}
			if got := ledPartitions(d); got < want || d.OfflinePartitions > 0 {
				return fmt.Errorf("node %d: %d partitions led, %d offline; want %d led", id, got, d.OfflinePartitions, want)
			}
		}
		return nil
	}))
	r.create = led.Sub(start)
	b.Logf("create: %d partitions led on every node after %v", n, r.create.Round(time.Millisecond))
	profiles.Wait()

	time.Sleep(scaleSettle) // a measured pause, not a wait for a condition
	r.use = measureIdle(b, c, all, scaleWindow)
	for i, u := range r.use {
		b.Logf("idle node %d: CPU %.1f%%, RSS %.0f MiB, %d fds (limit %s), %d goroutines, /metrics %.0f KiB",
			all[i], u.cpuPercent, u.rssMiB, u.fds, u.fdLimit, u.goroutines, u.metricsKiB)
	}

	var st *sluicev1.DescribeClusterResponse
	c.eventually(30*time.Second, "healthy cluster before the kill", func() (err error) {
		if st, err = describeCluster(admin(1)); err != nil {
			return err
		}
		if err := checkClusterHealthy(st, all); err != nil {
			return err
		}
		if st.UnderReplicatedPartitions > 0 {
			return fmt.Errorf("%d partitions under-replicated", st.UnderReplicatedPartitions)
		}
		return nil
	})
	r.controller = st.ControllerLeader
	if dir := os.Getenv("SCALE_CPUPROFILE"); dir != "" {
		path := filepath.Join(dir, fmt.Sprintf("scale-%d-node-%d.pprof", n, r.controller))
		if err := cpuProfile(c.node(r.controller).HTTP, scaleProfile, path); err != nil {
			b.Fatal(err)
		}
		b.Logf("CPU profile of node %d (controller leader), %v idle: %s", r.controller, scaleProfile, path)
	}
	r.victim = slices.Max(without(all, r.controller))
	victimEpoch := brokerStatus(st, r.victim).GetEpoch()

	var failoverProfile sync.WaitGroup
	if dir := os.Getenv("SCALE_CPUPROFILE"); dir != "" {
		// The controller leader's CPU from the kill on.
		path := filepath.Join(dir, fmt.Sprintf("scale-%d-failover-node-%d.pprof", n, r.controller))
		failoverProfile.Go(func() {
			if err := cpuProfile(c.node(r.controller).HTTP, 10*time.Second, path); err != nil {
				b.Errorf("CPU profile of the controller during the failover: %v", err)
			}
		})
		time.Sleep(100 * time.Millisecond) // the profile has started
	}
	killed := time.Now()
	c.kill(r.victim)
	defer failoverProfile.Wait()
	soft := &softTB{B: b}
	moved := wait.For(soft, scaleFailoverTimeout, fmt.Sprintf("no partition led by the killed broker %d", r.victim), scalePoll(func() error {
		if err := c.Err(); err != nil {
			b.Fatal(err)
		}
		d, err := describeCluster(admin(r.controller))
		if err != nil {
			return err
		}
		r.stuck = brokerStatus(d, r.victim).GetLeaderPartitions()
		if r.stuck > 0 || d.OfflinePartitions > 0 {
			return fmt.Errorf("broker %d leads %d partitions, %d offline", r.victim, r.stuck, d.OfflinePartitions)
		}
		return nil
	}))
	if !soft.failed {
		r.failover = moved.Sub(killed)
		b.Logf("failover: no partition led by the killed broker %d after %v", r.victim, r.failover.Round(time.Millisecond))
	}

	restarted := time.Now()
	if err := c.Restart(r.victim); err != nil {
		b.Fatal(err)
	}
	serving := c.eventually(timeout, fmt.Sprintf("restarted broker %d unfenced and back in every ISR", r.victim), scalePoll(func() error {
		d, err := describeCluster(admin(r.controller))
		if err != nil {
			return err
		}
		bs := brokerStatus(d, r.victim)
		if bs == nil || bs.Fenced || bs.Epoch <= victimEpoch {
			return fmt.Errorf("broker %d: %v, want unfenced with an epoch above %d", r.victim, bs, victimEpoch)
		}
		if d.UnderReplicatedPartitions > 0 || d.OfflinePartitions > 0 {
			return fmt.Errorf("%d partitions under-replicated, %d offline", d.UnderReplicatedPartitions, d.OfflinePartitions)
		}
		return nil
	}))
	r.serving = serving.Sub(restarted)
	b.Logf("restart: broker %d serving again after %v", r.victim, r.serving.Round(time.Millisecond))
	return r
}

// scalePoll paces a phase's condition to one check per 50 ms (wait.For
// checks every 10 ms): each check is a DescribeCluster that sums up every
// partition, and at 10,000 partitions checking that often took an eighth
// of the controller's CPU in the phase it timed. A phase's time is thus
// up to 50 ms late.
func scalePoll(cond func() error) func() error {
	first := true
	return func() error {
		if !first {
			time.Sleep(40 * time.Millisecond)
		}
		first = false
		return cond()
	}
}

// softTB is b for wait.For, whose Fatalf it turns into an Errorf: a phase
// that never completes fails the benchmark but lets the later ones run.
type softTB struct {
	*testing.B
	failed bool
}

func (s *softTB) Fatalf(format string, args ...any) {
	s.Helper()
	s.Errorf(format, args...)
	s.failed = true
}

// createScaleTopics creates topics scale-0 .. scale-(topics-1), each of
// scalePartitionsPerTopic partitions of 3 replicas, through admin in
// requests of scaleTopicsPerRequest topics, one at a time, failing b on
// any error: the cluster is fresh and healthy, so none is expected.
func createScaleTopics(b *testing.B, admin sluicev1.AdminClient, topics int) {
	b.Helper()
	const requestTimeout = 2 * time.Minute
	for first := 0; first < topics; first += scaleTopicsPerRequest {
		req := &sluicev1.CreateTopicsRequest{TimeoutMs: int32(requestTimeout.Milliseconds())}
		for i := first; i < min(first+scaleTopicsPerRequest, topics); i++ {
			req.Topics = append(req.Topics, &sluicev1.CreatableTopic{Name: fmt.Sprintf("scale-%d", i),
				NumPartitions: scalePartitionsPerTopic, ReplicationFactor: 3})
		}
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout+10*time.Second)
		resp, err := admin.CreateTopics(ctx, req)
		cancel()
		if err != nil {
			b.Fatalf("CreateTopics of topics %d..%d: %v", first, first+len(req.Topics)-1, err)
		}
		for _, t := range resp.Topics {
			if t.ErrorCode != sluicev1.ErrorCode_NONE {
				b.Fatalf("CreateTopics: topic %s: %v: %s", t.Name, t.ErrorCode, t.ErrorMessage)
			}
		}
	}
}

// describeCluster asks admin's node for DescribeCluster, bounded by 10 s.
func describeCluster(admin sluicev1.AdminClient) (*sluicev1.DescribeClusterResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return admin.DescribeCluster(ctx, &sluicev1.DescribeClusterRequest{})
}

// checkClusterHealthy reports why d does not show a controller leader
// among ids and every one of ids registered and unfenced.
func checkClusterHealthy(d *sluicev1.DescribeClusterResponse, ids []int32) error {
	if !slices.Contains(ids, d.ControllerLeader) {
		return fmt.Errorf("node %d: controller leader %d, want one of %v", d.NodeId, d.ControllerLeader, ids)
	}
	for _, id := range ids {
		if bs := brokerStatus(d, id); bs == nil || bs.Fenced {
			return fmt.Errorf("node %d: broker %d is %v, want registered and unfenced", d.NodeId, id, bs)
		}
	}
	return nil
}

// brokerStatus is broker id in d, or nil.
func brokerStatus(d *sluicev1.DescribeClusterResponse, id int32) *sluicev1.BrokerStatus {
	for _, bs := range d.Brokers {
		if bs.NodeId == id {
			return bs
		}
	}
	return nil
}

// ledPartitions is the number of partitions with a leader in d.
func ledPartitions(d *sluicev1.DescribeClusterResponse) int {
	n := 0
	for _, bs := range d.Brokers {
		n += int(bs.LeaderPartitions)
	}
	return n
}

// totalPartitions is the number of partitions in d, led or offline.
func totalPartitions(d *sluicev1.DescribeClusterResponse) int {
	return ledPartitions(d) + int(d.OfflinePartitions)
}

// measureIdle measures nodes ids over window, sending them nothing
// meanwhile: CPU from utime+stime, then (after the window, so that the
// scrape's own cost stays out of the CPU figure) RSS, descriptors,
// goroutines.
func measureIdle(b *testing.B, c *testCluster, ids []int32, window time.Duration) []nodeUse {
	b.Helper()
	pids := make([]int, len(ids))
	ticks := make([]int64, len(ids))
	for i, id := range ids {
		var err error
		if pids[i], err = pidOf(c.node(id)); err != nil {
			b.Fatal(err)
		}
		if ticks[i], err = cpuTicks(pids[i]); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	time.Sleep(window) // the measuring window, not a wait for a condition
	elapsed := time.Since(start)
	use := make([]nodeUse, len(ids))
	for i, id := range ids {
		t, err := cpuTicks(pids[i])
		if err != nil {
			b.Fatal(err)
		}
		u := &use[i]
		u.cpuPercent = float64(t-ticks[i]) / clockTicksPerSecond / elapsed.Seconds() * 100
		kb, err := procField(pids[i], "status", "VmRSS:", 1)
		if err != nil {
			b.Fatal(err)
		}
		rss, err := strconv.ParseFloat(kb, 64)
		if err != nil {
			b.Fatalf("pid %d VmRSS %q: %v", pids[i], kb, err)
		}
		u.rssMiB = rss / 1024
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pids[i]))
		if err != nil {
			b.Fatal(err)
		}
		u.fds = len(fds)
		if u.fdLimit, err = procField(pids[i], "limits", "Max open files", 1); err != nil {
			b.Fatal(err)
		}
		if u.goroutines, u.metricsKiB, err = scrapeGoroutines(c.node(id).HTTP); err != nil {
			b.Fatal(err)
		}
	}
	return use
}

// clockTicksPerSecond is USER_HZ, the unit of /proc/PID/stat's utime and
// stime: 100 on every Linux architecture Go supports (sysconf(_SC_CLK_TCK)
// would need cgo).
const clockTicksPerSecond = 100

// pidOf finds node n's running sluiced among /proc's processes by its
// --data-dir, which no other process shares (proccluster keeps the pid
// to itself).
func pidOf(n *proccluster.Node) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	want := []byte("\x00--data-dir\x00" + n.DataDir + "\x00")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Contains(cmdline, want) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process of node %d (--data-dir %s) in /proc", n.ID, n.DataDir)
}

// cpuTicks is utime+stime of /proc/PID/stat, in clock ticks.
func cpuTicks(pid int) (int64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count from the last ')'. utime and stime are fields 14 and 15, the
	// 12th and 13th after it.
	rest := stat[bytes.LastIndexByte(stat, ')')+1:]
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return utime + stime, nil
}

// procField returns the field-th whitespace-separated word after prefix
// on the line of /proc/PID/file that starts with it.
func procField(pid int, file, prefix string, field int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			if f := strings.Fields(rest); len(f) >= field {
				return f[field-1], nil
			}
		}
	}
	return "", fmt.Errorf("/proc/%d/%s: no %q line", pid, file, prefix)
}

// scrapeGoroutines reads go_goroutines from the /metrics of the node whose
// HTTP listener is httpAddr, and the size of the scrape.
func scrapeGoroutines(httpAddr string) (goroutines int, kib float64, err error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			g, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(g), float64(len(body)) / 1024, err
		}
	}
	return 0, 0, fmt.Errorf("%s/metrics: no go_goroutines sample", httpAddr)
}

// cpuProfile writes a CPU profile of d from the node whose HTTP listener
// is httpAddr to path.
func cpuProfile(httpAddr string, d time.Duration, path string) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", httpAddr, int(d.Seconds()))
	resp, err := (&http.Client{Timeout: d + 30*time.Second}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
