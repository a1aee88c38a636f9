package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/chaos/checker"
)

// The group copier's members as processes of their own (the default):
// each instance of a member slot is this same executable started with
// copierMemberEnv set, which runs runGroupCopier and reports every change
// of its history as a JSON line on stdout (memberEvent); the harness
// replays the lines into its recorder. One instance in three is killed
// with SIGKILL at a random moment — a real crash: whatever it had in
// flight (writes, a transaction, a commit) is left as it was, its consumer
// leaves the group only by its session timeout, and the next instance's
// InitTransactions aborts what it left open. Others end after
// copierRestartEvery transactions by themselves, or on SIGTERM when the
// run stops (they finish the transaction in progress and leave the group).

// copierMemberEnv holds the member's configuration (JSON memberConfig).
const copierMemberEnv = "SLUICE_CHAOS_COPIER_MEMBER"

// memberConfig is what a member process needs.
type memberConfig struct {
	Addrs    []string
	Workload WorkloadConfig
	Slot     int
	Instance int
	Seed     uint64
}

// memberEvent is one change of a member's history: E says which, I is the
// write's or transaction's index in the member's own history.
type memberEvent struct {
	E          string             `json:"e"` // invoke, complete, begin, commit, end, fence, caught
	I          int                `json:"i"`
	Write      *checker.Write     `json:"w,omitempty"`
	Txn        *checker.Txn       `json:"t,omitempty"`
	At         time.Time          `json:"at,omitzero"`
	Outcome    checker.Outcome    `json:"o,omitempty"`
	TxnOutcome checker.TxnOutcome `json:"to,omitempty"`
	Offset     int64              `json:"off,omitempty"`
	Err        string             `json:"err,omitempty"`
	Fence      string             `json:"fence,omitempty"`
	Partition  int32              `json:"p,omitempty"`
	Position   int64              `json:"pos,omitempty"`
}

// RunCopierMemberIfAsked runs a copier member and exits the process when
// copierMemberEnv is set; otherwise it returns at once. The chaos
// program's main and the package's TestMain call it first.
func RunCopierMemberIfAsked() {
	raw, ok := os.LookupEnv(copierMemberEnv)
	if !ok {
		return
	}
	var mc memberConfig
	if err := json.Unmarshal([]byte(raw), &mc); err != nil {
		fmt.Fprintf(os.Stderr, "copier member: bad %s: %v\n", copierMemberEnv, err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	var outMu sync.Mutex
	emit := func(ev memberEvent) {
		outMu.Lock()
		defer outMu.Unlock()
		_ = enc.Encode(ev)
		_ = out.Flush() // a SIGKILL must not lose what was reported before it
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &workload{cfg: mc.Workload, addrs: mc.Addrs, rec: &recorder{emit: emit}, ctx: ctx, cancel: cancel,
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	stop := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		close(stop)
	}()
	caught := &caughtUp{at: map[int32]int64{}, emit: emit}
	rng := rand.New(rand.NewPCG(mc.Seed, uint64(mc.Slot)<<32|uint64(mc.Instance)))
	w.runGroupCopier(mc.Slot, mc.Instance, rng, stop, caught, false)
	os.Exit(0)
}

// memberFate is what the harness does to one member process: SIGKILL it
// killAfter after its start, or SIGSTOP it pauseAfter after its start for
// zombieHold and then SIGCONT it (zero: neither).
type memberFate struct {
	killAfter, pauseAfter time.Duration
}

// zombieHold is how long a member process stays stopped: longer than its
// transaction timeout (plus the coordinator's abort scan) and its group
// session timeout, so that when it resumes its open transaction has been
// aborted by the coordinator and its group membership has expired: a
// zombie, whose late TxnOffsetCommit, produce and EndTxn must all be
// refused.
func zombieHold(wc WorkloadConfig) time.Duration {
	return max(wc.TxnTimeout, copierSessionTimeout) + txnAbortScan + 2*time.Second
}

// zombieGrace is how long a resumed zombie may run on before it is
// SIGKILLed (the slot's next instance waits for it).
const zombieGrace = 10 * time.Second

// runGroupMemberProcess runs one member instance as a process and replays
// its history; it does to the process what fate says, and stops it with
// SIGTERM when stop closes. It returns when the process has exited.
func (w *workload) runGroupMemberProcess(slot, instance int, seed uint64, fate memberFate, stop <-chan struct{}, caught *caughtUp) {
	exe, err := os.Executable()
	if err != nil {
		w.log.Warn("copier member: no executable", "err", err)
		w.pace(time.Second)
		return
	}
	raw, err := json.Marshal(memberConfig{Addrs: w.addrs, Workload: w.cfg, Slot: slot, Instance: instance, Seed: seed})
	if err != nil {
		return
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), copierMemberEnv+"="+string(raw))
	proc, err := startCopierProcess(cmd, func(stdout io.Reader) { w.replayMember(stdout, caught) })
	if err != nil {
		w.log.Warn("copier member: start", "err", err)
		w.pace(time.Second)
		return
	}
	name := fmt.Sprintf("g%d.%d", slot, instance)
	timer := func(d time.Duration) (<-chan time.Time, func() bool) {
		if d <= 0 {
			return nil, func() bool { return false }
		}
		t := time.NewTimer(d)
		return t.C, t.Stop
	}
	kill, stopKill := timer(fate.killAfter)
	defer stopKill()
	pause, stopPause := timer(fate.pauseAfter)
	defer stopPause()
	var resume <-chan time.Time
	var resumedAt time.Time
	paused, killed, zombie := false, fate.killAfter > 0, false
	cont := func() {
		if paused {
			_ = proc.signal(sigCont)
			paused = false
		}
	}
	for done := false; !done; {
		select {
		case <-proc.exited:
			done = true
		case <-kill:
			if zombie {
				w.log.Info("group copier zombie still running: killed (SIGKILL)", "copier", name, "after", zombieGrace)
			} else {
				w.log.Info("group copier member killed (SIGKILL)", "copier", name, "after", fate.killAfter)
				w.memberKills.Add(1)
			}
			proc.kill() // a stopped process dies too
			done = true
		case <-pause:
			hold := zombieHold(w.cfg)
			if err := proc.signal(sigStop); err != nil {
				continue // exited meanwhile
			}
			paused = true
			w.memberPauses.Add(1)
			w.log.Info("group copier member paused (SIGSTOP): a zombie when resumed", "copier", name, "after", fate.pauseAfter, "for", hold)
			var stopResume func() bool
			resume, stopResume = timer(hold)
			defer stopResume()
		case <-resume:
			resume = nil
			cont()
			resumedAt = time.Now()
			w.log.Info("group copier member resumed (SIGCONT) as a zombie: its transaction timed out, its membership expired", "copier", name)
			// It runs on as it will (fenced, it fails or rejoins), but not
			// for ever: the slot's next instance waits for it.
			kill, stopKill = timer(zombieGrace)
			defer stopKill()
			killed, zombie = true, true
		case <-stop:
			cont()
			proc.term()
			done = true
		case <-w.ctx.Done():
			proc.kill()
			done = true
		}
	}
	if zombie {
		// What the zombie was told once it resumed (its warnings).
		w.log.Info("group copier zombie exited", "copier", name, "status", cmd.ProcessState.String(), "stderr", proc.stderr.String(),
			"transactions_ended_after_resume", w.rec.txnsEndedAfter(name, resumedAt))
	}
	if st := proc.failed(); st != nil && !killed {
		w.log.Warn("copier member exited", "copier", name, "status", st.String(), "stderr", proc.stderr.String())
	}
}

// replayMember reads a member's events into the recorder: the member's
// own write and transaction indexes are mapped to the recorder's.
func (w *workload) replayMember(r io.Reader, caught *caughtUp) {
	writes, txns := map[int]int{}, map[int]int{}
	dec := json.NewDecoder(r)
	for {
		var ev memberEvent
		if err := dec.Decode(&ev); err != nil {
			return // the end, or a line cut by SIGKILL
		}
		switch ev.E {
		case "invoke":
			if ev.Write != nil {
				writes[ev.I] = w.rec.invoke(*ev.Write)
			}
		case "complete":
			if i, ok := writes[ev.I]; ok {
				w.rec.completeAs(i, ev.At, ev.Outcome, ev.Offset, ev.Err)
			}
		case "begin":
			if ev.Txn != nil {
				txns[ev.I] = w.rec.beginTxn(*ev.Txn)
			}
		case "commit":
			if i, ok := txns[ev.I]; ok {
				w.rec.commitInvoked(i, ev.At)
			}
		case "end":
			if i, ok := txns[ev.I]; ok {
				w.rec.endTxnAs(i, ev.At, ev.TxnOutcome, ev.Err)
			}
		case "fence":
			w.rec.fenceText(ev.Fence)
		case "caught":
			caught.set(ev.Partition, ev.Position)
		}
	}
}

// completeAs is complete with the outcome already classified.
func (r *recorder) completeAs(i int, now time.Time, o checker.Outcome, offset int64, errText string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := &r.writes[i]
	w.Complete, w.Outcome, w.Err = now, o, errText
	if o == checker.OK {
		w.Offset = offset
	}
}

// endTxnAs is endTxn with the error as text.
func (r *recorder) endTxnAs(i int, now time.Time, o checker.TxnOutcome, errText string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := &r.txns[i]
	t.Complete, t.Outcome, t.Err = now, o, errText
}

// fenceText records a fence a member reported.
func (r *recorder) fenceText(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fences = append(r.fences, s)
}

// txnsEndedAfter describes producer's transactions that ended after t
// (or are still open): what a resumed zombie was told.
func (r *recorder) txnsEndedAfter(producer string, t time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, x := range r.txns {
		if x.Producer != producer || !x.Complete.IsZero() && x.Complete.Before(t) {
			continue
		}
		d := fmt.Sprintf("%s %s", x.ID, x.Outcome)
		if x.Complete.IsZero() {
			d = x.ID + " open"
		}
		if x.Err != "" {
			d += ": " + x.Err
		}
		out = append(out, d)
	}
	return out
}
