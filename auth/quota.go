package auth

import (
	"sync"
	"time"
)

// Client quotas (issue 33; Kafka's ClientQuotaManager, KIP-13, KIP-124,
// KIP-546), the broker's side: which quota applies to a caller, what it
// owes, and how long to throttle it. Pure logic: time is passed
// in, nothing here sleeps; the door (package api) delays its answer by
// the throttle time returned and reports it in throttle_time_ms.
//
// Each broker enforces the quotas on its own traffic, as in Kafka: a
// producer_byte_rate of 1 MiB/s lets a client write 1 MiB/s to each
// broker it produces to.

// QuotaKind is what a quota measures.
type QuotaKind int

// The kinds of quota, one per key of the metadata's quotas.
const (
	// QuotaProduce is producer_byte_rate: bytes of produced batches per
	// second.
	QuotaProduce QuotaKind = iota
	// QuotaFetch is consumer_byte_rate: bytes of fetched batches per
	// second.
	QuotaFetch
	// QuotaRequest is request_percentage: time handling requests, in
	// percent of one thread (Kafka's request quota, KIP-124).
	QuotaRequest
	numQuotaKinds
)

// String is the kind's name in metrics: produce, fetch, request.
func (k QuotaKind) String() string {
	switch k {
	case QuotaProduce:
		return "produce"
	case QuotaFetch:
		return "fetch"
	case QuotaRequest:
		return "request"
	}
	return "unknown"
}

// QuotaName is one component of a QuotaEntity: a name, or the default of
// its type; the zero value is the component's absence.
type QuotaName struct {
	Name    string
	Default bool
}

func (n QuotaName) present() bool { return n.Name != "" || n.Default }

// QuotaEntity is what a quota is set on: a user (a principal's name),
// a client id, or both.
type QuotaEntity struct {
	User, ClientID QuotaName
}

// QuotaLimits are an entity's quotas; 0 is no quota of that kind.
type QuotaLimits [numQuotaKinds]float64

// QuotaTable is the quotas in force, indexed for Resolve. Immutable once
// built: safe for concurrent reads.
type QuotaTable struct {
	limits map[QuotaEntity]QuotaLimits
}

// NewQuotaTable indexes the quotas (the metadata's, by entity). The map
// is the table's.
func NewQuotaTable(limits map[QuotaEntity]QuotaLimits) *QuotaTable {
	if limits == nil {
		limits = map[QuotaEntity]QuotaLimits{}
	}
	return &QuotaTable{limits: limits}
}

// Len is the number of entities with a quota.
func (t *QuotaTable) Len() int {
	if t == nil {
		return 0
	}
	return len(t.limits)
}

// Has reports whether any entity has a quota of kind.
func (t *QuotaTable) Has(kind QuotaKind) bool {
	if t == nil {
		return false
	}
	for _, l := range t.limits {
		if l[kind] > 0 {
			return true
		}
	}
	return false
}

// precedence lists the entities that may hold a caller's quota, most
// specific first (Kafka's order, docs/security.md):
//
//	/users/U/clients/C, /users/U/clients/<default>, /users/U,
//	/users/<default>/clients/C, /users/<default>/clients/<default>,
//	/users/<default>, /clients/C, /clients/<default>
func precedence(user, clientID string) [8]QuotaEntity {
	u, ud := QuotaName{Name: user}, QuotaName{Default: true}
	c, cd := QuotaName{Name: clientID}, QuotaName{Default: true}
	if user == "" {
		u = QuotaName{} // no named user matches the empty name
	}
	if clientID == "" {
		c = QuotaName{}
	}
	return [8]QuotaEntity{
		{u, c}, {u, cd}, {u, QuotaName{}},
		{ud, c}, {ud, cd}, {ud, QuotaName{}},
		{QuotaName{}, c}, {QuotaName{}, cd},
	}
}

// Resolve returns the entity whose quota of kind applies to the caller
// user (its principal's name) with clientID, the quota, and the sensor
// the caller's usage is measured in (Kafka's metric tags: a quota on a
// default entity is every matching caller's own, not shared). ok is false
// when no quota of kind applies.
func (t *QuotaTable) Resolve(user, clientID string, kind QuotaKind) (entity QuotaEntity, limit float64, sensor SensorKey, ok bool) {
	if t == nil || len(t.limits) == 0 {
		return QuotaEntity{}, 0, SensorKey{}, false
	}
	for _, e := range precedence(user, clientID) {
		if !e.User.present() && !e.ClientID.present() {
			continue // an absent name left both components out
		}
		if l, held := t.limits[e]; held && l[kind] > 0 {
			s := SensorKey{Kind: kind}
			if e.User.present() {
				s.User = user
			}
			if e.ClientID.present() {
				s.ClientID = clientID
			}
			return e, l[kind], s, true
		}
	}
	return QuotaEntity{}, 0, SensorKey{}, false
}

// SensorKey names the usage a quota is measured against: the caller's
// user and/or client id as the matched entity has them (Kafka's quota
// metric tags), and the kind.
type SensorKey struct {
	User, ClientID string
	Kind           QuotaKind
}

// QuotaConfig is how usage is measured against quotas (Kafka's
// quota.window.num and quota.window.size.seconds).
type QuotaConfig struct {
	// Samples times SampleWindow is the longest one throttle may be
	// (Kafka's cap); 0 means 11.
	Samples int
	// SampleWindow is how far a caller may run ahead of its quota before
	// it is throttled: its credit is one SampleWindow of its quota (1 MiB
	// for 1 MiB/s with the default); 0 means 1 s.
	SampleWindow time.Duration
}

func (c QuotaConfig) withDefaults() QuotaConfig {
	if c.Samples < 2 {
		c.Samples = 11
	}
	if c.SampleWindow <= 0 {
		c.SampleWindow = time.Second
	}
	return c
}

// MaxThrottle is the longest throttle time the manager answers: the
// span of all the samples (Kafka's cap). A longer debt is not forgiven:
// the next request is throttled again.
func (c QuotaConfig) MaxThrottle() time.Duration {
	c = c.withDefaults()
	return time.Duration(c.Samples) * c.SampleWindow
}

// QuotaManager measures callers' usage and decides their throttle times.
// Safe for concurrent use: mu guards its fields; no method blocks or
// reads the clock.
type QuotaManager struct {
	cfg QuotaConfig

	mu        sync.Mutex // guards the following
	table     *QuotaTable
	sensors   map[SensorKey]*bucket
	lastSweep time.Time
}

// NewQuotaManager returns a manager with no quota in force.
func NewQuotaManager(cfg QuotaConfig) *QuotaManager {
	return &QuotaManager{cfg: cfg.withDefaults(), table: NewQuotaTable(nil), sensors: map[SensorKey]*bucket{}}
}

// SetTable puts t in force. Usage measured so far is kept: a changed
// quota applies to the debt already owed, as in Kafka.
func (m *QuotaManager) SetTable(t *QuotaTable) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.table = t
}

// Table is the table in force.
func (m *QuotaManager) Table() *QuotaTable {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.table
}

// Throttle is the outcome of Record.
type Throttle struct {
	// Time is how long to delay the answer (0: not throttled), at most
	// QuotaConfig.MaxThrottle.
	Time time.Duration
	// Entity is the entity whose quota applied; Limited is false when no
	// quota applied (Time is 0).
	Entity  QuotaEntity
	Limited bool
	// Limit is the quota (bytes/s, or percent of one thread), and Debt
	// what the caller owes beyond its credit once the value is recorded
	// (bytes, or seconds of handling; 0 when not throttled): the throttle
	// time is Debt / Limit, capped.
	Limit, Debt float64
}

// Record adds value (bytes, or for QuotaRequest the handling time in
// seconds) to the usage of the caller user/clientID at now, and returns
// how long to throttle it.
//
// The rule is a debt, Kafka's TokenBucket (KIP-599's, which Kafka uses
// for controller mutations because its sampled Rate let bursts through):
// each sensor holds a credit of at most one SampleWindow of its quota,
// earned back at the quota's rate; every value is charged to it, served
// whatever the credit; while the credit is below zero the caller is in
// debt, and the throttle is the time the quota takes to pay the debt
// back: −credit / quota, capped at MaxThrottle. The debt is the
// sensor's, not the request's: a later request of the same sensor —
// another stream, another connection of the same user — owes it too, so
// it is held until the whole debt is paid, and a caller that waits out
// its throttles (or is held for them) sends at the quota over any span,
// whatever its request size, burst aside. The value is recorded whatever
// the outcome: the request is answered, not refused.
//
// (Kafka's client quotas measure a sampled Rate over 11 windows of 1 s
// and throttle by (rate − quota) / quota × window: a large sample keeps
// the rate high until it expires, then lets a burst through, and each
// stream is throttled on its own; with 1 MiB requests that held a
// 1 MiB/s flood to 1.18 × its quota over 30 s. docs/design.md decision
// 64.)
func (m *QuotaManager) Record(now time.Time, user, clientID string, kind QuotaKind, value float64) Throttle {
	m.mu.Lock()
	defer m.mu.Unlock()
	entity, limit, key, ok := m.table.Resolve(user, clientID, kind)
	if !ok {
		return Throttle{}
	}
	m.sweep(now)
	b := m.sensors[key]
	if b == nil {
		b = &bucket{}
		m.sensors[key] = b
	}
	rate := limit // per second, of value's unit
	if kind == QuotaRequest {
		rate /= 100 // percent of one thread → seconds per second
	}
	b.record(now, value, rate, rate*m.cfg.SampleWindow.Seconds())
	t := Throttle{Entity: entity, Limited: true, Limit: limit}
	if b.credit < 0 {
		t.Debt = -b.credit
		d := time.Duration(t.Debt / rate * float64(time.Second))
		t.Time = min(max(d, 1), m.cfg.MaxThrottle())
	}
	return t
}

// sweep drops the sensors whose credit is full again (a fresh sensor's:
// forgetting them changes nothing), at most once per MaxThrottle span:
// memory stays bounded by the callers active or in debt.
func (m *QuotaManager) sweep(now time.Time) {
	if now.Sub(m.lastSweep) < m.cfg.MaxThrottle() {
		return
	}
	m.lastSweep = now
	for k, b := range m.sensors {
		if b.full(now) {
			delete(m.sensors, k)
		}
	}
}

// bucket is one sensor's credit (Kafka's TokenBucket): value the caller
// may still use at once, negative when it is in debt.
type bucket struct {
	credit float64
	// rate and capacity are the quota's at the last record: the credit
	// earned per second, and its most.
	rate, capacity float64
	last           time.Time // when credit was last brought up to date
}

// record brings the credit up to now at rate, at most capacity, and
// charges v. A new bucket starts full. A now before the last record
// (callers take the time before they take the manager's lock) earns
// nothing.
func (b *bucket) record(now time.Time, v, rate, capacity float64) {
	switch {
	case b.last.IsZero():
		b.credit, b.last = capacity, now
	case now.After(b.last):
		b.credit = min(capacity, b.credit+now.Sub(b.last).Seconds()*rate)
		b.last = now
	}
	b.credit = min(b.credit, capacity) - v // a lowered quota lowers the credit at once
	b.rate, b.capacity = rate, capacity
}

// full reports whether the credit has earned its way back to capacity by
// now.
func (b *bucket) full(now time.Time) bool {
	return b.credit+now.Sub(b.last).Seconds()*b.rate >= b.capacity
}
