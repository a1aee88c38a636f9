package chaos

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/chaos/checker"
)

// This file is the librdkafka copier (--kafka-rdk-copiers N, off by
// default): N processes of examples/kafka/python/txn_copier.py (Debian's
// python3-confluent-kafka: librdkafka's transactions, version 1, with
// send_offsets_to_transaction, and a classic consumer group), members of
// the group chaos-rdk with the transactional ids chaos-rdk-1..N, copying
// Topic-kafka-2 (the Kafka transactional producers' second topic, aborted
// transactions included; the franz-go copier has Topic-kafka) to
// Topic-rdk-out, "copy:"+V in the input's partition. Each slot runs
// instances one after another (r1.1, r1.2, ... in the history): an
// instance lives a few seconds and is then SIGKILLed (two in three: a
// crash, whatever transaction it had open is left to its successor's
// InitProducerId) or stopped with SIGTERM (it ends its transaction and
// leaves the group); node faults (leaders', coordinators' SIGKILL,
// pauses, partitions) hit it as they hit the rest. Once the input is
// complete no more instances are killed; the copiers run until the
// group's committed offsets are past every input record read_committed
// readers saw, and are then stopped with SIGTERM.
//
// The history: the program reports only committed transactions (one
// JSON line each, naming the input offsets copied), not each record. At
// the end, every input value V read by read_committed gets one copy write
// ("copy:"+V, CopyOf V, outcome unknown: the program does not report the
// copy's offset): in the transaction of the line that names its offset,
// recorded committed, or else outside any transaction (the copy may or
// may not exist: a killed instance's commit may have gone through before
// it could print the line). The output is read by the read_committed
// tailers and the final read like every workload topic (not by the
// read_uncommitted tailers: an aborted copy carries the same value as its
// committed retry, which would read as a duplicate); the group's final
// offsets of the input go into Copier.Ends. The checker then judges: one
// copy visible per input record below the group's offsets, none above
// (copy-not-exactly-once), no copy at two offsets (duplicate: an aborted
// or a zombie's copy visible besides the committed one), every confirmed
// transaction's copies visible (txn-lost-write).

const (
	rdkCopierGroup = "chaos-rdk"
	rdkCopierTxnID = "chaos-rdk"
	// DefaultRdkScript is txn_copier.py, relative to the repository root.
	DefaultRdkScript = "examples/kafka/python/txn_copier.py"
	// DefaultRdkPython is the interpreter Debian's python3-* packages
	// install for.
	DefaultRdkPython = "/usr/bin/python3"
)

// rdkCopier reports whether the librdkafka copier runs.
func (wc WorkloadConfig) rdkCopier() bool { return wc.RdkCopiers > 0 }

// rdkInput and rdkOutput are the librdkafka copier's topics.
func (wc WorkloadConfig) rdkInput() string  { return wc.Topic + "-kafka-2" }
func (wc WorkloadConfig) rdkOutput() string { return wc.Topic + "-rdk-out" }

// prepareRdk checks what the librdkafka copier needs, failing clearly:
// its input's producers, the interpreter with confluent_kafka, the
// script (found upwards from the working directory when relative). It
// returns wc with the script's absolute path.
func prepareRdk(wc WorkloadConfig) (WorkloadConfig, error) {
	if !wc.rdkCopier() {
		return wc, nil
	}
	if wc.KafkaTxnProducers == 0 || wc.TxnTopics < 2 {
		return wc, errors.New("chaos: the librdkafka copier copies the Kafka transactional producers' second topic: it needs --kafka-txn-producers > 0 and --txn-topics >= 2")
	}
	if wc.RdkPython == "" {
		wc.RdkPython = DefaultRdkPython
	}
	if out, err := exec.Command(wc.RdkPython, "-c", "import confluent_kafka").CombinedOutput(); err != nil {
		return wc, fmt.Errorf("chaos: --kafka-rdk-copiers needs %s with confluent_kafka (Debian: apt-get install python3-confluent-kafka, or make kafka-clients' prerequisites): %v: %s",
			wc.RdkPython, err, strings.TrimSpace(string(out)))
	}
	script := wc.RdkScript
	if script == "" {
		script = DefaultRdkScript
	}
	if !filepath.IsAbs(script) {
		dir, err := os.Getwd()
		if err != nil {
			return wc, err
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, script)); err == nil {
				script = filepath.Join(dir, script)
				break
			}
			up := filepath.Dir(dir)
			if up == dir {
				return wc, fmt.Errorf("chaos: --kafka-rdk-copiers: %s not found from the working directory up (--kafka-rdk-script)", script)
			}
			dir = up
		}
	}
	if _, err := os.Stat(script); err != nil {
		return wc, fmt.Errorf("chaos: --kafka-rdk-copiers: %w", err)
	}
	wc.RdkScript = script
	return wc, nil
}

// rdkArgs are txn_copier.py's flags for a secured run: TLS trusting the
// run's CA, and with SCRAM the user and its password's file (the program
// reads it: no command line carries the password), logging in by the
// SCRAM mechanisms in turn and by SASL PLAIN over that TLS connection
// (checked against the same SCRAM credentials; docs/security.md, "The
// Kafka listener"), in turn. librdkafka before 2.6.1
// (Debian's is 2.0.2) repeats its nonce in SCRAM's final message
// (confluentinc/librdkafka#4895): the Kafka door accepts that form
// (auth/exchange.go), which these processes exercise.
func (s ClientSecurity) rdkArgs() []string {
	if s.CAFile == "" {
		return nil
	}
	args := []string{"--ca-file", s.CAFile}
	if s.ScramUser != "" {
		mechs := append(slices.Clip(s.ScramMechanisms), "PLAIN")
		mech := mechs[clientsMade.Add(1)%uint64(len(mechs))]
		args = append(args, "--sasl-mechanism", mech, "--sasl-username", s.ScramUser, "--sasl-password-file", s.ScramPasswordFile)
	}
	return args
}

// rdkLine is one committed transaction as a copier process reported it.
type rdkLine struct {
	Txn    int                 `json:"txn"`
	Copied map[string][2]int64 `json:"copied"`
}

// rdkTxn is a confirmed transaction: its instance, its number there, when
// its commit may have been sent at the earliest (begin) and when the
// harness read its line (end), and the input offsets it copied.
type rdkTxn struct {
	name       string
	n          int
	begin, end time.Time
	copied     map[int32][2]int64
}

// rdkState is what the librdkafka copier's goroutines share.
type rdkState struct {
	mu       sync.Mutex // guards the following
	txns     []rdkTxn
	lastLine time.Time
	started  time.Time
	// kills, terms and instances count SIGKILLs, SIGTERM restarts and
	// processes started.
	kills, terms, instances int
}

// rdkCopy runs the copier slots until the input is complete and the
// group's committed offsets are past every input record read_committed
// readers saw (bounded like kafkaCopy), then stops them.
func (w *workload) rdkCopy() {
	st := &w.rdk
	st.mu.Lock()
	st.started, st.lastLine = time.Now(), time.Now()
	st.mu.Unlock()
	end := w.startCopierSlots(w.cfg.RdkCopiers, 0x72646b, func(slot, instance int, rng *rand.Rand, stop <-chan struct{}) {
		life := time.Duration(3000+rng.IntN(12000)) * time.Millisecond
		kill := rng.IntN(3) != 0
		began := time.Now()
		w.runRdkCopier(slot, instance, life, kill, stop)
		if time.Since(began) < time.Second {
			w.pace(time.Second) // failing at once: not in a tight loop
		}
	})
	defer end()
	w.watchCopier("librdkafka copier",
		func() bool {
			st.mu.Lock()
			quiet := time.Since(st.lastLine) >= kafkaCopierQuiet
			st.mu.Unlock()
			return w.inputIsComplete() && quiet
		},
		func() bool { return w.kafkaGroupCaughtUp(rdkCopierGroup, w.cfg.rdkInput()) })
}

// runRdkCopier runs one instance of slot: a txn_copier.py process, which
// it SIGKILLs (kill) or stops with SIGTERM after life, unless the input is
// complete by then (it then runs until stop closes: SIGTERM).
func (w *workload) runRdkCopier(slot, instance int, life time.Duration, kill bool, stop <-chan struct{}) {
	wc := w.cfg
	name := fmt.Sprintf("r%d.%d", slot, instance)
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	cmd := exec.Command(wc.RdkPython, wc.RdkScript, "--bootstrap", strings.Join(w.kafkaAddrs, ","),
		"--input", wc.rdkInput(), "--output", wc.rdkOutput(), "--group", rdkCopierGroup,
		"--transactional-id", fmt.Sprintf("%s-%d", rdkCopierTxnID, slot),
		"--transaction-timeout-ms", ms(wc.TxnTimeout), "--session-timeout-ms", ms(copierSessionTimeout),
		"--max-batch", "50", "--pace-ms", "100")
	cmd.Args = append(cmd.Args, wc.Security.rdkArgs()...)
	proc, err := startCopierProcess(cmd, func(stdout io.Reader) { w.readRdkLines(name, stdout) })
	if err != nil {
		w.log.Warn("librdkafka copier: start", "copier", name, "err", err)
		return
	}
	w.rdk.mu.Lock()
	w.rdk.instances++
	w.rdk.mu.Unlock()
	term := func() {
		if !proc.term() {
			w.log.Warn("librdkafka copier did not stop on SIGTERM: killed", "copier", name)
		}
	}
	timer := time.NewTimer(life)
	defer timer.Stop()
	killed := false
	for done := false; !done; {
		select {
		case <-proc.exited:
			done = true
		case <-timer.C:
			if w.inputIsComplete() {
				continue // the last instances run until stop
			}
			if kill {
				w.log.Info("librdkafka copier killed (SIGKILL)", "copier", name, "after", life)
				proc.kill()
				killed = true
				w.rdk.mu.Lock()
				w.rdk.kills++
				w.rdk.mu.Unlock()
			} else {
				w.log.Info("librdkafka copier restarted (SIGTERM)", "copier", name, "after", life)
				term()
				w.rdk.mu.Lock()
				w.rdk.terms++
				w.rdk.mu.Unlock()
			}
			done = true
		case <-stop:
			term()
			done = true
		case <-w.ctx.Done():
			proc.kill()
			killed = true
			done = true
		}
	}
	if st := proc.failed(); st != nil && !killed {
		w.log.Warn("librdkafka copier exited", "copier", name, "status", st.String(), "stderr", proc.stderr.String())
	}
}

// readRdkLines records instance name's committed transactions from its
// stdout, until the end (a line cut by SIGKILL is dropped).
func (w *workload) readRdkLines(name string, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	w.rdk.mu.Lock()
	prev := time.Now()
	w.rdk.mu.Unlock()
	for sc.Scan() {
		now := time.Now()
		t, err := parseRdkLine(sc.Bytes())
		if err != nil {
			w.log.Warn("librdkafka copier: unreadable line", "copier", name, "line", sc.Text(), "err", err)
			continue
		}
		t.name = name
		// The commit was sent after the previous line was printed (or the
		// process started); a margin for the harness's reading of it.
		t.begin, t.end = prev.Add(-time.Second), now
		prev = now
		w.rdk.mu.Lock()
		w.rdk.txns = append(w.rdk.txns, t)
		w.rdk.lastLine = now
		w.rdk.mu.Unlock()
	}
}

// parseRdkLine parses one of txn_copier.py's JSON lines.
func parseRdkLine(b []byte) (rdkTxn, error) {
	var l rdkLine
	if err := json.Unmarshal(b, &l); err != nil {
		return rdkTxn{}, err
	}
	if l.Txn <= 0 {
		return rdkTxn{}, fmt.Errorf("no transaction number")
	}
	t := rdkTxn{n: l.Txn, copied: map[int32][2]int64{}}
	for p, r := range l.Copied {
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil || r[0] > r[1] {
			return rdkTxn{}, fmt.Errorf("bad copied range %q: %v", p, r)
		}
		t.copied[int32(n)] = r
	}
	return t, nil
}

// rdkCopyWrites builds the copy writes and the confirmed transactions
// from the copiers' lines (txns), the input writes and the read_committed
// reads of the input (valueAt: history partition and offset → value),
// as the file's comment says. The writes' Txn fields refer to the
// returned transactions, in order.
func rdkCopyWrites(wc WorkloadConfig, txns []rdkTxn, inputs []checker.Write, valueAt map[[2]int64]string, start, end time.Time) ([]checker.Txn, [][]checker.Write, []checker.Write) {
	keyOf := map[string]string{}
	for _, in := range inputs {
		keyOf[in.Value] = in.Key
	}
	done := map[string]bool{}
	var outTxns []checker.Txn
	var outWrites [][]checker.Write
	seq := map[string]int64{}
	for _, t := range txns {
		id := fmt.Sprintf("%s/%d", t.name, t.n)
		tx := checker.Txn{ID: id, Producer: t.name, Begin: t.begin, CommitInvoke: t.begin, Complete: t.end, Outcome: checker.TxnCommitted}
		var ws []checker.Write
		parts := make([]int32, 0, len(t.copied))
		for p := range t.copied {
			parts = append(parts, p)
		}
		slices.Sort(parts)
		for _, p := range parts {
			r := t.copied[p]
			log := wc.logOf(wc.rdkInput(), p)
			for o := r[0]; o <= r[1]; o++ {
				v, ok := valueAt[[2]int64{int64(log), o}]
				if !ok || done[v] {
					// Not a record read_committed returns (an aborted
					// one, a marker), or already in an earlier line
					// (its copy read twice is a duplicate).
					continue
				}
				done[v] = true
				ws = append(ws, checker.Write{Producer: t.name, Partition: wc.logOf(wc.rdkOutput(), p), Seq: seq[t.name], Key: keyOf[v],
					Value: "copy:" + v, Invoke: t.begin, Complete: t.end, Outcome: checker.Unknown,
					Err: "copied in a committed transaction; its offset is not reported", Txn: id, CopyOf: v})
				seq[t.name]++
			}
		}
		outTxns = append(outTxns, tx)
		outWrites = append(outWrites, ws)
	}
	// The copies no reported transaction holds are one producer's,
	// numbered in the order a copier writes them: the input's offset
	// order, partition by partition (not the order the input writes were
	// sent in: concurrent producers' writes land in either order). Input
	// records read_committed never returned are never copied; they come
	// last.
	at := make(map[string][2]int64, len(valueAt))
	for k, v := range valueAt {
		at[v] = k
	}
	var left []checker.Write
	for _, in := range inputs {
		if !done[in.Value] {
			left = append(left, in)
		}
	}
	slices.SortStableFunc(left, func(a, b checker.Write) int {
		pa, oka := at[a.Value]
		pb, okb := at[b.Value]
		switch {
		case oka && okb:
			return cmp.Or(cmp.Compare(pa[0], pb[0]), cmp.Compare(pa[1], pb[1]))
		case oka:
			return -1
		case okb:
			return 1
		}
		return 0
	})
	var rest []checker.Write
	for _, in := range left {
		_, p := wc.topicPartition(in.Partition)
		rest = append(rest, checker.Write{Producer: "rdk", Partition: wc.logOf(wc.rdkOutput(), p), Seq: seq["rdk"], Key: in.Key,
			Value: "copy:" + in.Value, Invoke: start, Complete: end, Outcome: checker.Unknown,
			Err: "no committed transaction of the copiers reported it", CopyOf: in.Value})
		seq["rdk"]++
	}
	return outTxns, outWrites, rest
}

// recordRdkCopies adds the copy writes and confirmed transactions to the
// history (after the final read, so that every input value read_committed
// returns is known). It returns the confirmed transactions and copies.
func (w *workload) recordRdkCopies() (txns, confirmed int) {
	wc := w.cfg
	in := map[int32]bool{}
	for p := int32(0); p < wc.Partitions; p++ {
		in[wc.logOf(wc.rdkInput(), p)] = true
	}
	valueAt := map[[2]int64]string{}
	var inputs []checker.Write
	w.rec.mu.Lock()
	seen := map[string]bool{}
	for _, rd := range w.rec.reads {
		if in[rd.Partition] && rd.Committed {
			valueAt[[2]int64{int64(rd.Partition), rd.Offset}] = rd.Value
			seen[rd.Value] = true
		}
	}
	for _, wr := range w.rec.writes {
		// The input records that exist for the copier: read by
		// read_committed (the final read reads every partition to its end).
		if in[wr.Partition] && wr.CopyOf == "" && seen[wr.Value] {
			inputs = append(inputs, wr)
			delete(seen, wr.Value)
		}
	}
	w.rec.mu.Unlock()
	w.rdk.mu.Lock()
	lines := slices.Clone(w.rdk.txns)
	start := w.rdk.started
	w.rdk.mu.Unlock()
	outTxns, outWrites, rest := rdkCopyWrites(wc, lines, inputs, valueAt, start, time.Now())
	for k, tx := range outTxns {
		ti := w.rec.beginTxn(tx)
		w.rec.commitInvoked(ti, tx.CommitInvoke)
		for _, cw := range outWrites[k] {
			i := w.rec.invoke(cw)
			w.rec.completeAs(i, cw.Complete, cw.Outcome, 0, cw.Err)
			confirmed++
		}
		w.rec.endTxn(ti, tx.Complete, checker.TxnCommitted, nil)
	}
	for _, cw := range rest {
		i := w.rec.invoke(cw)
		w.rec.completeAs(i, cw.Complete, cw.Outcome, 0, cw.Err)
	}
	return len(outTxns), confirmed
}

// rdkTally counts, for the run's summary, the librdkafka copier's share
// of what the checker's copy-not-exactly-once class judges (the checker
// judges every copier's input together): the input records below the
// group's final offsets, those above, and those whose copies visible to
// read_committed (distinct offsets) are not one below, none above.
func rdkTally(wc WorkloadConfig, h checker.History, ends map[int32]int64) (below, above, bad int) {
	in, out := map[int32]bool{}, map[int32]bool{}
	for p := int32(0); p < wc.Partitions; p++ {
		in[wc.logOf(wc.rdkInput(), p)] = true
		out[wc.logOf(wc.rdkOutput(), p)] = true
	}
	type pos struct {
		log int32
		off int64
	}
	inputAt := map[string]pos{}
	copies := map[string]map[pos]bool{}
	for _, rd := range h.Reads {
		switch {
		case !rd.Committed:
		case in[rd.Partition]:
			inputAt[rd.Value] = pos{rd.Partition, rd.Offset}
		case out[rd.Partition] && strings.HasPrefix(rd.Value, "copy:"):
			v := strings.TrimPrefix(rd.Value, "copy:")
			if copies[v] == nil {
				copies[v] = map[pos]bool{}
			}
			copies[v][pos{rd.Partition, rd.Offset}] = true
		}
	}
	for v, at := range inputAt {
		want := 0
		if at.off < ends[at.log] {
			want = 1
			below++
		} else {
			above++
		}
		if len(copies[v]) != want {
			bad++
		}
	}
	return below, above, bad
}
