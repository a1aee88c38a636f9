package auth

import (
	"sync"
	"time"
)

// Client quotas (issue 33; Kafka's ClientQuotaManager, KIP-13, KIP-124,
// KIP-546), the broker's side: which quota applies to a caller, the rate
// it is using, and how long to throttle it. Pure logic: time is passed
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

// QuotaConfig is how rates are measured (Kafka's quota.window.num and
// quota.window.size.seconds).
type QuotaConfig struct {
	// Samples is the number of samples a rate is measured over; 0 means
	// 11.
	Samples int
	// SampleWindow is each sample's span; 0 means 1 s.
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
// span of all the samples (Kafka's cap).
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
	sensors   map[SensorKey]*rate
	lastSweep time.Time
}

// NewQuotaManager returns a manager with no quota in force.
func NewQuotaManager(cfg QuotaConfig) *QuotaManager {
	return &QuotaManager{cfg: cfg.withDefaults(), table: NewQuotaTable(nil), sensors: map[SensorKey]*rate{}}
}

// SetTable puts t in force. Usage measured so far is kept: a changed
// quota applies to the rate already measured, as in Kafka.
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
	// Rate is the caller's measured rate after the value was recorded,
	// and Limit its quota (bytes/s, or percent).
	Rate, Limit float64
}

// Record adds value (bytes, or for QuotaRequest the handling time in
// seconds) to the usage of the caller user/clientID at now, and returns
// how long to throttle it (Kafka's recordAndGetThrottleTimeMs): when the
// rate measured over the window exceeds the quota,
// (rate − quota) / quota × window, the time after which the rate would
// be back at the quota had the caller sent nothing more. The value is
// recorded whatever the outcome: the request is answered, not refused.
func (m *QuotaManager) Record(now time.Time, user, clientID string, kind QuotaKind, value float64) Throttle {
	m.mu.Lock()
	defer m.mu.Unlock()
	entity, limit, key, ok := m.table.Resolve(user, clientID, kind)
	if !ok {
		return Throttle{}
	}
	m.sweep(now)
	r := m.sensors[key]
	if r == nil {
		r = newRate(m.cfg)
		m.sensors[key] = r
	}
	r.record(now, value)
	if kind == QuotaRequest {
		limit /= 100 // percent of one thread → seconds per second
	}
	observed, window := r.measure(now)
	t := Throttle{Entity: entity, Limited: true, Rate: observed, Limit: limit}
	if kind == QuotaRequest {
		t.Rate, t.Limit = observed*100, limit*100
	}
	if observed > limit {
		d := time.Duration((observed - limit) / limit * float64(window))
		t.Time = min(d, m.cfg.MaxThrottle())
	}
	return t
}

// sweep drops the sensors unused for a whole window (their rate is 0),
// at most once per window: memory stays bounded by the active callers.
func (m *QuotaManager) sweep(now time.Time) {
	span := m.cfg.MaxThrottle()
	if now.Sub(m.lastSweep) < span {
		return
	}
	m.lastSweep = now
	for k, r := range m.sensors {
		if now.Sub(r.last) > span {
			delete(m.sensors, k)
		}
	}
}

// rate is Kafka's Rate over SampledStat: Samples samples of SampleWindow
// each; the oldest is reused when a new one starts.
type rate struct {
	cfg     QuotaConfig
	samples []sample
	cur     int
	last    time.Time // the last record
}

type sample struct {
	start time.Time
	value float64
}

func newRate(cfg QuotaConfig) *rate {
	return &rate{cfg: cfg, samples: make([]sample, cfg.Samples)}
}

func (r *rate) record(now time.Time, v float64) {
	s := &r.samples[r.cur]
	if s.start.IsZero() || now.Sub(s.start) >= r.cfg.SampleWindow {
		r.cur = (r.cur + 1) % len(r.samples)
		s = &r.samples[r.cur]
		*s = sample{start: now}
	}
	s.value += v
	r.last = now
}

// measure is the rate at now, per second, and the span it was measured
// over: the samples younger than the whole window summed, over the time
// since the oldest of them started, but at least (Samples − 1) windows
// (Kafka's Rate.windowSize: a new sensor does not read a short burst as a
// high rate).
func (r *rate) measure(now time.Time) (float64, time.Duration) {
	span := time.Duration(len(r.samples)) * r.cfg.SampleWindow
	var total float64
	var oldest time.Time
	for _, s := range r.samples {
		if s.start.IsZero() || now.Sub(s.start) >= span {
			continue
		}
		total += s.value
		if oldest.IsZero() || s.start.Before(oldest) {
			oldest = s.start
		}
	}
	elapsed := now.Sub(oldest)
	if floor := time.Duration(len(r.samples)-1) * r.cfg.SampleWindow; elapsed < floor {
		elapsed = floor
	}
	return total / elapsed.Seconds(), elapsed
}
