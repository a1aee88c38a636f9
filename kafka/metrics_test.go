package kafka

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/internal/wait"
)

// testMetrics records what the door tells its Metrics.
type testMetrics struct {
	mu       sync.Mutex
	apis     []string
	done     map[string]int // "api/outcome"
	timed    map[string][]time.Duration
	errors   map[string]int // "api/code"
	received int
	sent     int
	closed   map[CloseReason]int
}

func newTestMetrics() *testMetrics {
	return &testMetrics{done: map[string]int{}, timed: map[string][]time.Duration{}, errors: map[string]int{}, closed: map[CloseReason]int{}}
}

type testAPIMeter struct {
	m    *testMetrics
	name string
}

func (m *testMetrics) API(name string) APIMeter {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.apis = append(m.apis, name)
	return &testAPIMeter{m: m, name: name}
}

func (m *testMetrics) Received(n int) { m.mu.Lock(); m.received += n; m.mu.Unlock() }
func (m *testMetrics) Sent(n int)     { m.mu.Lock(); m.sent += n; m.mu.Unlock() }
func (m *testMetrics) Closed(r CloseReason) {
	m.mu.Lock()
	m.closed[r]++
	m.mu.Unlock()
}

func (a *testAPIMeter) Done(o Outcome, took time.Duration) {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	a.m.done[a.name+"/"+o.String()]++
	if o == OutcomeOK || o == OutcomeError {
		a.m.timed[a.name] = append(a.m.timed[a.name], took)
	}
}

func (a *testAPIMeter) Errors(code string, n int) {
	a.m.mu.Lock()
	a.m.errors[a.name+"/"+code] += n
	a.m.mu.Unlock()
}

// snapshot is a copy of what m recorded.
func (m *testMetrics) snapshot() (done, errors map[string]int, closed map[CloseReason]int, received, sent int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.done), maps.Clone(m.errors), maps.Clone(m.closed), m.received, m.sent
}

// waitFor waits until m's counts are want (a request's count lands once
// its answer is flushed, which may be after the client read it).
func (m *testMetrics) waitFor(t *testing.T, what string, check func(done, errors map[string]int, closed map[CloseReason]int) error) {
	t.Helper()
	wait.For(t, 5*time.Second, what, func() error {
		done, errors, closed, _, _ := m.snapshot()
		return check(done, errors, closed)
	})
}

// startServer is startBare, returning the server too.
func startServer(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(ln)
	}()
	t.Cleanup(func() {
		s.Close()
		<-done
	})
	return s, ln.Addr().String()
}

// TestMetricsNameEveryServedAPI: NewServer resolves one meter per API
// of the handler table, named as Kafka names them — the label values
// come from the table, never from a client.
func TestMetricsNameEveryServedAPI(t *testing.T) {
	m := newTestMetrics()
	NewServer(Config{Metrics: m})
	if len(m.apis) != len(handlers) {
		t.Fatalf("%d meters for %d APIs: %v", len(m.apis), len(handlers), m.apis)
	}
	want := map[int16]string{0: "Produce", 17: "SaslHandshake", 18: "ApiVersions", 22: "InitProducerId", 36: "SaslAuthenticate", 61: "DescribeProducers"}
	for k, name := range want {
		if got := APIName(k); got != name {
			t.Errorf("APIName(%d) = %q, want %q", k, got, name)
		}
	}
	seen := map[string]bool{}
	for _, name := range m.apis {
		if seen[name] {
			t.Errorf("API %s resolved twice", name)
		}
		seen[name] = true
	}
}

// TestResponseErrorsKnowsEveryAPI: the error-code walk knows the answer
// of every served API (a new handler needs its case), and finds a code
// at each level an answer carries one.
func TestResponseErrorsKnowsEveryAPI(t *testing.T) {
	for k := range handlers {
		if !responseErrors(kmsg.ResponseForKey(k), &codeCounts{}) {
			t.Errorf("responseErrors does not know %s's answer", APIName(k))
		}
	}
	meta := kmsg.NewPtrMetadataResponse()
	meta.Topics = []kmsg.MetadataResponseTopic{{ErrorCode: 3}, {Partitions: []kmsg.MetadataResponseTopicPartition{{ErrorCode: 5}, {ErrorCode: 5}, {}}}}
	fetch := kmsg.NewPtrFetchResponse()
	fetch.Topics = []kmsg.FetchResponseTopic{{Partitions: []kmsg.FetchResponseTopicPartition{{ErrorCode: 1}, {}}}}
	for name, c := range map[string]struct {
		resp kmsg.Response
		want map[int16]int
	}{
		"metadata":        {meta, map[int16]int{3: 1, 5: 2}},
		"spliced fetch":   {&spliced{Response: fetch}, map[int16]int{1: 1}},
		"clean fetch":     {kmsg.NewPtrFetchResponse(), map[int16]int{}},
		"many codes":      {manyCodes(), map[int16]int{1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1, 8: 1, 9: 1, 10: 2}},
		"top-level error": {&kmsg.DescribeClusterResponse{ErrorCode: 31}, map[int16]int{31: 1}},
	} {
		var cc codeCounts
		responseErrors(c.resp, &cc)
		got := maps.Clone(cc.more)
		if got == nil {
			got = map[int16]int{}
		}
		for i := range cc.len {
			got[cc.codes[i]] = cc.ns[i]
		}
		if !maps.Equal(got, c.want) {
			t.Errorf("%s: codes %v, want %v", name, got, c.want)
		}
	}
}

// manyCodes is a produce answer with more distinct codes than
// codeCounts keeps without a map.
func manyCodes() kmsg.Response {
	resp := kmsg.NewPtrProduceResponse()
	var ps []kmsg.ProduceResponseTopicPartition
	for code := int16(1); code <= 10; code++ {
		ps = append(ps, kmsg.ProduceResponseTopicPartition{ErrorCode: code})
	}
	ps = append(ps, kmsg.ProduceResponseTopicPartition{ErrorCode: 10})
	resp.Topics = []kmsg.ProduceResponseTopic{{Partitions: ps}}
	return resp
}

// TestMetricsCountRequestsBytesAndErrors: requests are counted by API
// and outcome once answered and timed; error codes by name; every byte
// of the frames read and written is counted.
func TestMetricsCountRequestsBytesAndErrors(t *testing.T) {
	m := newTestMetrics()
	addr := startBare(t, Config{Metrics: m})
	c := dial(t, addr)
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	unknownVersion := frame(av, 2)
	binary.BigEndian.PutUint16(unknownVersion[6:], 99) // answered v0, UNSUPPORTED_VERSION (KIP-511)
	old := kmsg.NewPtrProduceRequest()                 // listed, refused per partition
	old.Version, old.Acks = 2, 1
	old.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0}, {Partition: 1}}}}
	frames := [][]byte{frame(av, 1), unknownVersion, frame(old, 3)}
	var out []byte
	for _, f := range frames {
		out = append(out, f...)
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	answered := 0
	for range frames {
		_, body := readAnswer(t, c)
		answered += 4 + 4 + len(body) // size, correlation id, the rest
	}
	m.waitFor(t, "three requests counted", func(done, errors map[string]int, _ map[CloseReason]int) error {
		want := map[string]int{"ApiVersions/ok": 1, "ApiVersions/error": 1, "Produce/error": 1}
		if !maps.Equal(done, want) {
			return fmt.Errorf("requests %v, want %v", done, want)
		}
		if want := map[string]int{"ApiVersions/UNSUPPORTED_VERSION": 1, "Produce/UNSUPPORTED_VERSION": 2}; !maps.Equal(errors, want) {
			return fmt.Errorf("errors %v, want %v", errors, want)
		}
		return nil
	})
	_, _, _, received, sent := m.snapshot()
	if received != len(out) || sent != answered {
		t.Errorf("received %d bytes (sent %d), sent %d (read %d)", received, len(out), sent, answered)
	}
	m.mu.Lock()
	timed := len(m.timed["ApiVersions"]) + len(m.timed["Produce"])
	m.mu.Unlock()
	if timed != 3 {
		t.Errorf("%d requests timed, want 3", timed)
	}
}

// TestMetricsCountClosedConnections: each reason the door closes a
// connection for is counted once, with its own label; a client closing
// is not counted.
func TestMetricsCountClosedConnections(t *testing.T) {
	m := newTestMetrics()
	s, addr := startServer(t, Config{Metrics: m, MaxRequestSize: 1 << 20, SetupTimeout: 200 * time.Millisecond, IdleTimeout: 400 * time.Millisecond})
	good := func() []byte {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = 3
		return frame(req, 1)
	}
	unknownKey := good()
	binary.BigEndian.PutUint16(unknownKey[4:], 9999)
	produceV13 := kmsg.NewPtrProduceRequest()
	produceV13.Version = 13
	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 1
	meta.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("t")}}
	truncated := frame(meta, 1)
	truncated = truncated[:len(truncated)-2]
	binary.BigEndian.PutUint32(truncated, uint32(len(truncated)-4))
	for _, c := range []struct {
		reason CloseReason
		send   []byte
		answer bool // the frame sent is answered first (idle: closed later)
	}{
		{CloseTooLarge, binary.BigEndian.AppendUint32(nil, 2<<20), false},
		{CloseMalformed, binary.BigEndian.AppendUint32(nil, 0xffffff00), false},
		{CloseMalformed, truncated, false},
		{CloseUnknownAPI, unknownKey, false},
		{CloseUnsupportedVersion, frame(produceV13, 1), false},
		{CloseSetupTimeout, nil, false},
		{CloseIdleTimeout, good(), true},
	} {
		t.Run(c.reason.String(), func(t *testing.T) {
			_, _, before, _, _ := m.snapshot()
			conn := dial(t, addr)
			if _, err := conn.Write(c.send); err != nil {
				t.Fatal(err)
			}
			if c.answer {
				readAnswer(t, conn)
			}
			expectClosed(t, conn)
			m.waitFor(t, "the close counted", func(_, _ map[string]int, closed map[CloseReason]int) error {
				for r, n := range closed {
					want := before[r]
					if r == c.reason {
						want++
					}
					if n != want {
						return fmt.Errorf("closed %v, before %v", closed, before)
					}
				}
				if closed[c.reason] != before[c.reason]+1 {
					return fmt.Errorf("closed %v, before %v", closed, before)
				}
				return nil
			})
		})
	}
	// A client that closes is not the door's doing.
	_, _, before, _, _ := m.snapshot()
	conn := dial(t, addr)
	if _, err := conn.Write(good()); err != nil {
		t.Fatal(err)
	}
	readAnswer(t, conn)
	conn.Close()
	m.waitFor(t, "the request counted", func(done, _ map[string]int, _ map[CloseReason]int) error {
		if done["ApiVersions/ok"] != 2 {
			return fmt.Errorf("requests %v", done)
		}
		return nil
	})
	wait.For(t, 5*time.Second, "the server done with the connection", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.conns) != 0 {
			return fmt.Errorf("%d connections open", len(s.conns))
		}
		return nil
	})
	if _, _, after, _, _ := m.snapshot(); !maps.Equal(after, before) {
		t.Errorf("a client's close counted: %v, before %v", after, before)
	}
}

// TestMetricsCountRefusedRequests: a request its authentication does
// not admit is counted refused, and its connection closed for
// authentication.
func TestMetricsCountRefusedRequests(t *testing.T) {
	m := newTestMetrics()
	addr := startBare(t, Config{Metrics: m, Auth: Authentication{Required: true}})
	c := dial(t, addr)
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	if _, err := c.Write(frame(req, 1)); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c)
	m.waitFor(t, "the refusal counted", func(done, _ map[string]int, closed map[CloseReason]int) error {
		if done["Metadata/refused"] != 1 || closed[CloseAuthentication] != 1 {
			return fmt.Errorf("requests %v, closed %v", done, closed)
		}
		return nil
	})
}

// nopMetrics is a Metrics that does nothing.
type nopMetrics struct{}

func (nopMetrics) API(string) APIMeter         { return nopMetrics{} }
func (nopMetrics) Received(int)                {}
func (nopMetrics) Sent(int)                    {}
func (nopMetrics) Closed(CloseReason)          {}
func (nopMetrics) Done(Outcome, time.Duration) {}
func (nopMetrics) Errors(string, int)          {}

// TestMeteringAnAnswerDoesNotAllocate: the door's part of metering a
// request answered (with an error code or not) allocates nothing once
// the connection's writer has answered a request.
func TestMeteringAnAnswerDoesNotAllocate(t *testing.T) {
	s := NewServer(Config{Metrics: nopMetrics{}})
	c := &conn{s: s}
	r := &request{key: 0, received: time.Now()}
	ok := kmsg.NewPtrProduceResponse()
	ok.Topics = []kmsg.ProduceResponseTopic{{Partitions: []kmsg.ProduceResponseTopicPartition{{}, {}}}}
	failed := kmsg.NewPtrProduceResponse()
	failed.Topics = []kmsg.ProduceResponseTopic{{Partitions: []kmsg.ProduceResponseTopicPartition{{ErrorCode: 6}, {ErrorCode: 3}}}}
	c.answered(r, ok, 100)
	c.flushed()
	for name, resp := range map[string]kmsg.Response{"ok": ok, "error": failed} {
		if n := testing.AllocsPerRun(100, func() {
			c.s.meters.received(100)
			c.answered(r, resp, 100)
			c.flushed()
		}); n != 0 {
			t.Errorf("%s answer: %v allocations per request", name, n)
		}
	}
}
