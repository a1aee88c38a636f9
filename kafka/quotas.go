package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
)

// Quotas is the client quota enforcement the door shares with the gRPC
// door (api.Quotas implements it; the rule is auth.QuotaManager's): the
// same principal's requests through either door are charged to the same
// debt.
type Quotas interface {
	// Active reports whether any quota is in force (otherwise nothing is
	// measured).
	Active() bool
	// Charge records a request of p (with Kafka's client id): bytes of
	// kind and its handling time, and returns how long to throttle it.
	Charge(p auth.Principal, clientID string, kind auth.QuotaKind, bytes int, handling time.Duration) time.Duration
}

// throttle charges a request and returns its throttle time in
// milliseconds for the answer (0 when under every quota). Over a quota,
// the connection is muted — not read — for the throttle time, and the
// answer is sent at once to a client that throttles itself (KIP-219:
// Produce v6+, Fetch v8+, which wait throttle_time_ms before their next
// request); an older client's answer is held for the throttle time (at
// most until the connection closes), as Kafka's brokers did before. A
// client that ignores throttle_time_ms is held all the same: its next
// request is not read until the mute ends.
func (c *conn) throttle(r *request, kind auth.QuotaKind, bytes int, handling time.Duration) int32 {
	q := c.s.cfg.Quotas
	if q == nil || !q.Active() {
		return 0
	}
	d := q.Charge(r.caller.Principal, r.clientID, kind, bytes, handling) // r's: throttle may run on the writer's goroutine
	if d <= 0 {
		return 0
	}
	c.muteUntil(time.Now().Add(d))
	if !throttlesItself(r) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.ctx.Done():
		}
	}
	return int32(min(d.Milliseconds()+1, 1<<31-1))
}

// throttlesItself reports whether r's version is one whose client waits
// out throttle_time_ms itself (KIP-219).
func throttlesItself(r *request) bool {
	switch r.key {
	case 0:
		return r.version >= 6
	case 1:
		return r.version >= 8
	}
	return false
}

// muteUntil keeps the reader from reading the next request before t.
func (c *conn) muteUntil(t time.Time) {
	c.muteMu.Lock()
	if t.After(c.muted) {
		c.muted = t
	}
	c.muteMu.Unlock()
}

// waitMuted waits until the connection is no longer muted; false if it
// closed meanwhile.
func (c *conn) waitMuted() bool {
	c.muteMu.Lock()
	until := c.muted
	c.muteMu.Unlock()
	d := time.Until(until)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// quotasActive reports whether some quota is in force.
func (c *conn) quotasActive() bool {
	q := c.s.cfg.Quotas
	return q != nil && q.Active()
}

// chargeRequest charges a request answered from memory (handler.charged)
// its handling time against the caller's request quota, and returns its
// answer: over the quota with throttle_time_ms set, the connection muted
// for that long, and — for a version whose client does not wait out the
// throttle itself (before KIP-219: Kafka applied the throttle before the
// answer) — held that long on the writer.
func (c *conn) chargeRequest(r *request, respond func() kmsg.Response, handling time.Duration) func() kmsg.Response {
	d := c.s.cfg.Quotas.Charge(r.caller.Principal, r.clientID, auth.QuotaRequest, 0, handling)
	if d <= 0 {
		return respond
	}
	c.muteUntil(time.Now().Add(d))
	ms := int32(min(d.Milliseconds()+1, 1<<31-1))
	return func() kmsg.Response {
		resp := respond()
		if resp == nil {
			return nil
		}
		after := false
		if tr, ok := resp.(kmsg.ThrottleResponse); ok {
			_, after = tr.Throttle()
		}
		if st, ok := resp.(kmsg.SetThrottleResponse); ok {
			st.SetThrottle(ms)
		}
		if !after {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-c.ctx.Done():
			}
		}
		return resp
	}
}
