package membership

import "strconv"

// EventType says what happened to a node.
type EventType int

// Event types.
const (
	// EventJoin: a node became alive (first seen, or back after it failed
	// or left, possibly at a new address).
	EventJoin EventType = iota + 1
	// EventLeave: a node was declared dead by failure detection or left
	// gracefully.
	EventLeave
	// EventUpdate: an alive node changed its Meta.
	EventUpdate
)

// String returns "join", "leave" or "update".
func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventUpdate:
		return "update"
	default:
		return "EventType(" + strconv.Itoa(int(t)) + ")"
	}
}

// Event is one membership change of another node, as passed to
// Config.OnEvent.
type Event struct {
	Type EventType
	// Meta is the node's parsed meta; for EventLeave, the last one known.
	Meta Meta
	// Addr is the node's gossip host:port.
	Addr string
}

// nodeEvent is what memberlist's callbacks queue for eventLoop: the event,
// or why the node's meta did not parse.
type nodeEvent struct {
	Event
	name string // memberlist node name
	err  error  // from decodeMeta; the event is not delivered
}

// eventLoop is the one goroutine that calls OnEvent, in queue order, until
// stop is closed; events still queued then are dropped.
func (m *Membership) eventLoop() {
	for {
		select {
		case <-m.stop:
			return
		case ev := <-m.events:
			// A closed stop wins over a ready event: OnEvent is never
			// called once Shutdown has begun.
			select {
			case <-m.stop:
				return
			default:
			}
			if ev.err != nil {
				m.log.Warn("membership: skipping event of a node with bad meta",
					"event", ev.Type.String(), "node", ev.name, "addr", ev.Addr, "err", ev.err)
				continue
			}
			m.cfg.OnEvent(ev.Event)
		}
	}
}
