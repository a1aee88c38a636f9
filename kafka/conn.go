package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
)

// conn is one client connection. Its reader reads a request, starts it
// (handler order: one at a time, in the order sent) and queues the
// answer; its writer writes the answers in that order as each is ready.
type conn struct {
	s    *Server
	nc   net.Conn
	host string // the client's IP, as ACLs name hosts

	ctx    context.Context // ends when the connection closes
	cancel context.CancelFunc
	once   sync.Once

	// caller is who the connection's requests are from: anonymous until
	// SASL or a client certificate says otherwise. authn is how it
	// authenticated (authn.go, sasl.go). Both are the reader's: set and
	// read only by the goroutine that reads and starts the requests.
	caller auth.Caller
	authn  connAuth

	// muted is when the connection may be read again after a throttled
	// answer (quotas.go).
	muteMu sync.Mutex
	muted  time.Time

	meter connMeter // metrics.go
}

// request is one request read from a connection.
type request struct {
	key, version  int16
	correlationID int32
	clientID      string
	msg           kmsg.Request
	// caller is the connection's caller when the request was read: what
	// an answer made later, on the writer's goroutine, charges (quotas),
	// as conn.caller may change meanwhile (SASL re-authentication).
	caller auth.Caller
	// received is when its frame was read whole (zero without metrics).
	received time.Time
	// held is the request bytes budget it holds (Config.RequestBytes):
	// given back once it is answered (release).
	held int64
}

// answer is a started request's answer: respond returns the response
// once it is ready (it may wait: acks=all, a fetch's long poll); nil from
// respond (acks=0 produce) sends nothing.
type answer struct {
	req     *request
	respond func() kmsg.Response
	// mayWait is set when respond may block (an acks=all wait, a fetch's
	// long poll): the answers before it are flushed first, so a ready
	// answer is not held behind the wait.
	mayWait bool
}

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(s.ctx)
	return &conn{s: s, nc: nc, host: hostOf(nc.RemoteAddr()), ctx: ctx, cancel: cancel,
		caller: auth.Caller{Principal: auth.Anonymous, Method: auth.MethodNone}}
}

// hostOf is a remote address's IP as ACLs write hosts: unmapped, without
// a zone.
func hostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(t.IP); ok {
			return ip.WithZone("").Unmap().String()
		}
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

func (c *conn) close() {
	c.once.Do(func() {
		c.cancel()
		c.nc.Close()
	})
}

// serve reads and answers requests until the connection fails or a
// request is malformed (Kafka closes the connection then).
func (c *conn) serve() {
	defer c.close()
	if err := c.start(); err != nil {
		c.s.log.Debug("closing connection", "remote", c.nc.RemoteAddr().String(), "err", err)
		c.closed(err)
		return
	}
	answers := make(chan answer, c.s.cfg.MaxInFlight)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.write(answers)
	}()
	err := c.read(answers)
	c.closed(err)
	close(answers)
	if err != nil && !errors.Is(err, io.EOF) && c.ctx.Err() == nil {
		c.s.log.Debug("closing connection", "remote", c.nc.RemoteAddr().String(), "err", err)
	}
	if err != nil && !errors.Is(err, errClosingAfterAnswers) {
		// Nothing more will be answered usefully: stop the writer
		// waiting on answers still pending.
		c.cancel()
	}
	<-writerDone
	if errors.Is(err, errClosingAfterAnswers) {
		c.delayFailedClose()
	}
}

// read reads requests and starts each in turn, queueing its answer.
func (c *conn) read(answers chan<- answer) error {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var size [4]byte
	timeout := c.s.cfg.SetupTimeout // the first request's; IdleTimeout then
	firstBy := c.authn.setupEnds    // the first request's, from the accept (start)
	first := true
	for {
		if !c.waitMuted() { // a throttled answer mutes the connection
			return c.ctx.Err()
		}
		dl := deadline(timeout)
		if !firstBy.IsZero() {
			dl, firstBy = firstBy, time.Time{}
		}
		c.nc.SetReadDeadline(dl)
		if _, err := io.ReadFull(br, size[:]); err != nil {
			return readFailed(err, first)
		}
		n := int32(binary.BigEndian.Uint32(size[:]))
		if n < 8 || n > c.s.cfg.MaxRequestSize {
			// Kafka's InvalidReceiveException: the frame is not read.
			return closing(sizeRefusal(n), fmt.Errorf("request size %d is outside [8, %d] (socket.request.max.bytes)", n, c.s.cfg.MaxRequestSize))
		}
		held, err := c.acquire(int64(n))
		if err != nil {
			return err
		}
		if held > 0 {
			// The read of the body starts now: the wait for the budget
			// is not the client's.
			c.nc.SetReadDeadline(deadline(timeout))
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			c.release(held)
			return readFailed(err, first)
		}
		received := c.s.meters.now()
		c.s.meters.received(4 + int(n))
		timeout, first = c.s.cfg.IdleTimeout, false
		req, err := parseRequest(body)
		if req != nil {
			req.received, req.held = received, held
		}
		if err != nil {
			if req != nil && req.key == apiVersionsKey {
				// An ApiVersions of a version this broker does not know is
				// answered (in v0) so the client can pick one (KIP-511).
				answers <- answer{req: req, respond: func() kmsg.Response { return unsupportedAPIVersions(c.s) }}
				continue
			}
			c.release(held)
			return closing(frameRefusal(req, body), err)
		}
		if err := checkLimits(req); err != nil {
			c.giveBack(req)
			c.overLimits(req, err)
			return closing(CloseOverLimits, fmt.Errorf("%s v%d over the request limits: %w", APIName(req.key), req.version, err))
		}
		if err := c.admit(req); err != nil {
			c.giveBack(req)
			c.refused(req)
			return closing(CloseAuthentication, err) // not authenticated, or no longer (authn.go)
		}
		req.caller = c.caller
		h := handlers[req.key]
		var respond func() kmsg.Response
		if req.version < h.min {
			respond = now(h.legacy)(c, req) // listed but refused (handler.listedFrom)
		} else if h.charged && c.quotasActive() {
			start := time.Now()
			respond = h.serve(c, req)
			respond = c.chargeRequest(req, respond, time.Since(start))
		} else {
			respond = h.serve(c, req)
		}
		if h.waitsForOthers {
			// Started: its wait is on other clients' requests, which
			// must not wait for its bytes.
			c.giveBack(req)
		}
		select {
		case answers <- answer{req: req, respond: respond, mayWait: req.key == 0 || req.key == 1 || h.waits}:
		case <-c.ctx.Done():
			c.giveBack(req)
			return c.ctx.Err()
		}
		if c.authn.closing {
			return errClosingAfterAnswers // a failed authentication (sasl.go)
		}
	}
}

// acquire takes n bytes of the listener's request budget (none without
// one), returning what it took; an error ends the connection (it is
// closing, or the server is).
func (c *conn) acquire(n int64) (int64, error) {
	b := c.s.cfg.RequestBytes
	if b == nil {
		return 0, nil
	}
	if err := b.Acquire(c.ctx, n); err != nil {
		return 0, err
	}
	return n, nil
}

// release gives n bytes back to the listener's request budget.
func (c *conn) release(n int64) {
	if n > 0 {
		c.s.cfg.RequestBytes.Release(n)
	}
}

// giveBack gives the bytes r holds back to the listener's budget.
func (c *conn) giveBack(r *request) {
	n := r.held
	r.held = 0
	c.release(n)
}

// write writes the answers in order, giving back each request's bytes
// once its answer is written (or will not be).
func (c *conn) write(answers <-chan answer) {
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	var buf []byte
	for a := range answers {
		buf = c.writeAnswer(bw, buf, a, func() bool { return len(answers) == 0 })
		c.giveBack(a.req)
	}
}

// writeAnswer writes a's answer once ready (its buffered predecessors
// first when it may wait), returning the buffer to reuse.
func (c *conn) writeAnswer(bw *bufio.Writer, buf []byte, a answer, last func() bool) []byte {
	if c.ctx.Err() != nil {
		c.unanswered(a.req)
		return buf // drain: the connection is closing
	}
	if a.mayWait && bw.Buffered() > 0 {
		c.nc.SetWriteDeadline(deadline(c.s.cfg.IdleTimeout))
		if err := bw.Flush(); err != nil {
			c.writeFailed(nil, err)
		} else {
			c.flushed()
		}
	}
	resp := a.respond()
	if resp == nil {
		c.answered(a.req, nil, 0) // acks=0
		return buf
	}
	c.nc.SetWriteDeadline(deadline(c.s.cfg.IdleTimeout))
	if sp, ok := resp.(*spliced); ok {
		buf = appendResponse(buf[:0], a.req, sp.Response)
		bufs, err := sp.frame(buf, sp.IsFlexible())
		if err != nil {
			c.s.log.Error("kafka: an answer could not be framed", "api", kmsg.NameForKey(a.req.key), "err", err)
			c.writeFailed(a.req, err)
			return buf
		}
		// Whatever is buffered goes first, then the answer in one
		// vectored write.
		if err := bw.Flush(); err != nil {
			c.writeFailed(a.req, err)
			return buf
		}
		c.flushed()
		n, err := bufs.WriteTo(c.nc)
		if err != nil {
			c.writeFailed(a.req, err)
			return buf
		}
		c.answered(a.req, resp, int(n))
		c.flushed()
		return buf
	}
	buf = appendResponse(buf[:0], a.req, resp)
	if _, err := bw.Write(buf); err != nil {
		c.writeFailed(a.req, err)
		return buf
	}
	c.answered(a.req, resp, len(buf))
	if last() {
		if err := bw.Flush(); err != nil {
			c.writeFailed(nil, err)
		} else {
			c.flushed()
		}
	}
	if cap(buf) > 1<<20 {
		buf = nil // do not keep a big fetch answer's buffer
	}
	return buf
}

// deadline is a deadline d from now; none for a negative d.
func deadline(d time.Duration) time.Time {
	if d < 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

const apiVersionsKey = 18

// errMalformed is a request that cannot be parsed: the connection closes.
var errMalformed = errors.New("malformed request")

// parseRequest parses a request frame's header and body. For an
// ApiVersions request of an unknown version it returns the request (key
// and correlation id set) with the error.
func parseRequest(b []byte) (*request, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: %d-byte header", errMalformed, len(b))
	}
	r := &request{key: int16(binary.BigEndian.Uint16(b)), version: int16(binary.BigEndian.Uint16(b[2:])),
		correlationID: int32(binary.BigEndian.Uint32(b[4:]))}
	b = b[8:]
	// client_id: a nullable int16-length string in every header version
	// Sluice serves (request header v1 and v2).
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: no client id", errMalformed)
	}
	l := int(int16(binary.BigEndian.Uint16(b)))
	b = b[2:]
	if l > 0 {
		if l > len(b) {
			return nil, fmt.Errorf("%w: client id length %d past the end", errMalformed, l)
		}
		r.clientID, b = string(b[:l]), b[l:]
	} else if l < -1 {
		return nil, fmt.Errorf("%w: client id length %d", errMalformed, l)
	}
	h, ok := handlers[r.key]
	if !ok {
		return nil, fmt.Errorf("%w: API key %d (%s) is not served", errMalformed, r.key, kmsg.NameForKey(r.key))
	}
	legacy := h.legacy != nil && r.version >= h.listedFrom && r.version < h.min
	if (r.version < h.min && !legacy) || r.version > h.max {
		return r, fmt.Errorf("%w: %s version %d is not served (versions %d-%d are)", errMalformed, kmsg.NameForKey(r.key), r.version, h.min, h.max)
	}
	r.msg = kmsg.RequestForKey(r.key)
	r.msg.SetVersion(r.version)
	if r.msg.IsFlexible() {
		// Request header v2: tagged fields, none of which Sluice reads.
		var err error
		if b, err = skipTags(b); err != nil {
			return nil, err
		}
	}
	if err := r.msg.ReadFrom(b); err != nil {
		return nil, fmt.Errorf("%w: %s v%d: %v", errMalformed, kmsg.NameForKey(r.key), r.version, err)
	}
	return r, nil
}

// skipTags skips a tagged-field section.
func skipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, fmt.Errorf("%w: tagged fields", errMalformed)
	}
	b = b[k:]
	for range n {
		_, k := binary.Uvarint(b) // the tag
		if k <= 0 {
			return nil, fmt.Errorf("%w: tagged field", errMalformed)
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: tagged field size", errMalformed)
		}
		b = b[k+int(size):]
	}
	return b, nil
}

// appendResponse appends resp framed as the answer to req: size,
// correlation id, the response header's tagged fields when flexible
// (never for ApiVersions, whose response header is always v0), the body.
func appendResponse(dst []byte, req *request, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(req.correlationID))
	if resp.IsFlexible() && req.key != apiVersionsKey {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}
