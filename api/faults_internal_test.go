package api

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

	// The stream interceptor applies fail_request only.
	sinfo := &grpc.StreamServerInfo{FullMethod: "/sluice.v1.Log/Produce"}
	streamRan := false
	sh := func(any, grpc.ServerStream) error { streamRan = true; return nil }
	f.setRules([]FaultRule{{Method: "*", FailRequest: 1}}, "test")
	if err := f.stream(nil, nil, sinfo, sh); status.Code(err) != codes.Unavailable || streamRan {
		t.Fatalf("stream fail_request: %v, ran %v", err, streamRan)
	}
	f.setRules([]FaultRule{{Method: "*", DropResponse: 1, DelayResponseMs: 60_000}}, "test")
	if err := f.stream(nil, nil, sinfo, sh); err != nil || !streamRan {
		t.Fatalf("stream with drop/delay rules: %v, ran %v", err, streamRan)
	}
}
