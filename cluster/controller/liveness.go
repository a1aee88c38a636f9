package controller

import (
	"slices"
	"time"
)

// Liveness tracks broker sessions on the active controller (DESIGN §7): the
// last heartbeat of each broker's current epoch, and which brokers
// membership (gossip) reported gone. It is pure: time is passed in, and it
// decides, it does not act. One owner (the controller's session loop)
// calls it; it is not safe for concurrent use.
//
// A broker is due to be fenced when it is unfenced in the image and
//
//   - no heartbeat of its current epoch arrived for SessionTimeout, or
//   - membership reported it gone and no heartbeat arrived for GoneGrace
//     since then (a node that gossip lost but that still heartbeats is
//     alive: gossip and the controller link can fail separately).
//
// A new leader knows no heartbeats: Reset starts every session at the
// moment of election, so brokers get a full SessionTimeout to find it.
type Liveness struct {
	SessionTimeout time.Duration
	GoneGrace      time.Duration

	sessions map[int32]session
	// gone is when membership last reported a node gone; kept across
	// Reset, because every voter hears gossip and a new leader must act on
	// what it heard before it was elected.
	gone map[int32]time.Time
}

type session struct {
	epoch int64
	last  time.Time // last heartbeat of epoch, or when the session started
	heard time.Time // last real heartbeat of epoch; zero if none yet
}

// NewLiveness returns a tracker with the given timeouts.
func NewLiveness(sessionTimeout, goneGrace time.Duration) *Liveness {
	return &Liveness{SessionTimeout: sessionTimeout, GoneGrace: goneGrace,
		sessions: map[int32]session{}, gone: map[int32]time.Time{}}
}

// Reset forgets every session and starts the registered brokers' sessions
// at now; call it when this node becomes the active controller. Gone marks
// are kept.
func (l *Liveness) Reset(im *Image, now time.Time) {
	l.sessions = make(map[int32]session, len(im.Brokers))
	for id, b := range im.Brokers {
		l.sessions[id] = session{epoch: b.Epoch, last: now}
	}
}

// Heartbeat records a heartbeat from broker id at epoch.
func (l *Liveness) Heartbeat(id int32, epoch int64, now time.Time) {
	if epoch < l.sessions[id].epoch {
		return // a late heartbeat of an older incarnation proves nothing
	}
	l.sessions[id] = session{epoch: epoch, last: now, heard: now}
}

// Heard reports whether broker id, at epoch, may still be alive at now:
// its last heartbeat of that epoch — or the start of its session, when
// this controller became leader or first saw the registration — is less
// than SessionTimeout old. A broker the tracker has no session of that
// epoch for counts as heard: it registered a moment ago. Used to refuse
// unregistering a broker that is starting or shutting down.
func (l *Liveness) Heard(id int32, epoch int64, now time.Time) bool {
	s, ok := l.sessions[id]
	if !ok || s.epoch < epoch {
		return true
	}
	return now.Sub(s.last) < l.SessionTimeout
}

// Gone records that membership lost node id at now.
func (l *Liveness) Gone(id int32, now time.Time) {
	if _, ok := l.gone[id]; !ok {
		l.gone[id] = now
	}
}

// Joined clears a gone mark for id (the node is back in membership).
func (l *Liveness) Joined(id int32) { delete(l.gone, id) }

// Expired returns the fences due at now, in broker id order. Brokers new to
// the tracker (registered after Reset, never heartbeated) start their
// session at now.
func (l *Liveness) Expired(im *Image, now time.Time) []FenceBroker {
	var out []FenceBroker
	for id, b := range im.Brokers {
		s, ok := l.sessions[id]
		if !ok || s.epoch < b.Epoch {
			// A registration newer than anything seen: its session starts now.
			s = session{epoch: b.Epoch, last: now}
			l.sessions[id] = s
		}
		if b.Fenced || s.epoch != b.Epoch {
			continue
		}
		goneAt, isGone := l.gone[id]
		gone := isGone && !s.heard.After(goneAt) && now.Sub(goneAt) >= l.GoneGrace
		if now.Sub(s.last) >= l.SessionTimeout || gone {
			out = append(out, FenceBroker{BrokerID: id, BrokerEpoch: b.Epoch})
		}
	}
	for id := range l.sessions {
		if im.Brokers[id] == nil {
			delete(l.sessions, id)
		}
	}
	slices.SortFunc(out, func(a, b FenceBroker) int { return int(a.BrokerID - b.BrokerID) })
	return out
}
