package membership

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func TestEventTypeString(t *testing.T) {
	for typ, want := range map[EventType]string{EventJoin: "join", EventLeave: "leave", EventUpdate: "update", 9: "EventType(9)"} {
		if got := typ.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(typ), got, want)
		}
	}
}

// eventTestMembership is a Membership with only what the event path uses.
func eventTestMembership(logs *logRecorder, capacity int, onEvent func(Event)) *Membership {
	return &Membership{
		cfg:       Config{OnEvent: onEvent},
		log:       logs.logger(1),
		name:      nodeName(1),
		events:    make(chan nodeEvent, capacity),
		view:      map[string]member{},
		conflicts: map[string]time.Time{},
		stop:      make(chan struct{}),
	}
}

func testNodeOf(t *testing.T, id int32, port uint16) *memberlist.Node {
	t.Helper()
	b, err := json.Marshal(testMeta(id))
	if err != nil {
		t.Fatal(err)
	}
	return &memberlist.Node{Name: nodeName(id), Addr: net.IPv4(127, 0, 0, 1), Port: port, Meta: b}
}

// Memberlist's callbacks never block: past the queue's capacity events are
// dropped with a warning. The node's own join is not queued.
func TestEventQueueFullDropsWithWarning(t *testing.T) {
	logs := &logRecorder{}
	m := eventTestMembership(logs, 2, func(Event) {})
	d := delegate{m}
	d.NotifyJoin(testNodeOf(t, 1, 7001))
	for range 3 {
		d.NotifyJoin(testNodeOf(t, 2, 7002))
	}
	if len(m.events) != 2 {
		t.Fatalf("%d events queued, want 2", len(m.events))
	}
	if len(logs.find(slog.LevelWarn, "event queue full")) != 1 {
		t.Error("dropped event not logged at Warn")
	}
}

// OnEvent gets the events in order, parsed, from one goroutine; events
// with bad meta are skipped; nothing is delivered once stop is closed.
func TestEventLoopDeliversInOrder(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	m := eventTestMembership(&logRecorder{}, eventBuffer, func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf("%v %d %s", e.Type, e.Meta.NodeID, e.Addr))
	})
	d := delegate{m}
	d.NotifyJoin(testNodeOf(t, 2, 7002))
	bad := testNodeOf(t, 3, 7003)
	bad.Meta = []byte("garbage")
	d.NotifyJoin(bad)
	d.NotifyUpdate(testNodeOf(t, 3, 7003))
	d.NotifyLeave(testNodeOf(t, 2, 7002))

	m.goroutines.Go(m.eventLoop)
	want := "[join 2 127.0.0.1:7002 update 3 127.0.0.1:7003 leave 2 127.0.0.1:7002]"
	eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if s := fmt.Sprint(got); s != want {
			return errors.New(s)
		}
		return nil
	})
	close(m.stop)
	m.stopped.Store(true)
	m.goroutines.Wait()
	d.NotifyJoin(testNodeOf(t, 4, 7004))
	if len(m.events) != 0 {
		t.Error("event queued after shutdown began")
	}
}
