//go:build sluicetest

package node

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var testServed = []string{
	"/grpc.health.v1.Health/Check",
	"/sluice.internal.v1.Replica/ReplicaFetch",
	"/sluice.v1.Log/Fetch",
	"/sluice.v1.Log/Produce",
}

// The most specific rule applies: the exact method, then its service
// prefix, then "*"; a prefix covers only its own service.
func TestMatchFaultRule(t *testing.T) {
	exact := FaultRule{Method: "/sluice.v1.Log/Produce", DropResponse: 1}
	prefix := FaultRule{Method: "/sluice.v1.Log/", FailRequest: 0.5}
	all := FaultRule{Method: "*", DelayResponseMs: 10}
	tests := []struct {
		name   string
		rules  []FaultRule
		method string
		want   FaultRule
		ok     bool
	}{
		{"no rules", nil, "/sluice.v1.Log/Produce", FaultRule{}, false},
		{"exact", []FaultRule{exact}, "/sluice.v1.Log/Produce", exact, true},
		{"exact does not match another method", []FaultRule{exact}, "/sluice.v1.Log/Fetch", FaultRule{}, false},
		{"exact beats prefix and star in any order", []FaultRule{all, prefix, exact}, "/sluice.v1.Log/Produce", exact, true},
		{"prefix beats star", []FaultRule{all, prefix, exact}, "/sluice.v1.Log/Fetch", prefix, true},
		{"prefix covers only its service", []FaultRule{prefix}, "/sluice.internal.v1.Replica/ReplicaFetch", FaultRule{}, false},
		{"service name is not a prefix of a longer one", []FaultRule{{Method: "/sluice.v1.Lo/"}}, "/sluice.v1.Log/Fetch", FaultRule{}, false},
		{"star matches everything else", []FaultRule{all, prefix, exact}, "/grpc.health.v1.Health/Check", all, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := matchFaultRule(tc.rules, tc.method)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("matchFaultRule(%s) = %+v, %v; want %+v, %v", tc.method, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// Rules name a served method or service (or *), once each, with
// probabilities in [0, 1] and a non-negative delay.
func TestValidateFaultRules(t *testing.T) {
	tests := []struct {
		name    string
		rules   []FaultRule
		wantErr string // substring; "" means valid
	}{
		{"none", nil, ""},
		{"every kind", []FaultRule{
			{Method: "/sluice.v1.Log/Produce", DropResponse: 0.3, DelayResponseMs: 200},
			{Method: "/sluice.internal.v1.Replica/", FailRequest: 1},
			{Method: "*", DropResponse: 0},
		}, ""},
		{"bounds are inclusive", []FaultRule{{Method: "*", FailRequest: 0, DropResponse: 1}}, ""},
		{"missing method", []FaultRule{{DropResponse: 1}}, `rule 0 (method ""): method is required`},
		{"method without service", []FaultRule{{Method: "Produce"}}, "want a full method name"},
		{"too many slashes", []FaultRule{{Method: "/sluice.v1.Log/Produce/x"}}, "want a full method name"},
		{"unknown method", []FaultRule{{Method: "/sluice.v1.Log/produce"}}, "unknown method: this node serves /grpc.health.v1.Health/, /sluice.internal.v1.Replica/, /sluice.v1.Log/"},
		{"unknown service", []FaultRule{{Method: "/sluice.v1.Admin/"}}, "unknown service"},
		{"second rule reported", []FaultRule{{Method: "*"}, {Method: "/x.Y/Z"}}, `rule 1 (method "/x.Y/Z")`},
		{"duplicate", []FaultRule{{Method: "*"}, {Method: "*"}}, "listed twice"},
		{"negative probability", []FaultRule{{Method: "*", DropResponse: -0.1}}, "drop_response -0.1 is not a probability"},
		{"probability above 1", []FaultRule{{Method: "*", FailRequest: 1.5}}, "fail_request 1.5 is not a probability"},
		{"NaN", []FaultRule{{Method: "*", FailRequest: math.NaN()}}, "not a probability"},
		{"negative delay", []FaultRule{{Method: "*", DelayResponseMs: -1}}, "delay_response_ms -1 is negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validateFaultRules(tc.rules, testServed)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("valid rules refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestDecodeFaultRules(t *testing.T) {
	rules, err := decodeFaultRules(strings.NewReader(`{"rules":[{"method":"/sluice.v1.Log/Produce","drop_response":0.3,"delay_response_ms":200,"fail_request":0.0}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := (FaultRule{Method: "/sluice.v1.Log/Produce", DropResponse: 0.3, DelayResponseMs: 200}); len(rules) != 1 || rules[0] != want {
		t.Fatalf("decoded %+v, want [%+v]", rules, want)
	}
	for body, want := range map[string]string{
		`{"rules":[{"method":"*","drop_responce":1}]}`: `unknown field "drop_responce"`,
		`{"rules":[`:                "bad JSON",
		`{"rules":[]} {"rules":[]}`: "data after the rules object",
		`{"rules":[{"method":"*","delay_response_ms":1.5}]}`: "bad JSON",
	} {
		if _, err := decodeFaultRules(strings.NewReader(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("decode %s: got %v, want an error containing %q", body, err, want)
		}
	}
}

// The interceptor: fail_request answers without running the handler;
// drop_response runs it and answers UNAVAILABLE; delay_response_ms answers
// no sooner than the delay, or when the call's context ends.
func TestFaultInjectorUnary(t *testing.T) {
	f := newFaultInjector(slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.served = testServed
	info := &grpc.UnaryServerInfo{FullMethod: "/sluice.v1.Log/Produce"}
	ran := 0
	handler := func(context.Context, any) (any, error) { ran++; return "ok", nil }
	call := func(ctx context.Context, rules ...FaultRule) (any, error) {
		t.Helper()
		if err := validateFaultRules(rules, f.served); err != nil {
			t.Fatal(err)
		}
		f.setRules(rules, "test")
		ran = 0
		return f.unary(ctx, nil, info, handler)
	}
	ctx := context.Background()

	if resp, err := call(ctx); err != nil || resp != "ok" || ran != 1 {
		t.Fatalf("no rules: %v %v, handler ran %d times", resp, err, ran)
	}
	if _, err := call(ctx, FaultRule{Method: "/sluice.v1.Log/Produce", FailRequest: 1}); status.Code(err) != codes.Unavailable || ran != 0 ||
		status.Convert(err).Message() != faultRequestDropped {
		t.Fatalf("fail_request 1: %v, handler ran %d times", err, ran)
	}
	if _, err := call(ctx, FaultRule{Method: "*", DropResponse: 1}); status.Code(err) != codes.Unavailable || ran != 1 ||
		status.Convert(err).Message() != faultResponseDropped {
		t.Fatalf("drop_response 1: %v, handler ran %d times", err, ran)
	}
	if resp, err := call(ctx, FaultRule{Method: "/sluice.v1.Log/Fetch", FailRequest: 1}); err != nil || resp != "ok" {
		t.Fatalf("a rule for another method applied: %v %v", resp, err)
	}
	if resp, err := call(ctx, FaultRule{Method: "*", FailRequest: 0, DropResponse: 0}); err != nil || resp != "ok" {
		t.Fatalf("probability 0 fired: %v %v", resp, err)
	}
	begin := time.Now()
	if resp, err := call(ctx, FaultRule{Method: "*", DelayResponseMs: 50}); err != nil || resp != "ok" || ran != 1 {
		t.Fatalf("delay: %v %v", resp, err)
	}
	if d := time.Since(begin); d < 50*time.Millisecond {
		t.Fatalf("answered after %v, want >= 50ms", d)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := call(short, FaultRule{Method: "*", DelayResponseMs: 60_000}); status.Code(err) != codes.DeadlineExceeded || ran != 1 {
		t.Fatalf("delay past the deadline: %v, handler ran %d times", err, ran)
	}
}

// fakeServerStream is a grpc.ServerStream over a queue of received
// messages that records what is sent.
type fakeServerStream struct {
	grpc.ServerStream
	ctx  context.Context
	in   []string
	sent []string
}

func (s *fakeServerStream) Context() context.Context { return s.ctx }

func (s *fakeServerStream) RecvMsg(m any) error {
	if len(s.in) == 0 {
		return io.EOF
	}
	*(m.(*string)), s.in = s.in[0], s.in[1:]
	return nil
}

func (s *fakeServerStream) SendMsg(m any) error {
	s.sent = append(s.sent, *(m.(*string)))
	return nil
}

// Streams: fail_request refuses the stream when it opens, and each
// message received (not handed to the handler); drop_response and
// delay_response_ms apply to each message sent.
func TestFaultInjectorStream(t *testing.T) {
	f := newFaultInjector(slog.New(slog.NewTextHandler(io.Discard, nil)))
	info := &grpc.StreamServerInfo{FullMethod: "/sluice.internal.v1.Replica/ReplicaFetchStream"}
	// echo answers each message until the stream ends or fails.
	var handled []string
	echo := func(_ any, ss grpc.ServerStream) error {
		for {
			var m string
			if err := ss.RecvMsg(&m); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			handled = append(handled, m)
			if err := ss.SendMsg(&m); err != nil {
				return err
			}
		}
	}
	run := func(ctx context.Context, rule FaultRule, in ...string) (*fakeServerStream, error) {
		t.Helper()
		f.setRules([]FaultRule{rule}, "test")
		handled = nil
		ss := &fakeServerStream{ctx: ctx, in: in}
		return ss, f.stream(nil, ss, info, echo)
	}
	ctx := context.Background()

	ss, err := run(ctx, FaultRule{Method: "/sluice.v1.Log/Produce", FailRequest: 1, DropResponse: 1}, "a", "b")
	if err != nil || len(ss.sent) != 2 || len(handled) != 2 {
		t.Fatalf("a rule for another method applied: %v, sent %v", err, ss.sent)
	}
	ss, err = run(ctx, FaultRule{Method: info.FullMethod, FailRequest: 1}, "a")
	if status.Convert(err).Message() != faultRequestDropped || status.Code(err) != codes.Unavailable || len(handled) != 0 || len(ss.in) != 1 {
		t.Fatalf("fail_request 1: %v, handled %v, left %v", err, handled, ss.in)
	}
	// Received messages are refused one by one: with fail_request 1 the
	// stream opens only with probability 0, so drive faultStream directly.
	f.setRules([]FaultRule{{Method: info.FullMethod, FailRequest: 1}}, "test")
	fs := &faultStream{ServerStream: &fakeServerStream{ctx: ctx, in: []string{"a"}}, f: f, method: info.FullMethod}
	var m string
	if err := fs.RecvMsg(&m); status.Convert(err).Message() != faultRequestDropped {
		t.Fatalf("message with fail_request 1: %v", err)
	}
	if err := fs.RecvMsg(&m); err != io.EOF {
		t.Fatalf("after the refused message: %v, want io.EOF", err)
	}

	ss, err = run(ctx, FaultRule{Method: "/sluice.internal.v1.Replica/", DropResponse: 1}, "a", "b")
	if status.Convert(err).Message() != faultResponseDropped || len(handled) != 1 || len(ss.sent) != 0 {
		t.Fatalf("drop_response 1: %v, handled %v, sent %v", err, handled, ss.sent)
	}
	begin := time.Now()
	ss, err = run(ctx, FaultRule{Method: "*", DelayResponseMs: 30}, "a", "b")
	if err != nil || len(ss.sent) != 2 {
		t.Fatalf("delay: %v, sent %v", err, ss.sent)
	}
	if d := time.Since(begin); d < 60*time.Millisecond {
		t.Fatalf("two delayed messages answered after %v, want >= 60ms", d)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := run(short, FaultRule{Method: "*", DelayResponseMs: 60_000}, "a"); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("delay past the deadline: %v", err)
	}
}

// delay_request_ms holds a request before the handler and then runs it
// even though its client gave up meanwhile (KAFKA-17754's late request):
// the handler sees a live context, not the client's cancelled one.
func TestFaultInjectorHeldRequestRunsAfterTheClientGaveUp(t *testing.T) {
	f := newFaultInjector(slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.served = testServed
	info := &grpc.UnaryServerInfo{FullMethod: "/sluice.v1.Log/Produce"}
	rules := []FaultRule{{Method: "/sluice.v1.Log/Produce", DelayRequestMs: 80}}
	if err := validateFaultRules(rules, f.served); err != nil {
		t.Fatal(err)
	}
	f.setRules(rules, "test")
	var ranAt time.Time
	var handlerCtxErr error
	handler := func(ctx context.Context, _ any) (any, error) {
		ranAt, handlerCtxErr = time.Now(), ctx.Err()
		return "ok", nil
	}
	begin := time.Now()
	client, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	resp, err := f.unary(client, nil, info, handler)
	if ranAt.IsZero() {
		t.Fatalf("held request never reached the handler: %v %v", resp, err)
	}
	if d := ranAt.Sub(begin); d < 80*time.Millisecond {
		t.Fatalf("handler ran %v after the request arrived, want >= the 80ms hold", d)
	}
	if handlerCtxErr != nil {
		t.Fatalf("handler ran on a dead context (%v): a late request must still be applied", handlerCtxErr)
	}
	if err := validateFaultRules([]FaultRule{{Method: "*", DelayRequestMs: -1}}, f.served); err == nil ||
		!strings.Contains(err.Error(), "delay_request_ms -1 is negative") {
		t.Fatalf("negative hold accepted: %v", err)
	}
}
