package membership

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/loopback"
	"github.com/sluice-io/sluice/internal/wait"
)

// freeAddr returns a loopback host:port whose port was free for both TCP
// and UDP a moment ago, for a node that must be addressed before it starts.
func freeAddr(t *testing.T) string {
	t.Helper()
	addrs, err := loopback.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// logRecord is one record kept by a logRecorder.
type logRecord struct {
	level slog.Level
	msg   string
}

// logRecorder keeps every record logged through its loggers; with
// SLUICE_TEST_LOG set it also prints them.
type logRecorder struct {
	mu   sync.Mutex // guards recs
	recs []logRecord
}

// logger returns a logger recording into r, tagged with the node id.
func (r *logRecorder) logger(id int32) *slog.Logger {
	var next slog.Handler
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		next = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	return slog.New(recordHandler{r: r, next: next}).With("test_node", id)
}

// find returns the records at level whose message contains substr.
func (r *logRecorder) find(level slog.Level, substr string) []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRecord
	for _, rec := range r.recs {
		if rec.level == level && strings.Contains(rec.msg, substr) {
			out = append(out, rec)
		}
	}
	return out
}

type recordHandler struct {
	r    *logRecorder
	next slog.Handler // may be nil
}

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recordHandler) Handle(ctx context.Context, rec slog.Record) error {
	h.r.mu.Lock()
	h.r.recs = append(h.r.recs, logRecord{level: rec.Level, msg: rec.Message})
	h.r.mu.Unlock()
	if h.next != nil {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

func (h recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if h.next != nil {
		return recordHandler{r: h.r, next: h.next.WithAttrs(as)}
	}
	return h
}

func (h recordHandler) WithGroup(name string) slog.Handler {
	if h.next != nil {
		return recordHandler{r: h.r, next: h.next.WithGroup(name)}
	}
	return h
}

// timedEvent is an Event with the time OnEvent received it.
type timedEvent struct {
	Event
	at time.Time
}

// eventRecorder collects the events one node reports.
type eventRecorder struct {
	mu     sync.Mutex // guards events
	events []timedEvent
}

func (r *eventRecorder) onEvent(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, timedEvent{Event: e, at: time.Now()})
}

// find returns the first event of type typ about node id at addr ("" for
// any address) received at or after since.
func (r *eventRecorder) find(typ EventType, id int32, addr string, since time.Time) (timedEvent, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Type == typ && e.Meta.NodeID == id && (addr == "" || e.Addr == addr) && !e.at.Before(since) {
			return e, nil
		}
	}
	return timedEvent{}, fmt.Errorf("no %v event for node %d at %q since %v among %d events",
		typ, id, addr, since.Format(time.StampMilli), len(r.events))
}

// testNode is a started Membership with what it reported.
type testNode struct {
	*Membership
	meta   Meta
	events *eventRecorder
	logs   *logRecorder
}

// testMeta is the Meta the tests give node id.
func testMeta(id int32) Meta {
	return Meta{
		NodeID:      id,
		Roles:       []string{RoleBroker},
		GRPCAddress: fmt.Sprintf("127.0.0.1:%d", 19000+id),
		Rack:        fmt.Sprintf("rack-%d", id%2),
	}
}

// startNode starts node id on loopback with the given seeds, applying
// edits to the config, and shuts it down when the test ends.
func startNode(t *testing.T, id int32, join []string, edits ...func(*Config)) *testNode {
	t.Helper()
	n := &testNode{meta: testMeta(id), events: &eventRecorder{}, logs: &logRecorder{}}
	cfg := Config{
		Meta:              n.meta,
		BindAddr:          "127.0.0.1:0",
		Join:              join,
		JoinRetryInterval: 200 * time.Millisecond,
		Logger:            n.logs.logger(id),
		OnEvent:           n.events.onEvent,
	}
	for _, e := range edits {
		e(&cfg)
	}
	m, err := Start(cfg)
	if err != nil {
		t.Fatalf("start node %d: %v", id, err)
	}
	n.Membership = m
	t.Cleanup(func() {
		if err := m.Shutdown(); err != nil {
			t.Errorf("shutdown node %d: %v", id, err)
		}
	})
	return n
}

// bindTo sets the bind address.
func bindTo(addr string) func(*Config) {
	return func(c *Config) { c.BindAddr = addr }
}

// sameMembers reports nil if m's alive members are exactly want, in order.
func sameMembers(m *Membership, want []Meta) error {
	got := m.Members()
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("node %s sees %v, want %v", m.name, got, want)
	}
	return nil
}

// allSee waits until every node sees exactly the members want.
func allSee(t *testing.T, timeout time.Duration, nodes []*testNode, want []Meta) {
	t.Helper()
	wait.For(t, timeout, "every node sees the members", func() error {
		for _, n := range nodes {
			if err := sameMembers(n.Membership, want); err != nil {
				return err
			}
		}
		return nil
	})
}

// metas returns the Metas of nodes, in order.
func metas(nodes ...*testNode) []Meta {
	out := make([]Meta, len(nodes))
	for i, n := range nodes {
		out[i] = n.meta
	}
	return out
}
