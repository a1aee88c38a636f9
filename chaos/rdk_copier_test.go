package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/chaos/checker"
)

// The librdkafka copier's output topic comes last and its input is the
// Kafka producers' second topic, which no other copier reads.
func TestRdkCopierTopics(t *testing.T) {
	wc := DefaultConfig().Workload
	if wc.rdkCopier() || slices.Contains(wc.Topics(), wc.rdkOutput()) {
		t.Fatal("the librdkafka copier is on by default")
	}
	wc.RdkCopiers = 2
	ts := wc.Topics()
	if ts[len(ts)-1] != "chaos-rdk-out" || !slices.Contains(ts, wc.rdkInput()) {
		t.Fatalf("topics %v", ts)
	}
	if wc.rdkInput() == wc.kafkaCopierInput() || wc.rdkInput() == wc.Topic {
		t.Fatalf("input %s shared with another copier", wc.rdkInput())
	}
	ids := wc.transactionalIDs()
	if !slices.Contains(ids, "chaos-rdk-1") || !slices.Contains(ids, "chaos-rdk-2") {
		t.Errorf("transactional ids %v", ids)
	}
	wc.KafkaTxnProducers = 0
	if _, err := prepareRdk(wc); err == nil {
		t.Error("a librdkafka copier without its input's producers")
	}
	wc.KafkaTxnProducers = 2
	wc.RdkPython = "/nonexistent/python3"
	if _, err := prepareRdk(wc); err == nil || !strings.Contains(err.Error(), "confluent_kafka") {
		t.Errorf("a missing python: %v", err)
	}
}

func TestRdkParseLine(t *testing.T) {
	tx, err := parseRdkLine([]byte(`{"txn": 3, "transactional_id": "chaos-rdk-1", "records": 4, "copied": {"0": [5, 7], "2": [1, 1]}, "positions": {"0": 8, "2": 2}}`))
	if err != nil || tx.n != 3 || tx.copied[0] != [2]int64{5, 7} || tx.copied[2] != [2]int64{1, 1} {
		t.Fatalf("%+v, %v", tx, err)
	}
	for _, bad := range []string{`{"txn": 0}`, `{"txn": 1, "copied": {"x": [1, 2]}}`, `{"txn": 1, "copied": {"0": [3, 2]}}`, `{"txn": 1,`} {
		if _, err := parseRdkLine([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// Copies in a reported transaction are writes of that committed
// transaction (gaps in its ranges, aborted input records, skipped); the
// other input records get a copy of unknown outcome outside any
// transaction; the checker then judges the output.
func TestRdkCopyWrites(t *testing.T) {
	wc := DefaultConfig().Workload
	wc.RdkCopiers = 1
	in := wc.logOf(wc.rdkInput(), 1)
	out := wc.logOf(wc.rdkOutput(), 1)
	now := time.Now()
	inputs := []checker.Write{
		{Producer: "kt1", Partition: in, Value: "a", Key: "k", Outcome: checker.OK, Offset: 0, Invoke: now, Complete: now},
		{Producer: "kt1", Partition: in, Value: "b", Outcome: checker.OK, Offset: 1, Invoke: now, Complete: now},
		{Producer: "kt1", Partition: in, Value: "c", Outcome: checker.OK, Offset: 3, Invoke: now, Complete: now},
	}
	valueAt := map[[2]int64]string{{int64(in), 0}: "a", {int64(in), 1}: "b", {int64(in), 3}: "c"}
	lines := []rdkTxn{{name: "r1.1", n: 1, begin: now, end: now.Add(time.Second), copied: map[int32][2]int64{1: {0, 2}}}}
	txns, writes, rest := rdkCopyWrites(wc, lines, inputs, valueAt, now, now.Add(time.Minute))
	if len(txns) != 1 || txns[0].Outcome != checker.TxnCommitted || len(writes[0]) != 2 {
		t.Fatalf("txns %+v writes %+v", txns, writes)
	}
	if w := writes[0][0]; w.Value != "copy:a" || w.CopyOf != "a" || w.Key != "k" || w.Partition != out || w.Txn != "r1.1/1" {
		t.Errorf("copy %+v", w)
	}
	if len(rest) != 1 || rest[0].Value != "copy:c" || rest[0].Txn != "" || rest[0].Partition != out {
		t.Fatalf("rest %+v", rest)
	}
	h := checker.History{Writes: append(append(slices.Clone(inputs), writes[0]...), rest...), Txns: txns,
		Copier: &checker.Copier{Ends: map[int32]int64{in: 2}}}
	read := func(s string, off int64, v string) checker.Read {
		return checker.Read{Consumer: s, Partition: out, Offset: off, Value: v, Time: now.Add(2 * time.Second), Committed: true}
	}
	for _, v := range []string{"a", "b", "c"} {
		h.Reads = append(h.Reads, checker.Read{Consumer: "in", Partition: in, Offset: map[string]int64{"a": 0, "b": 1, "c": 3}[v], Value: v, Time: now, Committed: true})
	}
	good := append(slices.Clone(h.Reads), read("o", 1, "copy:a"), read("o", 2, "copy:b"))
	h.Reads = good
	if rep := checker.Check(h); !rep.OK() {
		t.Fatalf("a good copy judged bad: %v", rep)
	}
	if below, above, bad := rdkTally(wc, h, h.Copier.Ends); below != 2 || above != 1 || bad != 0 {
		t.Errorf("tally %d %d %d, want 2 1 0", below, above, bad)
	}
	h.Reads = append(slices.Clone(good), read("o", 4, "copy:a")) // an aborted copy visible
	if rep := checker.Check(h); rep.OK() {
		t.Fatal("a duplicate copy not found")
	}
	if _, _, bad := rdkTally(wc, h, h.Copier.Ends); bad != 1 {
		t.Errorf("tally: %d bad, want 1", bad)
	}
	h.Reads = append(slices.Clone(good[:3]), read("o", 2, "copy:b")) // a committed copy lost
	if rep := checker.Check(h); rep.OK() {
		t.Fatal("a lost copy not found")
	}
}

// In a secured run the librdkafka copier trusts the run's CA and, with
// SCRAM, logs in as the workload's user by either SCRAM mechanism
// (librdkafka 2.0.2's doubled nonce, accepted) or PLAIN over TLS, given
// the password's file, never the password.
func TestRdkArgsOfASecuredRun(t *testing.T) {
	if args := (ClientSecurity{}).rdkArgs(); args != nil {
		t.Errorf("plaintext run: %v", args)
	}
	p, err := newPKI(t.TempDir(), SecurityTLSSCRAM, []int32{1})
	if err != nil {
		t.Fatal(err)
	}
	mechs := map[string]bool{}
	for range 12 {
		args := strings.Join(p.clientSecurity().rdkArgs(), " ")
		m, ok := strings.CutPrefix(args, "--ca-file "+p.caFile+" --sasl-mechanism ")
		m, rest, _ := strings.Cut(m, " ")
		if !ok || rest != "--sasl-username chaos --sasl-password-file "+p.passwordFile || strings.Contains(args, p.password) {
			t.Fatalf("args %q", args)
		}
		mechs[m] = true
	}
	if !mechs["SCRAM-SHA-256"] || !mechs["SCRAM-SHA-512"] || !mechs["PLAIN"] {
		t.Errorf("mechanisms used over 12 processes: %v, want SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN", mechs)
	}
	tlsOnly := p.clientSecurity()
	tlsOnly.ScramUser = ""
	if args := strings.Join(tlsOnly.rdkArgs(), " "); args != "--ca-file "+p.caFile {
		t.Errorf("tls run: %q", args)
	}
}

// Copies no reported transaction holds (a copier killed between its
// commit and its report) are numbered in the input's offset order, the
// order a copier writes them, not in the order the input writes were sent:
// two producers' concurrent writes land in either order (found by a
// 10-minute chaos run: a correct output judged non-monotonic).
func TestRdkUnreportedCopiesFollowTheInputOrder(t *testing.T) {
	wc := DefaultConfig().Workload
	wc.RdkCopiers = 1
	in := wc.logOf(wc.rdkInput(), 0)
	out := wc.logOf(wc.rdkOutput(), 0)
	now := time.Now()
	// x was sent first but landed after y; z was never committed.
	inputs := []checker.Write{
		{Producer: "kt1", Partition: in, Value: "x", Outcome: checker.Unknown, Invoke: now, Complete: now},
		{Producer: "kt2", Partition: in, Value: "z", Outcome: checker.Unknown, Invoke: now, Complete: now},
		{Producer: "kt2", Partition: in, Value: "y", Outcome: checker.OK, Offset: 4, Invoke: now, Complete: now},
	}
	valueAt := map[[2]int64]string{{int64(in), 5}: "x", {int64(in), 4}: "y"}
	_, _, rest := rdkCopyWrites(wc, nil, inputs, valueAt, now, now.Add(time.Minute))
	var order []string
	for _, w := range rest {
		order = append(order, w.Value)
	}
	if want := []string{"copy:y", "copy:x", "copy:z"}; !slices.Equal(order, want) {
		t.Fatalf("unreported copies in the order %v, want %v", order, want)
	}
	h := checker.History{Writes: append(slices.Clone(inputs), rest...), Copier: &checker.Copier{Ends: map[int32]int64{in: 6}}}
	h.Reads = []checker.Read{
		{Consumer: "in", Partition: in, Offset: 4, Value: "y", Time: now, Committed: true},
		{Consumer: "in", Partition: in, Offset: 5, Value: "x", Time: now, Committed: true},
		{Consumer: "o", Partition: out, Offset: 0, Value: "copy:y", Time: now.Add(2 * time.Second), Committed: true},
		{Consumer: "o", Partition: out, Offset: 1, Value: "copy:x", Time: now.Add(2 * time.Second), Committed: true},
	}
	if rep := checker.Check(h); !rep.OK() {
		t.Fatalf("copies in the input's order judged bad: %v", rep)
	}
}
