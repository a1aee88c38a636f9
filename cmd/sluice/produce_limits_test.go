package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/node/nodetest"
)

// lines returns n input lines "<prefix>1" .. "<prefix>n", each ending in a
// newline.
func lines(prefix string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%s%d\n", prefix, i)
	}
	return b.String()
}

// logValues returns the values in partition 0 of topic, read with
// "sluice consume" (the harness's connection takes 4 MiB messages at most)
// up to its high watermark.
func logValues(t *testing.T, s *nodetest.Single, topic string) []string {
	t.Helper()
	c, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hw, _, err := c.Watermarks(context.Background(), topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if hw == 0 {
		return nil
	}
	out, _, err := runArgs(t, "--brokers="+s.Node.Addr(), "consume", topic, "--partition", "0", "--from-beginning", "--max-messages", strconv.FormatInt(hw, 10))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
}

// Issue 28: a record larger than the topic's max.message.bytes in the
// middle of the input stops produce there: the records before it are
// acknowledged and counted, the ones after it are neither read nor
// written, and the advice names the limit that binds (the topic's, which
// is fixed at creation, with the --max-request-bytes the record also
// needs), in a command that works: run as given, it creates a topic that
// takes the record.
func TestProduceStopsAtARecordOverTheTopicsLimit(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	s.CreateTopic("orders", 1, nil) // max.message.bytes: the default, 1 MiB + 12 bytes
	brokers := "--brokers=" + s.Node.Addr()
	big := strings.Repeat("x", 5<<20)
	input := lines("a", 41) + big + "\n" + lines("b", 3)
	_, _, err := runWithStdin(t, input, brokers, "produce", "orders")
	if err == nil {
		t.Fatal("produce of a 5 MiB record into a 1 MiB topic succeeded")
	}
	msg := err.Error()
	for _, want := range []string{
		"produce: 41 records acknowledged; record 42 (line 42, 5.0 MiB) exceeds the topic's max.message.bytes (1.0 MiB): split the record",
		"--config max.message.bytes=6291456",
		"and --max-request-bytes 6291456",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q, want it to say %q", msg, want)
		}
	}
	if strings.Contains(msg, "raise --max-request-bytes") {
		t.Errorf("error %q advises raising --max-request-bytes alone, which cannot help", msg)
	}
	if got := logValues(t, s, "orders"); strings.Join(got, " ") != strings.TrimSpace(strings.ReplaceAll(lines("a", 41), "\n", " ")) {
		t.Fatalf("the log holds %d records %v, want a1..a41 and nothing after the large one", len(got), got)
	}

	// The advice, followed: the topic it creates takes the record with
	// the flag it names.
	m := regexp.MustCompile(`"sluice (topic create NAME [^"]+)" and --max-request-bytes (\d+)`).FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("no topic create command and flag in %q", msg)
	}
	create := strings.Fields(strings.Replace(m[1], "NAME", "orders-large", 1))
	if _, _, err := runArgs(t, append([]string{brokers}, create...)...); err != nil {
		t.Fatalf("the advised %q: %v", m[1], err)
	}
	if _, _, err := runWithStdin(t, big+"\n", brokers, "produce", "orders-large", "--max-request-bytes", m[2]); err != nil {
		t.Fatalf("produce of the record as advised: %v", err)
	}
	if got := logValues(t, s, "orders-large"); len(got) != 1 || len(got[0]) != len(big) {
		t.Fatalf("the new topic holds %d records, want the large one", len(got))
	}
}

// When the topic takes the record and the client's --max-request-bytes
// does not, the advice is the flag alone, and it works.
func TestProduceNamesMaxRequestBytesWhenItIsTheLimit(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	s.CreateTopic("wide", 1, map[string]string{"max.message.bytes": strconv.Itoa(8 << 20)})
	brokers := "--brokers=" + s.Node.Addr()
	big := strings.Repeat("y", 5<<20)
	_, _, err := runWithStdin(t, "a\n"+big+"\nb\n", brokers, "produce", "wide")
	want := "produce: 1 record acknowledged; record 2 (line 2, 5.0 MiB) exceeds --max-request-bytes (4.0 MiB): raise --max-request-bytes, e.g. --max-request-bytes 6291456 (the topic's max.message.bytes takes up to 8.0 MiB)"
	if err == nil || err.Error() != want {
		t.Fatalf("produce of a 5 MiB record, --max-request-bytes at its 4 MiB default: %v, want %q", err, want)
	}
	if _, _, err := runWithStdin(t, big+"\nc\n", brokers, "produce", "wide", "--max-request-bytes", "6291456"); err != nil {
		t.Fatalf("with the advised flag: %v", err)
	}
	if got := logValues(t, s, "wide"); len(got) != 3 || got[0] != "a" || len(got[1]) != len(big) || got[2] != "c" {
		t.Fatalf("the log holds %d records, want a, the large one and c", len(got))
	}
}

// Records under a small max.message.bytes are batched within it (a
// batch of records that each fit is not refused as a whole), and the
// first record over it is the one reported.
func TestProduceIntoATopicWithASmallLimit(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	brokers := "--brokers=" + s.Node.Addr()
	if _, _, err := runArgs(t, brokers, "topic", "create", "small", "--partitions", "1", "--config", "max.message.bytes=2048"); err != nil {
		t.Fatal(err)
	}
	var input strings.Builder
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&input, "%03d%s\n", i, strings.Repeat("v", 497))
	}
	input.WriteString(strings.Repeat("w", 3000) + "\n" + "after\n")
	_, _, err := runWithStdin(t, input.String(), brokers, "produce", "small")
	want := "produce: 10 records acknowledged; record 11 (line 11, 2.9 KiB) exceeds the topic's max.message.bytes (2.0 KiB): split the record, or produce it to a topic created with a larger limit"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "--max-request-bytes") {
		t.Fatalf("produce into a 2 KiB topic: %v, want %q and no word of --max-request-bytes", err, want)
	}
	if got := logValues(t, s, "small"); len(got) != 10 || got[9][:3] != "010" {
		t.Fatalf("the log holds %d records, want the 10 before the large one", len(got))
	}
}

// A record that the broker refuses for another reason mid-stream (a
// keyless record in a compacted topic: INVALID_RECORD) stops produce too,
// and the count of acknowledged records it reports is the count in the
// log.
func TestProduceReportsTheAcknowledgedCountWhenARecordFails(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	s.CreateTopic("keyed", 1, map[string]string{"cleanup.policy": "compact"})
	brokers := "--brokers=" + s.Node.Addr()
	input := lines("k", 30)
	input = strings.ReplaceAll(input, "k", "k:") // "k:1" ... key "k", value "1"
	input += "no key here\n" + lines("k:late", 5)
	_, _, err := runWithStdin(t, input, brokers, "produce", "keyed", "--key-separator", ":")
	m := regexp.MustCompile(`^produce: (\d+) records? acknowledged; record (\d+) \(line \d+, [^)]+\) failed: .*INVALID_RECORD`).FindStringSubmatch(fmt.Sprint(err))
	if m == nil {
		t.Fatalf("produce of a keyless record into a compacted topic: %v", err)
	}
	acked, _ := strconv.Atoi(m[1])
	if n, _ := strconv.Atoi(m[2]); n > 31 {
		t.Errorf("reported record %d, after the keyless one (31)", n)
	}
	if got := logValues(t, s, "keyed"); len(got) != acked {
		t.Fatalf("reported %d records acknowledged, the log holds %d", acked, len(got))
	}
}

// In a transaction, the record too large ends the input too: the open
// transaction is aborted and the report says how many were committed
// before it. The topic's limit unknown (this broker's metadata gives no
// configs), --max-request-bytes is the limit named.
func TestProduceTransactionalStopsAtARecordTooLarge(t *testing.T) {
	f := startFakeTxnBroker(t)
	input := "a\nb\nc\nd\n" + strings.Repeat("x", 3000) + "\ne\n"
	_, _, err := runWithStdin(t, input, "--brokers", f.addr, "produce", "m", "--transactional-id", "tx", "--commit-every", "2", "--max-request-bytes", "2048")
	want := "produce: the open transaction was aborted (2 transactions committed before it); record 5 (line 5, 2.9 KiB) exceeds --max-request-bytes (2.0 KiB): raise --max-request-bytes, e.g. --max-request-bytes 1048576 (up to the topic's max.message.bytes)"
	if err == nil || err.Error() != want {
		t.Fatalf("produce: %v, want %q", err, want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.records != 4 {
		t.Errorf("%d records reached the broker, want the 4 before the large one", f.records)
	}
	if len(f.ends) < 2 || !f.ends[0].Committed || !f.ends[1].Committed {
		t.Errorf("EndTxn calls %v, want two commits first", f.ends)
	}
	for _, e := range f.ends[2:] {
		if e.Committed {
			t.Errorf("EndTxn calls %v: the open transaction was committed", f.ends)
		}
	}
}
