//go:build sluicetest

package node_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// faultsDo sends method /debug/faults with body to tn and returns the
// status code and body.
func (tn *testNode) faultsDo(method, body string) (int, string) {
	tn.t.Helper()
	req, err := http.NewRequestWithContext(ctx(tn.t), method, "http://"+tn.Node.HTTPAddr()+"/debug/faults", strings.NewReader(body))
	if err != nil {
		tn.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tn.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tn.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// faultRules GETs the rules in force.
func (tn *testNode) faultRules() []node.FaultRule {
	tn.t.Helper()
	code, body := tn.faultsDo(http.MethodGet, "")
	if code != http.StatusOK {
		tn.t.Fatalf("GET /debug/faults: %d %s", code, body)
	}
	var fr node.FaultRules
	if err := json.Unmarshal([]byte(body), &fr); err != nil {
		tn.t.Fatalf("GET /debug/faults body %q: %v", body, err)
	}
	if fr.Rules == nil {
		tn.t.Fatalf("GET /debug/faults gave rules null, want a list: %s", body)
	}
	return fr.Rules
}

// setFaults PUTs rules and expects them accepted.
func (tn *testNode) setFaults(rules string) {
	tn.t.Helper()
	if code, body := tn.faultsDo(http.MethodPut, `{"rules":`+rules+`}`); code != http.StatusOK {
		tn.t.Fatalf("PUT /debug/faults %s: %d %s", rules, code, body)
	}
}

// With --fault-injection, rules PUT on /debug/faults apply to the node's
// gRPC calls: a dropped response hides a produce that was applied, a
// failed request is not applied, a delayed answer comes no sooner than
// the delay, and DELETE restores normal service. Bad rule sets are refused
// with 400 and change nothing.
func TestFaultInjectionEndpoint(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) {
		c.HTTPListen, c.FaultInjection = "127.0.0.1:0", true
	})
	tn.CreateTopic("faults", 1, nil)
	if rules := tn.faultRules(); len(rules) != 0 {
		t.Fatalf("rules at start: %+v", rules)
	}

	// Drop every Produce response: the client sees UNAVAILABLE, yet the
	// record was appended.
	tn.setFaults(`[{"method":"/sluice.v1.Log/Produce","drop_response":1}]`)
	if got, want := tn.faultRules(), []node.FaultRule{{Method: "/sluice.v1.Log/Produce", DropResponse: 1}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("GET after PUT: %+v, want %+v", got, want)
	}
	_, err := tn.tryProduce("faults", nodetest.Batch("dropped", 1, 1000))
	wantUnavailable(t, err, "fault injection: response dropped after processing")
	if got := nodetest.Values(tn.Fetch("faults", 0, 0, 0), 0); fmt.Sprint(got) != "[dropped-0]" {
		t.Fatalf("after a dropped response the log holds %v, want the record", got)
	}

	// Bad rule sets: 400 with a reason, and the rules in force stay.
	for body, reason := range map[string]string{
		`{"rules":[{"method":"/sluice.v1.Log/Prodcue","drop_response":1}]}`: "unknown method",
		`{"rules":[{"method":"/nope.v1.Svc/","fail_request":1}]}`:           "unknown service",
		`{"rules":[{"method":"*","drop_response":1.5}]}`:                    "not a probability",
		`{"rules":[{"method":"*","fail_request":-1}]}`:                      "not a probability",
		`{"rules":[{"method":"*"`:                                           "bad JSON",
		`{"rules":[{"method":"*","drop":1}]}`:                               `unknown field "drop"`,
	} {
		code, msg := tn.faultsDo(http.MethodPut, body)
		if code != http.StatusBadRequest || !strings.Contains(msg, reason) {
			t.Errorf("PUT %s: %d %q, want 400 mentioning %q", body, code, msg, reason)
		}
	}
	if got := tn.faultRules(); len(got) != 1 || got[0].DropResponse != 1 {
		t.Fatalf("a refused PUT changed the rules to %+v", got)
	}
	if code, _ := tn.faultsDo(http.MethodPatch, "{}"); code != http.StatusMethodNotAllowed {
		t.Errorf("PATCH /debug/faults: %d, want 405", code)
	}

	// Fail every Produce request (POST works like PUT): not appended.
	if code, body := tn.faultsDo(http.MethodPost, `{"rules":[{"method":"/sluice.v1.Log/","fail_request":1}]}`); code != http.StatusOK {
		t.Fatalf("POST: %d %s", code, body)
	}
	_, err = tn.tryProduce("faults", nodetest.Batch("failed", 1, 2000))
	wantUnavailable(t, err, "fault injection: request dropped")

	// DELETE: normal again; the next record lands right after the first,
	// so the failed one was never appended.
	if code, body := tn.faultsDo(http.MethodDelete, ""); code != http.StatusOK || !strings.Contains(body, `"rules":[]`) {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if r, err := tn.tryProduce("faults", nodetest.Batch("normal", 1, 3000)); err != nil || r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 1 {
		t.Fatalf("produce after DELETE: %v %v, want base offset 1", r, err)
	}

	// A delayed answer takes at least the delay, and the request succeeds.
	const delay = 300 * time.Millisecond
	tn.setFaults(fmt.Sprintf(`[{"method":"*","delay_response_ms":%d}]`, delay.Milliseconds()))
	begin := time.Now()
	r, err := tn.tryProduce("faults", nodetest.Batch("delayed", 1, 4000))
	if took := time.Since(begin); err != nil || r.BaseOffset != 2 || took < delay {
		t.Fatalf("delayed produce: %v %v after %v, want base offset 2 after >= %v", r, err, took, delay)
	}
	tn.faultsDo(http.MethodDelete, "")
	if got := nodetest.Values(tn.Fetch("faults", 0, 0, 0), 0); fmt.Sprint(got) != "[dropped-0 normal-0 delayed-0]" {
		t.Fatalf("log holds %v", got)
	}
}

// Without --fault-injection there is no /debug/faults; the older
// --fault-drop-produce-responses still works, as a startup rule of the same
// interceptor.
func TestFaultDropProduceResponsesWithoutEndpoint(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) {
		c.HTTPListen, c.FaultDropProduceResponses = "127.0.0.1:0", 1
	})
	if code, _ := tn.faultsDo(http.MethodGet, ""); code != http.StatusNotFound {
		t.Fatalf("GET /debug/faults without --fault-injection: %d, want 404", code)
	}
	if code, _ := tn.faultsDo(http.MethodPut, `{"rules":[]}`); code != http.StatusNotFound {
		t.Fatalf("PUT /debug/faults without --fault-injection: %d, want 404", code)
	}
	tn.CreateTopic("drops", 1, nil)
	_, err := tn.tryProduce("drops", nodetest.Batch("x", 2, 1000))
	wantUnavailable(t, err, "fault injection: response dropped after processing")
	if got := nodetest.Values(tn.Fetch("drops", 0, 0, 0), 0); fmt.Sprint(got) != "[x-0 x-1]" {
		t.Fatalf("log holds %v, want the batch whose response was dropped", got)
	}
	// On ProduceStream the dropped answer ends the stream; the request was
	// applied.
	st, err := tn.Log.ProduceStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: 1, Request: publicRequest(t, sluicev1.Acks_ACKS_ALL, "drops", 0, "y", 1)}); err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantUnavailable(t, err, "fault injection: response dropped after processing")
	if got := nodetest.Values(tn.Fetch("drops", 0, 0, 0), 0); fmt.Sprint(got) != "[x-0 x-1 y-0]" {
		t.Fatalf("log holds %v, want the streamed batch whose answer was dropped", got)
	}
}

// The same interceptors run on both listeners: a fault rule may name an
// inter-node method and bites on the internal listener, and one naming a
// public method bites on the client listener.
func TestFaultRulesBiteOnBothListeners(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) { c.FaultInjection, c.HTTPListen = true, "127.0.0.1:0" })
	tn.setFaults(`[{"method":"/sluice.internal.v1.Controller/QuorumState","fail_request":1},{"method":"/sluice.v1.Admin/Metadata","fail_request":1}]`)
	_, err := internalv1.NewControllerClient(tn.Internal).QuorumState(ctx(t), &internalv1.QuorumStateRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "fault injection") {
		t.Errorf("QuorumState on the internal listener under a fail_request rule: %v, want the injected UNAVAILABLE", err)
	}
	_, err = tn.Admin.Metadata(ctx(t), &sluicev1.MetadataRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "fault injection") {
		t.Errorf("Metadata on the client listener under a fail_request rule: %v, want the injected UNAVAILABLE", err)
	}
	tn.faultsDo(http.MethodDelete, "")
	if _, err := internalv1.NewControllerClient(tn.Internal).QuorumState(ctx(t), &internalv1.QuorumStateRequest{}); err != nil {
		t.Errorf("QuorumState after the rules were cleared: %v", err)
	}
}

// Fault injection validates in a build with the test machinery (the
// sluicetest tag); without the tag Validate refuses it (docs/design.md
// decision 52).
func TestFaultInjectionConfigValidates(t *testing.T) {
	c := node.DefaultConfig()
	c.FaultInjection = true
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate with FaultInjection: %v", err)
	}
}
