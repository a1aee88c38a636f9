//go:build sluicetest

package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Runtime per-RPC fault injection (testing only, sluiced --fault-injection),
// built only with the sluicetest tag (docs/design.md decision 52;
// testmachinery_off.go stands in without it):
// a gRPC server interceptor applies FaultRules to the calls this node
// serves, and /debug/faults on the HTTP listener replaces, shows and clears
// them. Together with a dial map (cluster/faultnet) it lets a chaos harness
// make requests fail, responses vanish after the request was applied, and
// answers arrive late.

// faultServerOptions sets n.faults and returns its gRPC interceptors when
// the configuration asks for fault injection (FaultInjection or
// FaultDropProduceResponses), and nothing otherwise. New calls it once,
// before the servers are built.
func (n *Node) faultServerOptions() []grpc.ServerOption {
	if !n.cfg.FaultInjection && n.cfg.FaultDropProduceResponses == 0 {
		return nil
	}
	n.faults = newFaultInjector(n.log)
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(n.faults.unary), grpc.ChainStreamInterceptor(n.faults.stream)}
}

// startFaultRules gives the injector the methods the servers serve and
// installs the rules of FaultDropProduceResponses. New calls it once the
// services are registered, before the HTTP server starts.
func (n *Node) startFaultRules() {
	if n.faults == nil {
		return
	}
	n.faults.served = servedMethods(n.grpc.GetServiceInfo(), n.internalGRPC.GetServiceInfo())
	n.log.Warn("fault injection (testing only): gRPC calls are subject to fault rules", "debug_faults_endpoint", n.cfg.FaultInjection)
	if f := n.cfg.FaultDropProduceResponses; f > 0 {
		n.faults.setRules([]FaultRule{{Method: "/sluice.v1.Log/Produce", DropResponse: f}, {Method: "/sluice.v1.Log/ProduceStream", DropResponse: f}}, "--fault-drop-produce-responses")
	}
}

// registerFaults adds /debug/faults to mux when FaultInjection is on.
func (n *Node) registerFaults(mux *http.ServeMux) {
	if n.cfg.FaultInjection {
		n.faults.register(mux)
	}
}

// validateTestMachinery accepts every testing-only setting: this build has
// the machinery they need.
func (c Config) validateTestMachinery() error { return nil }

// FaultRule is one fault-injection rule. Method is a full gRPC method name
// ("/sluice.v1.Log/Produce"), a service prefix ending in '/'
// ("/sluice.v1.Log/") or "*" for every method; it must name a method or
// service this node serves. Probabilities are within [0, 1].
type FaultRule struct {
	Method string `json:"method"`
	// DropResponse is the probability of running the handler (the request
	// is applied) and then answering UNAVAILABLE instead of its response:
	// the client cannot tell that it was applied.
	DropResponse float64 `json:"drop_response"`
	// DelayResponseMs delays the answer by this many milliseconds after the
	// handler ran (bounded by the call's deadline), so a client may time out
	// and retry a request that was applied.
	DelayResponseMs int64 `json:"delay_response_ms"`
	// FailRequest is the probability of answering UNAVAILABLE without
	// running the handler: the request is not applied.
	FailRequest float64 `json:"fail_request"`
	// DelayRequestMs holds each request this many milliseconds BEFORE the
	// handler runs, and then runs it whether or not its client is still
	// waiting: a request delayed in the network that lands after its
	// client gave up and moved on (KAFKA-17754). A unary handler then runs
	// on a context without the client's cancellation and deadline, bounded
	// by heldRequestTimeout; on a stream each message received is held.
	DelayRequestMs int64 `json:"delay_request_ms"`
}

// FaultRules is the JSON body of /debug/faults, both ways.
type FaultRules struct {
	Rules []FaultRule `json:"rules"`
}

// Statuses of injected faults. Both are UNAVAILABLE (retriable): the
// client must retry, and only the second means the request was applied.
const (
	faultRequestDropped  = "fault injection: request dropped"
	faultResponseDropped = "fault injection: response dropped after processing"
)

// heldRequestTimeout bounds a held unary request's handler once released:
// its client's deadline has usually passed, and the handler must still
// run, as a late request would, but not forever.
const heldRequestTimeout = 30 * time.Second

// maxFaultBody bounds a /debug/faults request body.
const maxFaultBody = 1 << 20

// matchFaultRule returns the rule that applies to fullMethod: an exact
// method rule, else the rule for its service prefix, else "*". Validated
// rule sets have at most one of each.
func matchFaultRule(rules []FaultRule, fullMethod string) (FaultRule, bool) {
	var prefix, all *FaultRule
	for i := range rules {
		r := &rules[i]
		switch {
		case r.Method == fullMethod:
			return *r, true
		case r.Method == "*":
			all = r
		case strings.HasSuffix(r.Method, "/") && strings.HasPrefix(fullMethod, r.Method):
			prefix = r
		}
	}
	switch {
	case prefix != nil:
		return *prefix, true
	case all != nil:
		return *all, true
	}
	return FaultRule{}, false
}

// validateFaultRules checks rules against served, the full method names of
// this node's gRPC server ("/sluice.v1.Log/Produce"). It reports the first
// bad rule by index.
func validateFaultRules(rules []FaultRule, served []string) error {
	seen := map[string]bool{}
	for i, r := range rules {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("rule %d (method %q): %s", i, r.Method, fmt.Sprintf(format, args...))
		}
		switch {
		case r.Method == "":
			return bad("method is required: a full method name (/sluice.v1.Log/Produce), a service prefix (/sluice.v1.Log/) or *")
		case r.Method == "*":
		case !strings.HasPrefix(r.Method, "/") || strings.Count(r.Method, "/") != 2 || strings.HasPrefix(r.Method, "//"):
			return bad("want a full method name (/sluice.v1.Log/Produce), a service prefix (/sluice.v1.Log/) or *")
		case strings.HasSuffix(r.Method, "/"):
			if !slices.ContainsFunc(served, func(m string) bool { return strings.HasPrefix(m, r.Method) }) {
				return bad("unknown service: this node serves %s", servedServices(served))
			}
		case !slices.Contains(served, r.Method):
			return bad("unknown method: this node serves %s", servedServices(served))
		}
		if seen[r.Method] {
			return bad("method listed twice")
		}
		seen[r.Method] = true
		for _, p := range []struct {
			name string
			v    float64
		}{{"fail_request", r.FailRequest}, {"drop_response", r.DropResponse}} {
			if math.IsNaN(p.v) || p.v < 0 || p.v > 1 {
				return bad("%s %v is not a probability within [0, 1]", p.name, p.v)
			}
		}
		if r.DelayResponseMs < 0 {
			return bad("delay_response_ms %d is negative", r.DelayResponseMs)
		}
		if r.DelayRequestMs < 0 {
			return bad("delay_request_ms %d is negative", r.DelayRequestMs)
		}
	}
	return nil
}

// servedServices lists the service prefixes of served, for error messages.
func servedServices(served []string) string {
	var svcs []string
	for _, m := range served {
		if i := strings.LastIndexByte(m, '/'); i > 0 && !slices.Contains(svcs, m[:i+1]) {
			svcs = append(svcs, m[:i+1])
		}
	}
	slices.Sort(svcs)
	return strings.Join(svcs, ", ")
}

// servedMethods lists the full method names the gRPC servers serve,
// sorted, without duplicates (health is served by both of a node's).
func servedMethods(infos ...map[string]grpc.ServiceInfo) []string {
	var out []string
	for _, info := range infos {
		for svc, si := range info {
			for _, m := range si.Methods {
				out = append(out, "/"+svc+"/"+m.Name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// faultDecision is what the interceptor does to one call.
type faultDecision struct {
	failRequest  bool
	dropResponse bool
	delay        time.Duration
	hold         time.Duration // before the handler
}

// faultInjector holds the rules and applies them to gRPC calls.
type faultInjector struct {
	log *slog.Logger
	// served is the full method names of the node's gRPC servers, set by
	// Start after registration and before the HTTP server starts;
	// read-only after.
	served []string

	mu    sync.Mutex // guards the following
	rules []FaultRule
	rng   *rand.Rand // not safe for concurrent use on its own
}

// newFaultInjector returns an injector with no rules, drawing from a
// random source seeded now.
func newFaultInjector(log *slog.Logger) *faultInjector {
	seed := uint64(time.Now().UnixNano())
	return &faultInjector{log: log, rng: rand.New(rand.NewPCG(seed, seed>>32|1))}
}

// Rules returns a copy of the current rules.
func (f *faultInjector) Rules() []FaultRule {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.rules)
}

// setRules replaces the rules (nil clears them); they must be valid.
func (f *faultInjector) setRules(rules []FaultRule, why string) {
	f.mu.Lock()
	f.rules = slices.Clone(rules)
	f.mu.Unlock()
	if len(rules) == 0 {
		f.log.Info("fault injection: rules cleared", "by", why)
		return
	}
	b, _ := json.Marshal(rules)
	f.log.Info("fault injection: rules replaced", "by", why, "rules", string(b))
}

// decide draws the faults for one call of fullMethod.
func (f *faultInjector) decide(fullMethod string) faultDecision {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := matchFaultRule(f.rules, fullMethod)
	if !ok {
		return faultDecision{}
	}
	// A probability of 1 always fires (Float64 < 1) and 0 never does.
	return faultDecision{
		failRequest:  f.rng.Float64() < r.FailRequest,
		dropResponse: f.rng.Float64() < r.DropResponse,
		delay:        time.Duration(r.DelayResponseMs) * time.Millisecond,
		hold:         time.Duration(r.DelayRequestMs) * time.Millisecond,
	}
}

// unary is the unary server interceptor: fail the request, or hold it
// and/or run it and then delay and/or drop its answer (error answers
// included).
func (f *faultInjector) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	d := f.decide(info.FullMethod)
	if d.failRequest {
		return nil, status.Error(codes.Unavailable, faultRequestDropped)
	}
	if d.hold > 0 {
		// The hold is not cut short by the client: the request lands
		// late whatever the client did meanwhile, on a context of its
		// own (the client's would make the handler give up at once).
		f.holdRequest(ctx, info.FullMethod, d.hold)
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), heldRequestTimeout)
		defer cancel()
		ctx = hctx
	}
	resp, err := handler(ctx, req)
	if d.hold > 0 {
		// What the late request did: refused (fenced, stale epoch) or
		// applied.
		code := status.Code(err).String()
		switch r := resp.(type) {
		case interface{ GetErrorCode() sluicev1.ErrorCode }:
			code = r.GetErrorCode().String() // EndTxn's answer is in its body
		case *internalv1.AddPartitionsToTxnResponse:
			var codes []string // one per transaction
			for _, t := range r.GetResults() {
				codes = append(codes, t.GetTransactionalId()+":"+t.GetErrorCode().String())
			}
			code = strings.Join(codes, ",")
		}
		f.log.Info("fault injection: held request answered", "method", info.FullMethod, "code", code, "err", err)
	}
	if d.delay > 0 {
		t := time.NewTimer(d.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if d.dropResponse {
		return nil, status.Error(codes.Unavailable, faultResponseDropped)
	}
	return resp, err
}

// holdRequest sleeps d (a delay_request_ms hold) and logs the release,
// saying whether the client had given up meanwhile.
func (f *faultInjector) holdRequest(ctx context.Context, method string, d time.Duration) {
	time.Sleep(d) // a fault: the request is held whatever happens
	f.log.Info("fault injection: held request released", "method", method, "held", d, "client_gone", ctx.Err() != nil)
}

// stream is the stream server interceptor. fail_request applies when the
// stream opens and to each message received (the message is not handed
// to the handler, and the stream ends with UNAVAILABLE); delay_request_ms
// holds each message received before the handler sees it; delay_response
// and drop_response apply to each message sent (a dropped message ends
// the stream with UNAVAILABLE instead: the requests it answered were
// applied). Every decision is drawn afresh. A held message reaches the
// handler even after the client left, but the handler's stream context
// is the client's: it lands only as far as the handler goes on a
// cancelled stream.
func (f *faultInjector) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if f.decide(info.FullMethod).failRequest {
		return status.Error(codes.Unavailable, faultRequestDropped)
	}
	return handler(srv, &faultStream{ServerStream: ss, f: f, method: info.FullMethod})
}

// faultStream applies the fault rules to a stream's messages.
type faultStream struct {
	grpc.ServerStream
	f      *faultInjector
	method string
}

// RecvMsg receives a message, or drops it and fails.
func (s *faultStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	d := s.f.decide(s.method)
	if d.failRequest {
		return status.Error(codes.Unavailable, faultRequestDropped)
	}
	if d.hold > 0 {
		s.f.holdRequest(s.Context(), s.method, d.hold)
	}
	return nil
}

// SendMsg sends a message, perhaps late, or fails instead of sending it.
func (s *faultStream) SendMsg(m any) error {
	d := s.f.decide(s.method)
	if d.delay > 0 {
		t := time.NewTimer(d.delay)
		select {
		case <-t.C:
		case <-s.Context().Done():
			t.Stop()
			return status.FromContextError(s.Context().Err()).Err()
		}
	}
	if d.dropResponse {
		return status.Error(codes.Unavailable, faultResponseDropped)
	}
	return s.ServerStream.SendMsg(m)
}

// register adds /debug/faults to mux: GET shows the rules, PUT or POST
// replaces them (400 and no change when the body is bad), DELETE clears
// them. Every answer but an error is the rule set now in force.
func (f *faultInjector) register(mux *http.ServeMux) {
	reply := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		rules := f.Rules()
		if rules == nil {
			rules = []FaultRule{}
		}
		_ = json.NewEncoder(w).Encode(FaultRules{Rules: rules})
	}
	mux.HandleFunc("GET /debug/faults", func(w http.ResponseWriter, r *http.Request) { reply(w) })
	replace := func(w http.ResponseWriter, r *http.Request) {
		rules, err := decodeFaultRules(http.MaxBytesReader(w, r.Body, maxFaultBody))
		if err == nil {
			err = validateFaultRules(rules, f.served)
		}
		if err != nil {
			http.Error(w, "fault injection: "+err.Error(), http.StatusBadRequest)
			return
		}
		f.setRules(rules, "http "+r.Method+" from "+r.RemoteAddr)
		reply(w)
	}
	mux.HandleFunc("PUT /debug/faults", replace)
	mux.HandleFunc("POST /debug/faults", replace)
	mux.HandleFunc("DELETE /debug/faults", func(w http.ResponseWriter, r *http.Request) {
		f.setRules(nil, "http DELETE from "+r.RemoteAddr)
		reply(w)
	})
}

// decodeFaultRules reads one FaultRules JSON object; unknown fields (a
// misspelt "drop_responce") and trailing data are errors.
func decodeFaultRules(body io.Reader) ([]FaultRule, error) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var fr FaultRules
	if err := dec.Decode(&fr); err != nil {
		return nil, fmt.Errorf(`bad JSON (want {"rules":[{"method":"/sluice.v1.Log/Produce","drop_response":0.3}]}): %w`, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("bad JSON: data after the rules object")
	}
	return fr.Rules, nil
}
