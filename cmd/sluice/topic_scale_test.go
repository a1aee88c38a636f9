package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// describedPartitions returns "topic-partition" of every partition in a
// topic describe --output json array, sorted.
func describedPartitions(t *testing.T, out string) []string {
	t.Helper()
	var ts []topicJSON
	if err := json.Unmarshal([]byte(out), &ts); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	got := []string{}
	for _, tj := range ts {
		for _, p := range tj.Partitions {
			got = append(got, fmt.Sprintf("%s-%d", tj.Name, p.Partition))
		}
	}
	slices.Sort(got)
	return got
}

// Issue 31: topic list and describe select topics (--prefix, --match,
// --exclude-internal) and page through the broker's listing; describe's
// filters (kafka-topics.sh's --under-replicated-partitions and siblings)
// show, over every topic, exactly the partitions in that state once a
// broker is down, and cluster status counts them. A real three-node
// cluster on loopback; node 3 is stopped halfway.
func TestTopicListingAndHealthFilters(t *testing.T) {
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.StartAll()
	brokers := "--brokers=" + c.Node(1).Addr() + "," + c.Node(2).Addr()
	cli := func(args ...string) string {
		t.Helper()
		out, stderr, err := runCmd(t, append([]string{brokers}, args...)...)
		if err != nil {
			t.Fatalf("sluice %q: %v: %s", args, err, stderr)
		}
		return out
	}
	cli("topic", "create", "orders.a", "--partitions", "3", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	cli("topic", "create", "orders.b", "--partitions", "2", "--replication-factor", "3", "--config", "min.insync.replicas=3")
	cli("topic", "create", "single", "--partitions", "3", "--replication-factor", "1")
	// The first FindCoordinator creates the internal __transaction_state.
	conn := nodetest.Dial(t, c.Node(1).Addr())
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sluicev1.NewTransactionsClient(conn).FindCoordinator(ctx, &sluicev1.FindCoordinatorRequest{Keys: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 30*time.Second, "__transaction_state listed", func() bool {
		return strings.Contains(cli("topic", "list"), "__transaction_state")
	})

	// Pages of two topics (one for __transaction_state's 50 partitions in
	// describe) give the whole listing.
	defer func(n int32) { metadataPageSize = n }(metadataPageSize)
	metadataPageSize = 2
	var rows []struct {
		Name              string `json:"name"`
		Partitions        int32  `json:"partitions"`
		ReplicationFactor int32  `json:"replication_factor"`
		MinInsyncReplicas int32  `json:"min_insync_replicas"`
		Internal          bool   `json:"internal"`
	}
	if err := json.Unmarshal([]byte(cli("--output", "json", "topic", "list")), &rows); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(rows); got != "[{__transaction_state 50 3 2 true} {orders.a 3 3 2 false} {orders.b 2 3 3 false} {single 3 1 1 false}]" {
		t.Errorf("topic list --output json: %s", got)
	}
	for _, tc := range []struct {
		args []string
		want string // the TOPIC column
	}{
		{[]string{"--prefix", "orders."}, "orders.a orders.b"},
		{[]string{"--match", "*.b"}, "orders.b"},
		{[]string{"--match", "[os]*", "--prefix", "s"}, "single"},
		{[]string{"--exclude-internal"}, "orders.a orders.b single"},
		{[]string{"--prefix", "nothing"}, ""},
	} {
		out := cli(append([]string{"topic", "list"}, tc.args...)...)
		var names []string
		for i, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if f := strings.Fields(l); i > 0 && len(f) > 0 {
				names = append(names, f[0])
			}
		}
		if strings.Join(names, " ") != tc.want {
			t.Errorf("topic list %q: %q, want %s", tc.args, out, tc.want)
		}
	}
	out := cli("topic", "list", "--prefix", "orders.b")
	if l := strings.Split(out, "\n"); len(l) != 3 || strings.Join(strings.Fields(l[0]), " ") != "TOPIC PARTITIONS RF MIN_ISR UNDER_REPLICATED UNDER_MIN_ISR UNAVAILABLE" ||
		strings.Join(strings.Fields(l[1]), " ") != "orders.b 2 3 3 0 0 0" {
		t.Errorf("topic list --prefix orders.b:\n%s", out)
	}
	if got := describedPartitions(t, cli("--output", "json", "topic", "describe", "--prefix", "orders.")); strings.Join(got, " ") != "orders.a-0 orders.a-1 orders.a-2 orders.b-0 orders.b-1" {
		t.Errorf("describe --prefix orders.: %v", got)
	}
	if got := describedPartitions(t, cli("--output", "json", "topic", "describe", "single", "orders.b", "single")); strings.Join(got, " ") != "orders.b-0 orders.b-1 single-0 single-1 single-2" {
		t.Errorf("describe single orders.b: %v", got)
	}
	if got := describedPartitions(t, cli("--output", "json", "topic", "describe", "--under-replicated-partitions")); len(got) != 0 {
		t.Errorf("under-replicated partitions of a healthy cluster: %v", got)
	}
	var one topicJSON
	if err := json.Unmarshal([]byte(cli("--output", "json", "topic", "describe", "single")), &one); err != nil || len(one.Partitions) != 3 || one.Configs["min.insync.replicas"] != "1" {
		t.Errorf("describe single --output json: one object with its configs: %v %+v", err, one)
	}
	onThree := []string{}
	for _, p := range one.Partitions {
		if p.Replicas[0] == 3 {
			onThree = append(onThree, fmt.Sprintf("single-%d", p.Partition))
		}
	}
	if len(onThree) != 1 {
		// Placement spreads a topic's replicas evenly over the brokers.
		t.Fatalf("single's partitions led by node 3: %v, want one", onThree)
	}

	if err := c.Stop(3); err != nil {
		t.Fatal(err)
	}
	// orders.a is at its min ISR of 2, orders.b under its 3; both are
	// under-replicated with __transaction_state (replication factor 3,
	// min ISR 2); single's partitions on node 3 are unavailable, and all
	// of single's are at their min ISR of 1 (an offline partition keeps
	// its last ISR, as in Kafka).
	var internal []string
	for p := range 50 {
		internal = append(internal, fmt.Sprintf("__transaction_state-%d", p))
	}
	slices.Sort(internal)
	want := map[string][]string{
		"--under-replicated-partitions": append(slices.Clone(internal), "orders.a-0", "orders.a-1", "orders.a-2", "orders.b-0", "orders.b-1"),
		"--at-min-isr-partitions":       append(slices.Clone(internal), "orders.a-0", "orders.a-1", "orders.a-2", "single-0", "single-1", "single-2"),
		"--under-min-isr-partitions":    {"orders.b-0", "orders.b-1"},
		"--unavailable-partitions":      onThree,
	}
	for flag, w := range want {
		wait.For(t, 30*time.Second, flag, func() error {
			if got := describedPartitions(t, cli("--output", "json", "topic", "describe", flag)); strings.Join(got, " ") != strings.Join(w, " ") {
				return fmt.Errorf("got %v, want %v", got, w)
			}
			return nil
		})
	}
	if got := describedPartitions(t, cli("--output", "json", "topic", "describe", "--under-min-isr-partitions", "--exclude-internal", "--match", "*.b")); strings.Join(got, " ") != "orders.b-0 orders.b-1" {
		t.Errorf("under min ISR of *.b: %v", got)
	}
	out = cli("topic", "describe", "--under-min-isr-partitions")
	if l := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(l) != 3 || !strings.HasPrefix(strings.Join(strings.Fields(l[0]), " "), "TOPIC PARTITION LEADER") ||
		!strings.HasPrefix(l[1], "orders.b ") {
		t.Errorf("describe --under-min-isr-partitions, text:\n%s", out)
	}
	if err := json.Unmarshal([]byte(cli("--output", "json", "topic", "describe", "orders.a", "--unavailable-partitions")), &one); err != nil || one.Name != "orders.a" || len(one.Partitions) != 0 {
		t.Errorf("describe orders.a --unavailable-partitions: the topic without partitions: %v %+v", err, one)
	}
	var rows2 []struct {
		Name            string `json:"name"`
		UnderReplicated int32  `json:"under_replicated_partitions"`
		UnderMinISR     int32  `json:"under_min_isr_partitions"`
		AtMinISR        int32  `json:"at_min_isr_partitions"`
		Unavailable     int32  `json:"unavailable_partitions"`
	}
	if err := json.Unmarshal([]byte(cli("--output", "json", "topic", "list", "--exclude-internal")), &rows2); err != nil {
		t.Fatal(err)
	}
	if got, w := fmt.Sprint(rows2), fmt.Sprintf("[{orders.a 3 0 3 0} {orders.b 2 2 0 0} {single 0 0 3 %d}]", len(onThree)); got != w {
		t.Errorf("topic list counts: %s, want %s", got, w)
	}
	var st clusterJSON
	if err := json.Unmarshal([]byte(cli("--output", "json", "cluster", "status")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Topics != 4 || st.Partitions != 58 || st.UnderReplicatedPartitions != 55 || st.UnderMinISRPartitions != 2 ||
		st.AtMinISRPartitions != 56 || len(st.Brokers) != 3 || st.Brokers[2].OutOfSyncReplicas != 55 || st.Brokers[2].Replicas != 55+int32(len(onThree)) {
		t.Errorf("cluster status: %+v", st)
	}
}

// topic list and describe refuse, before dialling, what cannot work
// together and a malformed glob; describe refuses an unknown topic.
func TestTopicListingRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topic", "list", "--match", "[a"}, `--match "[a" is not a valid glob pattern`},
		{[]string{"topic", "describe", "--match", "[a"}, `--match "[a" is not a valid glob pattern`},
		{[]string{"topic", "describe", "t", "--prefix", "x"}, "name topics or select them with --prefix, --match and --exclude-internal, not both"},
		{[]string{"topic", "describe", "--under-replicated-partitions", "--unavailable-partitions"}, "--under-replicated-partitions and --unavailable-partitions cannot be used together"},
	} {
		out, _, err := runCmd(t, append([]string{"--brokers", "127.0.0.1:1"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || out != "" {
			t.Errorf("%q: err = %v, stdout %q; want %q", tc.args, err, out, tc.want)
		}
	}
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	s.CreateTopic("known", 1, nil)
	out, _, err := runCmd(t, "--brokers", s.Node.Addr(), "topic", "describe", "known", "unknown")
	if err == nil || !strings.Contains(err.Error(), `topic "unknown"`) || !strings.Contains(err.Error(), "UNKNOWN_TOPIC_OR_PARTITION") || out != "" {
		t.Errorf("describe known unknown: %v, stdout %q", err, out)
	}
}
