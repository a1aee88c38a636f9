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

// The throttle time is (rate − quota) / quota × window, the window at
// least (samples − 1) sample windows, capped at samples × window.
func TestQuotaThrottleTime(t *testing.T) {
	cfg := QuotaConfig{Samples: 11, SampleWindow: time.Second}
	cases := []struct {
		name  string
		bytes []float64 // one record per second from quotaT0
		want  time.Duration
	}{
		{name: "under the quota", bytes: []float64{5000}, want: 0},
		{name: "at the quota", bytes: []float64{10_000}, want: 0},
		// 20,000 B over the 10 s floor = 2000 B/s against 1000: 10 s.
		{name: "twice the quota", bytes: []float64{20_000}, want: 10 * time.Second},
		{name: "just over", bytes: []float64{11_000}, want: time.Second},
		{name: "capped", bytes: []float64{1e9}, want: 11 * time.Second},
		// 11 records of 1500 B over 11 s... the last second's sample
		// started 10 s after the first: 16,500 B / 10 s = 1650 B/s.
		{name: "sustained 1.5x", bytes: []float64{1500, 1500, 1500, 1500, 1500, 1500, 1500, 1500, 1500, 1500, 1500},
			want: 6500 * time.Millisecond},
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
				t.Errorf("throttle %v (rate %.0f), want %v", th.Time, th.Rate, tc.want)
			}
		})
	}
}

// Usage older than the whole window no longer counts.
func TestQuotaUsageExpires(t *testing.T) {
	m := NewQuotaManager(QuotaConfig{Samples: 3, SampleWindow: 100 * time.Millisecond})
	m.SetTable(NewQuotaTable(map[QuotaEntity]QuotaLimits{{none, deflt}: produceQ(100)}))
	if th := m.Record(quotaT0, "", "c", QuotaProduce, 1000); th.Time == 0 {
		t.Fatal("1000 B in 0.2 s against 100 B/s not throttled")
	}
	if th := m.Record(quotaT0.Add(time.Second), "", "c", QuotaProduce, 1); th.Time != 0 || th.Rate > 10 {
		t.Errorf("a second later: %+v", th)
	}
}

// A producer that waits out each throttle is held to its quota: over a
// minute of simulated time it writes within a few percent of quota × time
// (plus the first window's burst, as in Kafka).
func TestQuotaHoldsAProducerThatHonoursThrottle(t *testing.T) {
	m := NewQuotaManager(QuotaConfig{})
	const quota = 200 * 1024.0
	m.SetTable(NewQuotaTable(map[QuotaEntity]QuotaLimits{{named("p"), none}: produceQ(quota)}))
	now, total := quotaT0, 0.0
	for now.Sub(quotaT0) < time.Minute {
		th := m.Record(now, "p", "", QuotaProduce, 64*1024)
		total += 64 * 1024
		now = now.Add(time.Millisecond + th.Time)
	}
	secs := now.Sub(quotaT0).Seconds()
	if got, hi := total/secs, quota*(1+10/secs)*1.05; got > hi || got < quota*0.9 {
		t.Errorf("achieved %.0f B/s over %.0f s, quota %.0f (bound %.0f)", got, secs, quota, hi)
	}
}

func TestQuotaRequestPercentage(t *testing.T) {
	m := NewQuotaManager(QuotaConfig{})
	m.SetTable(NewQuotaTable(map[QuotaEntity]QuotaLimits{{named("a"), none}: {QuotaRequest: 10}}))
	// 2 s of handling over the 10 s floor is 20 % of a thread, twice 10 %.
	th := m.Record(quotaT0, "a", "", QuotaRequest, 2)
	if th.Rate != 20 || th.Limit != 10 || th.Time != 10*time.Second {
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
