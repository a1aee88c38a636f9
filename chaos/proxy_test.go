package chaos

import (
	"bufio"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/loopback"
)

// echoServer answers every line on TCP and every UDP packet with itself.
func echoServer(t *testing.T) (addr string, udp <-chan []byte) {
	t.Helper()
	addrs, err := loopback.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadBytes('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(line); err != nil {
						return
					}
				}
			}()
		}
	}()
	got := make(chan []byte, 16)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			got <- append([]byte(nil), buf[:n]...)
		}
	}()
	return addrs[0], got
}

func roundTrip(c net.Conn, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, err
}

func TestLinkForwardsCutsAndDelays(t *testing.T) {
	target, udp := echoServer(t)
	l, err := newLink(1, 2, map[string]string{"gossip": target}, map[string]bool{"gossip": true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	proxy := l.Port("gossip")

	// Healthy: TCP and UDP pass.
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "hello"); err != nil || got != "hello\n" {
		t.Fatalf("through the link: %q, %v", got, err)
	}
	u, err := net.Dial("udp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, err := u.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-udp:
		if string(p) != "ping" {
			t.Fatalf("udp got %q", p)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("udp packet not forwarded")
	}

	// Cut: the open connection is reset, a new one gets nothing through,
	// UDP is dropped.
	l.Cut(true)
	if _, err := roundTrip(c, "lost"); err == nil {
		t.Fatal("an open connection survived the cut")
	}
	if c2, err := net.Dial("tcp", proxy); err == nil {
		if _, err := roundTrip(c2, "lost"); err == nil {
			t.Fatal("a new connection got through a cut link")
		}
		c2.Close()
	}
	if _, err := u.Write([]byte("dropped")); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-udp:
		t.Fatalf("udp packet %q crossed a cut link", p)
	case <-time.After(300 * time.Millisecond): // nothing may arrive in this window
	}

	// Healed with latency: data passes, no sooner than the latency (one
	// way each: the echo comes back through the same link).
	l.Cut(false)
	l.SetLatency(150 * time.Millisecond)
	c3, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	start := time.Now()
	if got, err := roundTrip(c3, "slow"); err != nil || got != "slow\n" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("round trip took %v through a link with 150ms latency each way", d)
	}
}

func TestScheduleIsReproducibleFromItsSeed(t *testing.T) {
	cfg := ScheduleConfig{Seed: 7, Duration: 10 * time.Minute, Partitions: 3, FaultMin: time.Second, FaultMax: 5 * time.Second,
		GapMin: time.Second, GapMax: 3 * time.Second, RequestTimeout: 2 * time.Second}
	a, b := NewSchedule(cfg), NewSchedule(cfg)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("schedules of %d and %d faults", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("fault %d differs: %v vs %v", i, a[i], b[i])
		}
	}
	cfg.Seed = 8
	c := NewSchedule(cfg)
	same := len(c) == len(a)
	for i := 0; same && i < len(a); i++ {
		same = a[i] == c[i]
	}
	if same {
		t.Fatal("seeds 7 and 8 gave the same schedule")
	}
	kinds := map[Kind]bool{}
	for i, f := range a {
		kinds[f.Kind] = true
		if i > 0 && f.At < a[i-1].At+a[i-1].Duration {
			t.Fatalf("fault %d (%v) starts before fault %d ends", i, f, i-1)
		}
		if f.Kind == DelayResponses && f.Latency < cfg.RequestTimeout {
			t.Fatalf("delay %v below the request timeout %v", f.Latency, cfg.RequestTimeout)
		}
	}
	if want := len(Kinds) - len(phaseTargets); len(kinds) != want {
		t.Fatalf("a 10-minute random schedule without transactions used only %v (want every kind but the phase kinds)", kinds)
	}
	cfg.Transactions = true
	kinds = map[Kind]bool{}
	for _, f := range NewSchedule(cfg) {
		kinds[f.Kind] = true
	}
	if len(kinds) != len(Kinds) {
		t.Fatalf("a 10-minute random transactional schedule used only %v", kinds)
	}
}

func TestScriptCyclesKindsAndTargets(t *testing.T) {
	script, err := ParseScript("kill:leader, partition ,pause:controller")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSchedule(ScheduleConfig{Seed: 1, Duration: time.Minute, Partitions: 1, Script: script,
		FaultMin: time.Second, FaultMax: 2 * time.Second, GapMin: time.Second, GapMax: 2 * time.Second})
	want := []Kind{Kill, Partition, Pause}
	for i, f := range s {
		if f.Kind != want[i%3] {
			t.Fatalf("fault %d is %s, want %s", i, f.Kind, want[i%3])
		}
		if i%3 == 0 && f.Target != Leader || i%3 == 2 && f.Target != Controller {
			t.Fatalf("fault %d target %s", i, f.Target)
		}
	}
	for _, bad := range []string{"explode", "kill:nobody"} {
		if _, err := ParseScript(bad); err == nil {
			t.Errorf("ParseScript(%q) accepted", bad)
		}
	}
}

func TestScriptNamesTheRPCOfAResponseFault(t *testing.T) {
	script, err := ParseScript("drop-responses:leader:WriteTxnMarkers,kill:coordinator,delay-responses:coordinator:AddPartitionsToTxn")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSchedule(ScheduleConfig{Seed: 1, Duration: time.Minute, Partitions: 1, Script: script, Transactions: true,
		FaultMin: time.Second, FaultMax: 2 * time.Second, GapMin: time.Second, GapMax: 2 * time.Second, RequestTimeout: time.Second})
	if len(s) < 3 {
		t.Fatalf("schedule of %d faults", len(s))
	}
	if s[0].Method != "/sluice.internal.v1.TxnBroker/WriteTxnMarkers" || s[0].Target != Leader {
		t.Errorf("fault 0 = %v", s[0])
	}
	if s[1].Kind != Kill || s[1].Target != Coordinator {
		t.Errorf("fault 1 = %v", s[1])
	}
	if s[2].Method != "/sluice.internal.v1.TxnBroker/AddPartitionsToTxn" || s[2].Kind != DelayResponses {
		t.Errorf("fault 2 = %v", s[2])
	}
	for _, bad := range []string{"kill:leader:WriteTxnMarkers", "drop-responses:leader:NoSuchRPC"} {
		if _, err := ParseScript(bad); err == nil {
			t.Errorf("ParseScript(%q) accepted", bad)
		}
	}
}

func TestRandomScheduleWithoutTransactionsNeverTargetsACoordinator(t *testing.T) {
	cfg := ScheduleConfig{Seed: 3, Duration: 10 * time.Minute, Partitions: 3, FaultMin: time.Second, FaultMax: 2 * time.Second,
		GapMin: time.Second, GapMax: 2 * time.Second, RequestTimeout: time.Second}
	for _, f := range NewSchedule(cfg) {
		if f.Target == Coordinator || slices.Contains(txnMethods, f.Method) {
			t.Fatalf("transaction fault without transactions: %v", f)
		}
	}
	cfg.Transactions = true
	coord, txnRPC := false, false
	for _, f := range NewSchedule(cfg) {
		coord = coord || f.Target == Coordinator
		txnRPC = txnRPC || slices.Contains(txnMethods, f.Method)
	}
	if !coord || !txnRPC {
		t.Errorf("a 10-minute transactional schedule: coordinator target %v, transaction RPC %v", coord, txnRPC)
	}
}

// The issue-16 kinds: a phase kind is a kind of its own with its target
// built in, and delay-requests names its RPC and holds it past the fault
// and the client's request timeout.
func TestScriptPhaseKindsAndHeldRequests(t *testing.T) {
	script, err := ParseScript("kill:coordinator@ongoing,kill:coordinator@prepare,kill:leader@markers,delay-requests:coordinator:EndTxn,delay-requests:leader:Produce")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSchedule(ScheduleConfig{Seed: 1, Duration: time.Minute, Partitions: 3, Script: script, Transactions: true,
		FaultMin: time.Second, FaultMax: 2 * time.Second, GapMin: time.Second, GapMax: 2 * time.Second, RequestTimeout: time.Second})
	if len(s) < 5 {
		t.Fatalf("schedule of %d faults", len(s))
	}
	want := []struct {
		kind   Kind
		target Target
	}{{KillCoordinatorOngoing, Coordinator}, {KillCoordinatorPrepare, Coordinator}, {KillLeaderMarkers, Leader}, {DelayRequests, Coordinator}, {DelayRequests, Leader}}
	for i, w := range want {
		if s[i].Kind != w.kind || s[i].Target != w.target {
			t.Errorf("fault %d = %v, want %s on %s", i, s[i], w.kind, w.target)
		}
		if !s[i].Kind.kills() && s[i].Kind.phase() != "" {
			t.Errorf("phase kind %s does not kill", s[i].Kind)
		}
	}
	for _, i := range []int{3, 4} {
		if s[i].Latency <= s[i].Duration+time.Second {
			t.Errorf("fault %d holds its requests %v: not past the fault (%v) and the request timeout", i, s[i].Latency, s[i].Duration)
		}
	}
	if s[3].Method != "/sluice.v1.Transactions/EndTxn" || s[4].Method != "/sluice.v1.Log/Produce" {
		t.Errorf("held RPCs %s, %s", s[3].Method, s[4].Method)
	}
	for _, bad := range []string{"kill:coordinator@nowhere", "kill:leader@markers:EndTxn", "pause:leader:EndTxn"} {
		if _, err := ParseScript(bad); err == nil {
			t.Errorf("ParseScript(%q) accepted", bad)
		}
	}
}

// The phase hook delivers the first event of the armed phase only, once,
// and never blocks the workload.
func TestPhaseHookDeliversTheArmedPhaseOnce(t *testing.T) {
	var h phaseHook
	h.fire(PhaseEvent{Phase: PhaseOngoing}) // nobody waits: dropped
	events := h.arm(PhasePrepare)
	if !h.waiting(PhasePrepare) || h.waiting(PhaseOngoing) {
		t.Fatal("waiting() does not report the armed phase")
	}
	h.fire(PhaseEvent{Phase: PhaseOngoing, Txn: "other"})
	h.fire(PhaseEvent{Phase: PhasePrepare, Txn: "t1.1/3", TransactionalID: "chaos-txn-1"})
	h.fire(PhaseEvent{Phase: PhasePrepare, Txn: "t1.1/4"}) // disarmed: dropped, not blocking
	select {
	case ev := <-events:
		if ev.Txn != "t1.1/3" || ev.TransactionalID != "chaos-txn-1" || ev.At.IsZero() {
			t.Fatalf("event %+v", ev)
		}
	default:
		t.Fatal("no event delivered")
	}
	select {
	case ev := <-events:
		t.Fatalf("second event delivered: %+v", ev)
	default:
	}
	var nilHook *phaseHook
	nilHook.fire(PhaseEvent{Phase: PhaseMarkers}) // a workload without faults
}
