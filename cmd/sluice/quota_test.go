package main

import (
	"strings"
	"testing"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/node/nodetest"
)

func TestQuotaSetListDelete(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	brokers := "--brokers=" + s.Node.Addr()
	for _, args := range [][]string{
		{"--user", "alice", "--producer-byte-rate", "1048576", "--consumer-byte-rate", "2097152"},
		{"--user-default", "--client-id", "etl", "--request-percentage", "50"},
		{"--client-id-default", "--producer-byte-rate", "1024"},
	} {
		if out, errOut, err := runArgs(t, append(append([]string{"quota", "set"}, args...), brokers)...); err != nil || !strings.HasPrefix(out, "quotas of ") {
			t.Fatalf("set %v: %q %q %v", args, out, errOut, err)
		}
	}
	alice := controller.QuotaKey{Entity: controller.QuotaEntity{User: controller.QuotaName{Name: "alice"}}, Key: controller.QuotaProducerByteRate}
	if v := s.Node.Metadata().Image().ClientQuotas[alice]; v != 1048576 {
		t.Errorf("the broker holds alice's producer_byte_rate %v", v)
	}
	out, errOut, err := runArgs(t, "quota", "list", brokers)
	want := "USER       CLIENT-ID  PRODUCER_BYTE_RATE  CONSUMER_BYTE_RATE  REQUEST_PERCENTAGE\n" +
		"-          <default>  1024                -                   -\n" +
		"<default>  etl        -                   -                   50\n" +
		"alice      -          1048576             2097152             -\n"
	if err != nil || out != want {
		t.Fatalf("list = %q, %q, %v; want\n%s", out, errOut, err, want)
	}
	if out, _, err := runArgs(t, "quota", "list", "--user", "alice", "--output", "json", brokers); err != nil ||
		out != `[{"user":"alice","quotas":{"consumer_byte_rate":2097152,"producer_byte_rate":1048576}}]`+"\n" {
		t.Errorf("list --user alice json = %q, %v", out, err)
	}
	if _, errOut, err := runArgs(t, "quota", "delete", "--user", "alice", "--consumer-byte-rate", brokers); err != nil {
		t.Fatalf("delete: %v %s", err, errOut)
	}
	if out, _, _ := runArgs(t, "quota", "list", "--user", "alice", brokers); !strings.Contains(out, "alice  -          1048576             -   ") {
		t.Errorf("after deleting one key: %q", out)
	}
	runArgs(t, "quota", "delete", "--user", "alice", brokers)
	if out, _, _ := runArgs(t, "quota", "list", "--user", "alice", brokers); out != "" {
		t.Errorf("after deleting every key: %q", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "--producer-byte-rate", "1"}, "name the entity"},
		{[]string{"set", "--user", "a"}, "name a quota"},
		{[]string{"set", "--user", "a", "--user-default", "--producer-byte-rate", "1"}, "exclude each other"},
		{[]string{"set", "--user", "a", "--producer-byte-rate", "0"}, "INVALID_REQUEST"},
	} {
		if _, errOut, err := runArgs(t, append(append([]string{"quota"}, tc.args...), brokers)...); err == nil || !strings.Contains(err.Error()+errOut, tc.want) {
			t.Errorf("%v: %v %q, want %q", tc.args, err, errOut, tc.want)
		}
	}
}

// produce --client-id sends the client id, and tells on stderr how much a
// client quota on it throttled the run; every record is written.
func TestProduceReportsQuotaThrottle(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	brokers := "--brokers=" + s.Node.Addr()
	if _, errOut, err := runArgs(t, "topic", "create", "q", "--partitions", "1", "--replication-factor", "1", brokers); err != nil {
		t.Fatal(err, errOut)
	}
	// 1 B/s: the first request is throttled, by the cap (11 s) at most;
	// the answer is held that long, within the request timeout.
	if _, errOut, err := runArgs(t, "quota", "set", "--client-id", "slow", "--producer-byte-rate", "1", brokers); err != nil {
		t.Fatal(err, errOut)
	}
	_, errOut, err := runWithStdin(t, "a\nb\nc\n", "produce", "q", "--client-id", "slow", brokers)
	if err != nil || !strings.Contains(errOut, "produce: throttled by client quotas: 1 answer") {
		t.Fatalf("produce: %v, stderr %q", err, errOut)
	}
	out, _, err := runArgs(t, "consume", "q", "--from-beginning", "--max-messages", "3", "--timeout", "10s", brokers)
	if err != nil || out != "a\nb\nc\n" {
		t.Errorf("consume: %q %v", out, err)
	}
}
