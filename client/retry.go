package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Retry policy of the calls that any broker can answer (metadata, admin,
// cluster status): each address is tried in turn — the brokers of the last
// metadata, then the seeds — and a pass in which every address failed
// retriably is followed by a pause that starts at retryBackoffMin and
// doubles up to retryBackoffMax, until the request timeout (or ctx) ends.
// Except when nobody is there: after unreachablePasses passes in a row in
// which every address was unreachable (unreachable: refused, no route, a
// name that does not resolve), the call gives up with *NoBrokerError at
// once. With the pauses above that is about 2.5 s: time for a broker
// whose process is starting to open its listener (it does so first, then
// answers LEADER_NOT_AVAILABLE until ready, which keeps the long retry),
// not the 30 s of a request timeout spent on a typo or a stopped cluster.
// Timeouts and retriable answers (a starting broker, an election) keep
// the retry until the request timeout.
const (
	retryBackoffMin   = 50 * time.Millisecond
	retryBackoffMax   = time.Second
	unreachablePasses = 7 // pauses of 50+100+200+400+800+1000 ms between them
)

// NoBrokerError is returned when no address answered at all: every
// attempt failed to connect or to hear back within the request timeout,
// or every address was unreachable (connection refused, no route, name
// not found) unreachablePasses passes in a row.
type NoBrokerError struct {
	Addrs []string // the addresses tried, in order
	Err   error    // the last transport error
}

func (e *NoBrokerError) Error() string {
	return fmt.Sprintf("no broker reachable at %s (is sluiced running?)", strings.Join(e.Addrs, ","))
}

func (e *NoBrokerError) Unwrap() error { return e.Err }

// isNoBroker reports whether err is a *NoBrokerError: a cluster-wide
// call that already retried every address under its own budget (until
// every address proved unreachable, or the request timeout). A loop that
// retries such a call (a coordinator lookup) ends on it instead of
// spending that budget again: `sluice group describe` with no broker
// running took 30 s, `txn describe` 25.
func isNoBroker(err error) bool {
	var nb *NoBrokerError
	return errors.As(err, &nb)
}

// retryBackoff returns the pause after the n-th (0-based) pass in which
// every address failed: retryBackoffMin doubled n times, at most
// retryBackoffMax.
func retryBackoff(n int) time.Duration {
	d := retryBackoffMin
	for i := 0; i < n && d < retryBackoffMax; i++ {
		d *= 2
	}
	return min(d, retryBackoffMax)
}

// anyRetriable reports whether err, from a call that any broker may
// answer, may go away on another broker or a little later: the broker is
// unreachable, starting up (LEADER_NOT_AVAILABLE: no cluster metadata
// yet), or not the one that can serve the request (NOT_CONTROLLER,
// NOT_LEADER_OR_FOLLOWER). DEADLINE_EXCEEDED is not among them: the
// request may have been carried out, and creating a topic twice would
// answer TOPIC_ALREADY_EXISTS.
func anyRetriable(err error) bool {
	var e *errs.Error
	if errors.As(err, &e) {
		switch e.Code {
		case sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, sluicev1.ErrorCode_NOT_CONTROLLER,
			sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER:
			return true
		}
		return false
	}
	return status.Code(unwrapStatus(err)) == codes.Unavailable
}

// unreachableText are the ends of the dial errors that say nobody serves
// an address, as gRPC reports them: a failed dial becomes UNAVAILABLE with
// the dialer's error flattened into the message, so the typed net error
// (syscall.ECONNREFUSED, *net.DNSError) is gone and only its text, which
// Go and gRPC keep stable, remains. (A dialer of our own would see the
// typed errors but would bypass gRPC's HTTPS_PROXY support.)
// TestUnreachableMatchesGRPCsRefusal checks the text against a real
// refused connection.
var unreachableText = []string{
	"connection refused",      // ECONNREFUSED: the host is up, nothing listens
	"no route to host",        // EHOSTUNREACH
	"network is unreachable",  // ENETUNREACH
	"no such host",            // *net.DNSError not found, from a WithDialer dialer
	"produced zero addresses", // gRPC's DNS resolver: the name does not exist
}

// unreachable reports whether err, from one attempt of a cluster-wide
// call, says that nobody serves the address (unreachableText), or that
// the address is not one (*BrokerAddrError): waiting will not help unless
// a broker starts there. A timeout, a reset or a Sluice error is not.
func unreachable(err error) bool {
	var bad *BrokerAddrError
	if errors.As(err, &bad) {
		return true
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return false
	}
	st, ok := status.FromError(unwrapStatus(err))
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, t := range unreachableText {
		if strings.Contains(st.Message(), t) {
			return true
		}
	}
	return false
}

// budgetSpent reports whether ctx is done or its deadline has passed. The
// second can come first: a broker resets a call at the deadline the
// client sent it, and gRPC reports that reset as DeadlineExceeded once the
// deadline has passed, possibly before the context's own timer has fired
// (a race lost about one run in ten on a loaded machine, where the call
// then failed with gRPC's text instead of the answer the brokers gave).
func budgetSpent(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// anyAddrs returns the addresses to try for a cluster-wide call: the
// brokers of the last metadata (by node id), then the seeds not among them.
func (c *Client) anyAddrs() []string {
	c.mu.Lock()
	ids := make([]int32, 0, len(c.brokers))
	for id := range c.brokers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	seen := map[string]bool{}
	var addrs []string
	for _, id := range ids {
		if a := c.brokers[id]; a != "" && !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	for _, s := range c.seeds {
		if !seen[s] {
			seen[s] = true
			addrs = append(addrs, s)
		}
	}
	// Suspects last, in the same relative order.
	now := time.Now()
	isSuspect := func(a string) bool {
		t, ok := c.suspect[a]
		return ok && now.Sub(t) < suspectFor
	}
	ordered := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if !isSuspect(a) {
			ordered = append(ordered, a)
		}
	}
	for _, a := range addrs {
		if isSuspect(a) {
			ordered = append(ordered, a)
		}
	}
	c.mu.Unlock()
	return ordered
}

// suspectFor is how long an address whose call failed in transport is
// tried after the others.
const suspectFor = 10 * time.Second

// markAddr records the outcome of a call to addr: a transport failure
// makes it a suspect, an answer clears that.
func (c *Client) markAddr(addr string, err error) {
	transport := false
	switch status.Code(unwrapStatus(err)) {
	case codes.Unavailable, codes.DeadlineExceeded:
		var e *errs.Error
		transport = !errors.As(err, &e)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if transport {
		if c.suspect == nil {
			c.suspect = map[string]time.Time{}
		}
		c.suspect[addr] = time.Now()
		return
	}
	delete(c.suspect, addr)
}

// invokeAny runs fn against the brokers in turn (anyAddrs) under the retry
// policy above, until one answers with anything but a retriable error
// (anyRetriable), the request timeout ends, or every address was
// unreachable unreachablePasses passes in a row. It returns fn's last
// error; when no broker answered at all, a *NoBrokerError. Each attempt
// gets the time left of the whole budget. An address that is not
// host:port (advertised by a broker) counts as an unreachable one.
func (c *Client) invokeAny(ctx context.Context, fn func(ctx context.Context, cc *grpc.ClientConn) error) error {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
	defer cancel()
	var (
		err      error // the last error
		answered error // the last retriable Sluice error a broker answered
		tried    []string
		// unreachableRun counts the passes in a row in which every
		// address was unreachable.
		unreachableRun int
	)
	for pass := 0; ; pass++ {
		allUnreachable := true
		for _, addr := range c.anyAddrs() {
			if !slices.Contains(tried, addr) {
				tried = append(tried, addr)
			}
			cc, cerr := c.conn(addr)
			var bad *BrokerAddrError
			if errors.As(cerr, &bad) {
				err = cerr
				continue
			}
			if cerr != nil {
				return cerr
			}
			err = rpcError(fn(rctx, cc))
			c.markAddr(addr, err)
			allUnreachable = allUnreachable && unreachable(err)
			if err != nil && budgetSpent(rctx) {
				if status.Code(unwrapStatus(err)) == codes.DeadlineExceeded && answered == nil {
					// A broker was reached but did not answer in time (or a
					// connection attempt hung): not "no broker reachable".
					return err
				}
				break // the budget ended during this attempt
			}
			if err == nil || !anyRetriable(err) {
				return err
			}
			var e *errs.Error
			if errors.As(err, &e) {
				answered = err
			}
		}
		unreachableRun++
		if !allUnreachable {
			unreachableRun = 0
		}
		if unreachableRun >= unreachablePasses {
			break // nobody there: *NoBrokerError now, not at the timeout
		}
		if rctx.Err() != nil || sleepCtx(rctx, retryBackoff(pass)) != nil {
			break
		}
	}
	switch {
	case answered != nil:
		return answered // e.g. LEADER_NOT_AVAILABLE: still starting up
	case errors.Is(ctx.Err(), context.Canceled):
		return err // the caller gave up
	default:
		return &NoBrokerError{Addrs: tried, Err: err}
	}
}
