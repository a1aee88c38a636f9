package auth

import (
	"fmt"
	"testing"
	"time"
)

var (
	named    = func(s string) QuotaName { return QuotaName{Name: s} }
	deflt    = QuotaName{Default: true}
	none     = QuotaName{}
	quotaT0  = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	produceQ = func(v float64) QuotaLimits { return QuotaLimits{QuotaProduce: v} }
)

// Kafka's precedence (KIP-55 / KIP-546): the most specific entity with a
// quota of the kind applies, each level tried in order.
func TestQuotaResolvePrecedence(t *testing.T) {
	order := []QuotaEntity{
		{named("alice"), named("app")}, {named("alice"), deflt}, {named("alice"), none},
		{deflt, named("app")}, {deflt, deflt}, {deflt, none},
		{none, named("app")}, {none, deflt},
	}
	// With the entities from i on configured, entity i applies.
	for i := range order {
		limits := map[QuotaEntity]QuotaLimits{}
		for j, e := range order[i:] {
			limits[e] = produceQ(float64(100 + i + j))
		}
		tab := NewQuotaTable(limits)
		e, l, _, ok := tab.Resolve("alice", "app", QuotaProduce)
		if !ok || e != order[i] || l != float64(100+i) {
			t.Errorf("level %d: got %+v %v %v, want %+v", i, e, l, ok, order[i])
		}
	}
	// Another kind's quota does not match.
	tab := NewQuotaTable(map[QuotaEntity]QuotaLimits{{named("alice"), none}: {QuotaFetch: 5}, {deflt, none}: produceQ(7)})
	if e, l, _, _ := tab.Resolve("alice", "app", QuotaProduce); e != (QuotaEntity{deflt, none}) || l != 7 {
		t.Errorf("produce: %+v %v, want the user default's 7", e, l)
	}
	// Other callers: no named match.
	if _, _, _, ok := tab.Resolve("", "", QuotaFetch); ok {
		t.Error("the empty user matched alice's fetch quota")
	}
	if _, _, _, ok := NewQuotaTable(nil).Resolve("alice", "app", QuotaProduce); ok {
		t.Error("an empty table applied a quota")
	}
	// A call without a client id matches only the client-id default.
	tab = NewQuotaTable(map[QuotaEntity]QuotaLimits{{none, named("")}: produceQ(1), {none, deflt}: produceQ(2)})
	if _, l, _, ok := tab.Resolve("bob", "", QuotaProduce); !ok || l != 2 {
		t.Errorf("no client id: %v %v", l, ok)
	}
}

// A quota on a default entity is each caller's own (Kafka's metric tags);
// a quota on a named user is shared by that user's clients.
func TestQuotaSensorsFollowTheMatchedEntity(t *testing.T) {
	tab := NewQuotaTable(map[QuotaEntity]QuotaLimits{{deflt, none}: produceQ(1), {named("alice"), none}: produceQ(1), {deflt, deflt}: {QuotaFetch: 1}})
	cases := []struct {
		user, client string
		kind         QuotaKind
		want         SensorKey
	}{
		{"bob", "x", QuotaProduce, SensorKey{User: "bob", Kind: QuotaProduce}},
		{"alice", "x", QuotaProduce, SensorKey{User: "alice", Kind: QuotaProduce}},
		{"bob", "x", QuotaFetch, SensorKey{User: "bob", ClientID: "x", Kind: QuotaFetch}},
	}
	for _, tc := range cases {
		if _, _, s, _ := tab.Resolve(tc.user, tc.client, tc.kind); s != tc.want {
			t.Errorf("%s/%s %v: sensor %+v, want %+v", tc.user, tc.client, tc.kind, s, tc.want)
		}
	}
	m := NewQuotaManager(QuotaConfig{})
	m.SetTable(tab)
	// bob's burst does not throttle carol under the same default.
	m.Record(quotaT0, "bob", "", QuotaProduce, 1000)
	if th := m.Record(quotaT0, "carol", "", QuotaProduce, 1); th.Time != 0 {
		t.Errorf("carol throttled %v by bob's usage", th.Time)
	}
}

// The throttle time is the debt over the quota: a caller's credit is one
// sample window of its quota, every value is charged to it, and below
// zero the caller is held until the quota has paid the debt back
// (Kafka's TokenBucket, KIP-599), capped at samples × window.
func TestQuotaThrottleTime(t *testing.T) {
	cfg := QuotaConfig{Samples: 11, SampleWindow: time.Second}
	cases := []struct {
		name  string
		bytes []float64 // one record per second from quotaT0
		want  time.Duration
	}{
		{name: "within the credit", bytes: []float64{500}, want: 0},
		{name: "the whole credit", bytes: []float64{1000}, want: 0},
		// 1000 B of credit, 2000 B sent: 1000 B owed at 1000 B/s.
		{name: "twice the credit", bytes: []float64{2000}, want: time.Second},
		{name: "capped", bytes: []float64{1e9}, want: 11 * time.Second},
		// 500 B owed after the first second, then 500 B more each
		// second: 5500 B after the eleventh.
		{name: "sustained 1.5x", bytes: []float64{1500, 1500, 1500, 1500, 1500, 1500, 1500, 1500, 1500, 1500, 1500},
			want: 5500 * time.Millisecond},
		// The debt is paid back at the quota: 1000 B owed, 2 s later
		// the credit is full again.
		{name: "paid back", bytes: []float64{2000, 0, 999}, want: 0},
		// A debt beyond the cap is not forgiven: 1e9 B owed, a second
		// later still (nearly) as much.
		{name: "a capped debt stays", bytes: []float64{1e9, 1}, want: 11 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := NewQuotaManager(cfg)
			m.SetTable(NewQuotaTable(map[QuotaEntity]QuotaLimits{{named("alice"), none}: produceQ(1000)}))
			var th Throttle
			for i, b := range tc.bytes {
				th = m.Record(quotaT0.Add(time.Duration(i)*time.Second), "alice", "", QuotaProduce, b)
			}
			if !th.Limited || th.Limit != 1000 {
				t.Fatalf("throttle %+v: no quota applied", th)
			}
			if d := th.Time - tc.want; d < -time.Millisecond || d > time.Millisecond {
				t.Errorf("throttle %v (debt %.0f), want %v", th.Time, th.Debt, tc.want)
			}
		})
	}
}

// The debt is the sensor's, not the request's: a request of another
// stream of the same user, recorded while the user is throttled, is held
// until the whole debt is paid — after the first, not alongside it.
func TestQuotaDebtHoldsEveryStreamOfTheSensor(t *testing.T) {
	m := NewQuotaManager(QuotaConfig{})
	m.SetTable(NewQuotaTable(map[QuotaEntity]QuotaLimits{{named("alice"), none}: produceQ(1000)}))
	first := m.Record(quotaT0, "alice", "stream-1", QuotaProduce, 3000)
	second := m.Record(quotaT0.Add(time.Millisecond), "alice", "stream-2", QuotaProduce, 1000)
	if first.Time != 2*time.Second || second.Time < first.Time+time.Second-2*time.Millisecond {
		t.Errorf("first held %v, second %v: want 2 s, then 3 s from the start", first.Time, second.Time)
	}
}

// Usage is paid back at the quota's rate, however the debt was made.
func TestQuotaDebtIsPaidBackAtTheQuota(t *testing.T) {
	m := NewQuotaManager(QuotaConfig{Samples: 3, SampleWindow: 100 * time.Millisecond})
	m.SetTable(NewQuotaTable(map[QuotaEntity]QuotaLimits{{none, deflt}: produceQ(100)}))
	// 10 B of credit: 990 B owed, 9.9 s at 100 B/s (held 0.3 s at most).
	if th := m.Record(quotaT0, "", "c", QuotaProduce, 1000); th.Time != 300*time.Millisecond || th.Debt != 990 {
		t.Fatalf("1000 B against 100 B/s: %+v", th)
	}
	if th := m.Record(quotaT0.Add(5*time.Second), "", "c", QuotaProduce, 1); th.Time == 0 {
		t.Errorf("5 s later, half the debt unpaid: not throttled (%+v)", th)
	}
	if th := m.Record(quotaT0.Add(11*time.Second), "", "c", QuotaProduce, 1); th.Time != 0 {
		t.Errorf("11 s later: %+v", th)
	}
}

// A producer that waits out each throttle, on one stream or several of
// the same quota, is held to its quota whatever its request size: over
// 30 s of simulated time it writes at most quota × time plus its credit
// (one window) and one request per stream (served before it is held),
// and not much less. (So long as a request from every stream is within
// MaxThrottle of the quota: a throttle is capped, so beyond that each
// stream gets a request through per MaxThrottle.)
func TestQuotaHoldsAProducerThatHonoursThrottle(t *testing.T) {
	const quota = 1 << 20
	for _, tc := range []struct {
		size    float64
		streams int
	}{{16 << 10, 1}, {16 << 10, 4}, {64 << 10, 1}, {64 << 10, 4}, {1 << 20, 1}, {1 << 20, 4}, {4 << 20, 1}, {4 << 20, 2}} {
		size, streams := tc.size, tc.streams
		t.Run(fmt.Sprintf("size=%.0fKiB,streams=%d", size/1024, streams), func(t *testing.T) {
			m := NewQuotaManager(QuotaConfig{})
			m.SetTable(NewQuotaTable(map[QuotaEntity]QuotaLimits{{named("p"), none}: produceQ(quota)}))
			// next[i] is when stream i sends its next request: 1 ms
			// after the last answer, or once the throttle has passed.
			next := make([]time.Time, streams)
			for i := range next {
				next[i] = quotaT0.Add(time.Duration(i) * time.Microsecond)
			}
			const run = 30 * time.Second
			total := 0.0
			for {
				i := 0
				for j := range next {
					if next[j].Before(next[i]) {
						i = j
					}
				}
				now := next[i]
				if now.Sub(quotaT0) >= run {
					break
				}
				th := m.Record(now, "p", "", QuotaProduce, size)
				total += size
				next[i] = now.Add(max(time.Millisecond, th.Time))
			}
			hi := quota*run.Seconds() + quota + float64(streams)*size
			if total > hi || total < 0.95*quota*run.Seconds() {
				t.Errorf("%.0f B in %v: %.3f × the quota; at most %.3f", total, run, total/quota/run.Seconds(), hi/quota/run.Seconds())
			}
		})
	}
}

func TestQuotaRequestPercentage(t *testing.T) {
	m := NewQuotaManager(QuotaConfig{})
	m.SetTable(NewQuotaTable(map[QuotaEntity]QuotaLimits{{named("a"), none}: {QuotaRequest: 10}}))
	// 10 % of a thread: 0.1 s of handling in credit, earned back at
	// 0.1 s per second. 0.6 s of handling owes 0.5 s: 5 s.
	th := m.Record(quotaT0, "a", "", QuotaRequest, 0.6)
	if th.Limit != 10 || th.Debt < 0.499 || th.Debt > 0.501 || th.Time < 4999*time.Millisecond || th.Time > 5001*time.Millisecond {
		t.Errorf("%+v", th)
	}
}

// Callers idle for a whole window are forgotten.
func TestQuotaSensorsAreSwept(t *testing.T) {
	m := NewQuotaManager(QuotaConfig{Samples: 2, SampleWindow: time.Second})
	m.SetTable(NewQuotaTable(map[QuotaEntity]QuotaLimits{{deflt, none}: produceQ(1)}))
	for i := range 100 {
		m.Record(quotaT0, fmt.Sprint(i), "", QuotaProduce, 1)
	}
	m.Record(quotaT0.Add(time.Minute), "last", "", QuotaProduce, 1)
	if n := len(m.sensors); n != 1 {
		t.Errorf("%d sensors after a minute idle, want 1", n)
	}
}
