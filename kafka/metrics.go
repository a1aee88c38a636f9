package kafka

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Metrics is told what the door does, for the node's Prometheus metrics
// (docs/operations.md, "Health and metrics"): the package keeps no
// metrics library of its own, as api and cluster do not. Config.Metrics
// nil measures nothing (no clock is read for it).
//
// Every method may be called from any connection's goroutines,
// concurrently, on the path of every request: it must not block, and
// should not allocate.
type Metrics interface {
	// API returns the meter of one served API, by Kafka's name for it
	// ("Produce", "SaslHandshake", "InitProducerId": APIName). NewServer
	// calls it once for each API of the handler table, so the names are
	// bounded by what the door serves — never taken from a client — and
	// a request then uses its API's meter without a lookup.
	API(name string) APIMeter
	// Received counts the bytes of a request frame read whole (its
	// 4-byte size included), whether served or refused.
	Received(bytes int)
	// Sent counts the bytes of answer frames written to a connection.
	Sent(bytes int)
	// Closed counts a connection the door closed for reason: what the
	// client sent, or did not send in time. A connection the client
	// closes, a network error and the server's shutdown are not counted.
	// At most once per connection.
	Closed(reason CloseReason)
}

// APIMeter measures the requests of one API.
type APIMeter interface {
	// Done counts a request read and parsed, once, by its outcome. took
	// is from the request's frame read whole to its answer written to
	// the connection (flushed, so an answer held behind a slower one is
	// timed as the client sees it); for an unanswered acks=0 produce, to
	// the end of its work. took is meaningful for OutcomeOK and
	// OutcomeError only (0 for the others).
	Done(o Outcome, took time.Duration)
	// Errors counts n error codes code (by name: ErrorName) in one
	// answer — at its top, per topic or resource, per partition — as
	// Kafka's ErrorsPerSec counts them; never NONE.
	Errors(code string, n int)
}

// Outcome is how a request read and parsed ended.
type Outcome uint8

const (
	// OutcomeOK: answered, and the answer carries no error code; or an
	// acks=0 produce done (it gets no answer).
	OutcomeOK Outcome = iota
	// OutcomeError: answered with an error code somewhere (at the top,
	// for a topic or resource, for a partition): counted by code in
	// APIMeter.Errors.
	OutcomeError
	// OutcomeRefused: not served — the connection closed instead, its
	// authentication (the request may not be sent now: not
	// authenticated while that is required, during a SASL exchange,
	// after the session expired or its user changed).
	OutcomeRefused
	// OutcomeClosed: the connection closed before the answer was
	// written (the client went away, a write failed, the server is
	// closing).
	OutcomeClosed
	// NumOutcomes is the number of outcomes, for arrays by outcome.
	NumOutcomes
)

// String is the outcome's metric label.
func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeError:
		return "error"
	case OutcomeRefused:
		return "refused"
	case OutcomeClosed:
		return "closed"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// CloseReason is why the door closed a connection.
type CloseReason uint8

const (
	closeNone CloseReason = iota // not counted: the client's close, an I/O error, shutdown
	// CloseTooLarge: a frame announcing more than MaxRequestSize
	// (socket.request.max.bytes), not read (Kafka's
	// InvalidReceiveException).
	CloseTooLarge
	// CloseMalformed: a frame too short for a request header (a size
	// below 8, negative ones included), or whose header or body does not
	// parse.
	CloseMalformed
	// CloseUnknownAPI: an API key the door does not serve.
	CloseUnknownAPI
	// CloseUnsupportedVersion: a version the door does not serve of an
	// API it serves (ApiVersions excepted: answered, KIP-511).
	CloseUnsupportedVersion
	// CloseAuthentication: a request its authentication does not admit
	// (OutcomeRefused), a failed SASL authentication (closed once
	// answered), a client certificate no principal mapping rule maps.
	CloseAuthentication
	// CloseTLSHandshake: a TLS handshake that failed (also in
	// sluice_tls_handshake_refusals_total{listener="kafka"}).
	CloseTLSHandshake
	// CloseSetupTimeout: the first request (and a TLS handshake) not
	// whole within SetupTimeout of the accept.
	CloseSetupTimeout
	// CloseIdleTimeout: no request for IdleTimeout, or an answer not
	// taken for that long.
	CloseIdleTimeout
	// CloseOverLimits: a request with more entries in a list than the
	// request limits allow (limits.go).
	CloseOverLimits
	// NumCloseReasons bounds the reasons, for arrays by reason (index 0
	// is never counted).
	NumCloseReasons
)

// CloseReasons are the reasons Metrics.Closed is told, in order.
var CloseReasons = []CloseReason{CloseTooLarge, CloseMalformed, CloseUnknownAPI, CloseUnsupportedVersion,
	CloseAuthentication, CloseTLSHandshake, CloseSetupTimeout, CloseIdleTimeout, CloseOverLimits}

// String is the reason's metric label.
func (r CloseReason) String() string {
	switch r {
	case closeNone:
		return "none"
	case CloseTooLarge:
		return "too_large"
	case CloseMalformed:
		return "malformed"
	case CloseUnknownAPI:
		return "unknown_api"
	case CloseUnsupportedVersion:
		return "unsupported_version"
	case CloseAuthentication:
		return "authentication"
	case CloseTLSHandshake:
		return "tls_handshake"
	case CloseSetupTimeout:
		return "setup_timeout"
	case CloseIdleTimeout:
		return "idle_timeout"
	case CloseOverLimits:
		return "over_limits"
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// kafkaNames turns kmsg's API names into Kafka's (ApiKeys' names, as
// Kafka's request metrics and docs/kafka.md write them): kmsg capitalizes
// acronyms (SASLHandshake, InitProducerID, DescribeACLs).
var kafkaNames = strings.NewReplacer("SASL", "Sasl", "SCRAM", "Scram", "ACL", "Acl", "ISR", "Isr", "ID", "Id")

// APIName is Kafka's name of the API with key.
func APIName(key int16) string { return kafkaNames.Replace(kmsg.NameForKey(key)) }

// errorNames are the names of the Kafka error codes the door answers, by
// code: Sluice's table (Kafka's names, docs/errors.md) at Kafka's numbers,
// and the codes the door answers that the table has no value for.
var errorNames = func() map[int16]string {
	m := map[int16]string{
		codeUnsupportedVersion: "UNSUPPORTED_VERSION", codeUnsupportedForMessageFmt: "UNSUPPORTED_FOR_MESSAGE_FORMAT",
		codeUnknownTopicID: "UNKNOWN_TOPIC_ID", codeUnsupportedEndpointType: "UNSUPPORTED_ENDPOINT_TYPE",
		codeIllegalSASLState: "ILLEGAL_SASL_STATE",
	}
	for num, name := range sluicev1.ErrorCode_name {
		if num != 0 {
			m[kafkaCode(sluicev1.ErrorCode(num))] = name
		}
	}
	return m
}()

// ErrorName is the name of Kafka error code c: Kafka's (Sluice's error
// table keeps them), or the number for a code without one.
func ErrorName(c int16) string {
	if name, ok := errorNames[c]; ok {
		return name
	}
	return strconv.Itoa(int(c))
}

// meters is a server's Metrics with each served API's meter resolved
// once; nil when the server has none.
type meters struct {
	m    Metrics
	apis []APIMeter // by API key; nil for a key not served
}

func newMeters(m Metrics) *meters {
	if m == nil {
		return nil
	}
	var top int16
	for k := range handlers {
		top = max(top, k)
	}
	ms := &meters{m: m, apis: make([]APIMeter, top+1)}
	for k := range handlers {
		ms.apis[k] = m.API(APIName(k))
	}
	return ms
}

// now is the time to start a request's timing at: zero without metrics
// (no clock read).
func (ms *meters) now() time.Time {
	if ms == nil {
		return time.Time{}
	}
	return time.Now()
}

// received counts a request frame of size bytes read.
func (ms *meters) received(size int) {
	if ms != nil {
		ms.m.Received(size)
	}
}

// done counts r by outcome o (took: see APIMeter.Done).
func (ms *meters) done(r *request, o Outcome, took time.Duration) {
	if ms == nil || r == nil || int(r.key) >= len(ms.apis) || ms.apis[r.key] == nil {
		return
	}
	ms.apis[r.key].Done(o, took)
}

// connMeter is a connection's part of the metrics.
type connMeter struct {
	// closeCounted: a close reason was counted (by the reader or the
	// writer, whichever failed first).
	closeCounted atomic.Bool
	// pending are answers written to the writer's buffer and not yet
	// flushed: owned by the writer's goroutine.
	pending []pendingAnswer
}

// pendingAnswer is an answer in the writer's buffer.
type pendingAnswer struct {
	req     *request
	outcome Outcome
	size    int
}

// closeError is an error that closes a connection for a reason the
// metrics count.
type closeError struct {
	reason CloseReason
	err    error
}

func (e *closeError) Error() string { return e.err.Error() }
func (e *closeError) Unwrap() error { return e.err }

// closing wraps err, which closes the connection, with its reason.
func closing(reason CloseReason, err error) error { return &closeError{reason: reason, err: err} }

// timedOut reports whether err is a deadline's.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// readFailed is the error that ends the reader after a read of the
// connection failed: a deadline's is a timeout of the first request's
// setup or of an idle connection.
func readFailed(err error, first bool) error {
	switch {
	case !timedOut(err):
		return err
	case first:
		return closing(CloseSetupTimeout, err)
	}
	return closing(CloseIdleTimeout, err)
}

// sizeRefusal is the reason a frame announcing n bytes, outside
// [8, MaxRequestSize], closes the connection.
func sizeRefusal(n int32) CloseReason {
	if n < 8 {
		return CloseMalformed
	}
	return CloseTooLarge
}

// handshakeRefusal is the reason a failed TLS handshake closes c: a
// timeout is the setup's; none when the server is closing.
func handshakeRefusal(c *conn, err error) CloseReason {
	switch {
	case c.ctx.Err() != nil:
		return closeNone
	case timedOut(err):
		return CloseSetupTimeout
	}
	return CloseTLSHandshake
}

// frameRefusal is the reason a request frame body b that parseRequest
// refused (returning r) closes the connection.
func frameRefusal(r *request, b []byte) CloseReason {
	if r != nil {
		return CloseUnsupportedVersion // parseRequest returns the request only then
	}
	if len(b) >= 8 {
		if _, ok := handlers[int16(uint16(b[0])<<8|uint16(b[1]))]; !ok {
			return CloseUnknownAPI
		}
	}
	return CloseMalformed
}

// closed counts the connection closed because of err, once per
// connection, if err is one the metrics count: a closeError, or the end
// after a failed authentication's answer.
func (c *conn) closed(err error) {
	ms := c.s.meters
	if ms == nil || err == nil {
		return
	}
	reason := closeNone
	var ce *closeError
	switch {
	case errors.As(err, &ce):
		reason = ce.reason
	case errors.Is(err, errClosingAfterAnswers):
		reason = CloseAuthentication
	}
	if reason != closeNone && c.meter.closeCounted.CompareAndSwap(false, true) {
		ms.m.Closed(reason)
	}
}

// refused counts r refused: the connection closes instead of serving it.
func (c *conn) refused(r *request) { c.s.meters.done(r, OutcomeRefused, 0) }

// answered counts r's answer resp of size bytes written to the writer's
// buffer (resp nil: an acks=0 produce, done and not answered); it is
// timed when flushed. Called by the writer.
func (c *conn) answered(r *request, resp kmsg.Response, size int) {
	ms := c.s.meters
	if ms == nil {
		return
	}
	if resp == nil {
		ms.done(r, OutcomeOK, time.Since(r.received))
		return
	}
	o := OutcomeOK
	if countErrors(ms.apis[r.key], resp) {
		o = OutcomeError
	}
	c.meter.pending = append(c.meter.pending, pendingAnswer{req: r, outcome: o, size: size})
}

// flushed times the answers written since the last flush and counts
// their bytes sent. Called by the writer after a flush.
func (c *conn) flushed() {
	ms := c.s.meters
	if ms == nil || len(c.meter.pending) == 0 {
		return
	}
	now := time.Now()
	sent := 0
	for i, p := range c.meter.pending {
		ms.done(p.req, p.outcome, now.Sub(p.req.received))
		sent += p.size
		c.meter.pending[i] = pendingAnswer{}
	}
	ms.m.Sent(sent)
	c.meter.pending = c.meter.pending[:0]
}

// unanswered counts r (if not nil) and the answers not yet flushed as
// closed before their answers were written. Called by the writer.
func (c *conn) unanswered(r *request) {
	ms := c.s.meters
	if ms == nil {
		return
	}
	for i, p := range c.meter.pending {
		ms.done(p.req, OutcomeClosed, 0)
		c.meter.pending[i] = pendingAnswer{}
	}
	c.meter.pending = c.meter.pending[:0]
	ms.done(r, OutcomeClosed, 0)
}

// writeFailed closes the connection after a write of r's answer (nil: a
// flush) failed, counting the answers lost and, for a deadline's error,
// the close as an idle one (an answer not taken within IdleTimeout).
func (c *conn) writeFailed(r *request, err error) {
	c.unanswered(r)
	if timedOut(err) && c.ctx.Err() == nil {
		c.closed(closing(CloseIdleTimeout, err))
	}
	c.close()
}

// maxCountedCodes bounds the distinct error codes of one answer counted
// without a map: a few at most in practice.
const maxCountedCodes = 8

// codeCounts counts the error codes of one answer.
type codeCounts struct {
	codes [maxCountedCodes]int16
	ns    [maxCountedCodes]int
	len   int
	more  map[int16]int // past maxCountedCodes distinct codes
}

func (cc *codeCounts) add(code int16) {
	if code == 0 {
		return
	}
	for i := range cc.len {
		if cc.codes[i] == code {
			cc.ns[i]++
			return
		}
	}
	if cc.len < maxCountedCodes {
		cc.codes[cc.len], cc.ns[cc.len] = code, 1
		cc.len++
		return
	}
	if cc.more == nil {
		cc.more = map[int16]int{}
	}
	cc.more[code]++
}

// countErrors counts the error codes in resp on meter and reports
// whether there was any.
func countErrors(meter APIMeter, resp kmsg.Response) bool {
	var cc codeCounts
	responseErrors(resp, &cc)
	if meter == nil {
		return cc.len > 0
	}
	for i := range cc.len {
		meter.Errors(ErrorName(cc.codes[i]), cc.ns[i])
	}
	for code, n := range cc.more {
		meter.Errors(ErrorName(code), n)
	}
	return cc.len > 0
}

// responseErrors adds every error code of resp to cc — at the top, per
// topic or resource, per partition — as Kafka's responses' errorCounts
// do. It knows the response of every API in the handler table
// (TestResponseErrorsKnowsEveryAPI), and reports false for another.
func responseErrors(resp kmsg.Response, cc *codeCounts) bool {
	if sp, ok := resp.(*spliced); ok {
		resp = sp.Response
	}
	switch r := resp.(type) {
	case *kmsg.ProduceResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				cc.add(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.FetchResponse:
		cc.add(r.ErrorCode)
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				cc.add(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.ListOffsetsResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				cc.add(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.MetadataResponse:
		cc.add(r.ErrorCode)
		for i := range r.Topics {
			cc.add(r.Topics[i].ErrorCode)
			for j := range r.Topics[i].Partitions {
				cc.add(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.OffsetForLeaderEpochResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				cc.add(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.DescribeProducersResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				cc.add(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.CreateTopicsResponse:
		for i := range r.Topics {
			cc.add(r.Topics[i].ErrorCode)
		}
	case *kmsg.DeleteTopicsResponse:
		for i := range r.Topics {
			cc.add(r.Topics[i].ErrorCode)
		}
	case *kmsg.CreatePartitionsResponse:
		for i := range r.Topics {
			cc.add(r.Topics[i].ErrorCode)
		}
	case *kmsg.DescribeConfigsResponse:
		for i := range r.Resources {
			cc.add(r.Resources[i].ErrorCode)
		}
	case *kmsg.AlterConfigsResponse:
		for i := range r.Resources {
			cc.add(r.Resources[i].ErrorCode)
		}
	case *kmsg.IncrementalAlterConfigsResponse:
		for i := range r.Resources {
			cc.add(r.Resources[i].ErrorCode)
		}
	case *kmsg.ApiVersionsResponse:
		cc.add(r.ErrorCode)
	case *kmsg.SASLHandshakeResponse:
		cc.add(r.ErrorCode)
	case *kmsg.SASLAuthenticateResponse:
		cc.add(r.ErrorCode)
	case *kmsg.InitProducerIDResponse:
		cc.add(r.ErrorCode)
	case *kmsg.DescribeClusterResponse:
		cc.add(r.ErrorCode)
	case *kmsg.FindCoordinatorResponse:
		cc.add(r.ErrorCode)
		for i := range r.Coordinators {
			cc.add(r.Coordinators[i].ErrorCode)
		}
	case *kmsg.OffsetCommitResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				cc.add(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.TxnOffsetCommitResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				cc.add(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.OffsetFetchResponse:
		cc.add(r.ErrorCode)
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				cc.add(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
		for i := range r.Groups {
			cc.add(r.Groups[i].ErrorCode)
			for j := range r.Groups[i].Topics {
				for k := range r.Groups[i].Topics[j].Partitions {
					cc.add(r.Groups[i].Topics[j].Partitions[k].ErrorCode)
				}
			}
		}
	case *kmsg.OffsetDeleteResponse:
		cc.add(r.ErrorCode)
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				cc.add(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
	case *kmsg.AddPartitionsToTxnResponse:
		cc.add(r.ErrorCode)
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				cc.add(r.Topics[i].Partitions[j].ErrorCode)
			}
		}
		for i := range r.Transactions {
			for j := range r.Transactions[i].Topics {
				for k := range r.Transactions[i].Topics[j].Partitions {
					cc.add(r.Transactions[i].Topics[j].Partitions[k].ErrorCode)
				}
			}
		}
	case *kmsg.AddOffsetsToTxnResponse:
		cc.add(r.ErrorCode)
	case *kmsg.EndTxnResponse:
		cc.add(r.ErrorCode)
	case *kmsg.DescribeTransactionsResponse:
		for i := range r.TransactionStates {
			cc.add(r.TransactionStates[i].ErrorCode)
		}
	case *kmsg.ListTransactionsResponse:
		cc.add(r.ErrorCode)
	case *kmsg.JoinGroupResponse:
		cc.add(r.ErrorCode)
	case *kmsg.SyncGroupResponse:
		cc.add(r.ErrorCode)
	case *kmsg.HeartbeatResponse:
		cc.add(r.ErrorCode)
	case *kmsg.LeaveGroupResponse:
		cc.add(r.ErrorCode)
		for i := range r.Members {
			cc.add(r.Members[i].ErrorCode)
		}
	case *kmsg.ListGroupsResponse:
		cc.add(r.ErrorCode)
	case *kmsg.DescribeGroupsResponse:
		for i := range r.Groups {
			cc.add(r.Groups[i].ErrorCode)
		}
	case *kmsg.DeleteGroupsResponse:
		for i := range r.Groups {
			cc.add(r.Groups[i].ErrorCode)
		}
	case *kmsg.ConsumerGroupHeartbeatResponse:
		cc.add(r.ErrorCode)
	case *kmsg.ConsumerGroupDescribeResponse:
		for i := range r.Groups {
			cc.add(r.Groups[i].ErrorCode)
		}
	default:
		return false
	}
	return true
}
