package node_test

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
)

// apiVersionsKey is ApiVersions' API key in Kafka's protocol.
const apiVersionsKey = 18

// kafkaAPIVersions sends conn an ApiVersions v3 request framed by hand as
// a Kafka client frames it — int32 size, request header v2 (int16 key,
// int16 version, int32 correlation id, int16-length client id, an empty
// tagged-field section: v3 is flexible), the body from kmsg — and parses
// the answer: int32 size, response header v0 (ApiVersions answers with v0
// whatever its version: int32 correlation id only), the body.
func kafkaAPIVersions(conn net.Conn, correlationID int32) (*kmsg.ApiVersionsResponse, error) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "sluice-node-test", "1.0"
	const clientID = "sluice-node-test"
	frame := make([]byte, 4, 64) // the size, set once the frame is whole
	frame = binary.BigEndian.AppendUint16(frame, apiVersionsKey)
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Version))
	frame = binary.BigEndian.AppendUint32(frame, uint32(correlationID))
	frame = binary.BigEndian.AppendUint16(frame, uint16(len(clientID)))
	frame = append(frame, clientID...)
	frame = append(frame, 0) // no tagged fields
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))

	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := conn.Write(frame); err != nil {
		return nil, fmt.Errorf("write the request: %w", err)
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, fmt.Errorf("read the response size: %w", err)
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > 1<<20 {
		return nil, fmt.Errorf("response size %d", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, fmt.Errorf("read the response: %w", err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != correlationID {
		return nil, fmt.Errorf("correlation id %d, want %d", got, correlationID)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = req.Version
	if err := resp.ReadFrom(body[4:]); err != nil {
		return nil, fmt.Errorf("parse the response: %w", err)
	}
	return resp, nil
}

// checkAPIVersions checks an ApiVersions answer: no error, and ApiVersions
// itself listed with version 3 among its versions.
func checkAPIVersions(t *testing.T, resp *kmsg.ApiVersionsResponse) {
	t.Helper()
	if resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions error code %d", resp.ErrorCode)
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == apiVersionsKey {
			if k.MinVersion > 3 || k.MaxVersion < 3 {
				t.Fatalf("ApiVersions listed with versions %d..%d, which leave out the v3 just answered", k.MinVersion, k.MaxVersion)
			}
			return
		}
	}
	t.Fatalf("ApiVersions does not list itself: %+v", resp.ApiKeys)
}

// Issue 34: a broker with KafkaListen serves the Kafka protocol on a
// listener of its own — a Kafka client's framed ApiVersions is answered —
// and registers that listener's address, which the metadata image then
// carries for Kafka Metadata.
func TestKafkaListenerAnswersApiVersions(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) { cfg.KafkaListen = "127.0.0.1:0" })
	addr := s.Node.KafkaAddr()
	if addr == "" || addr == s.Node.Addr() || addr == s.Node.InternalAddr() {
		t.Fatalf("Kafka listener at %q (client %s, internal %s), want a listener of its own", addr, s.Node.Addr(), s.Node.InternalAddr())
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := kafkaAPIVersions(conn, 7)
	if err != nil {
		t.Fatal(err)
	}
	checkAPIVersions(t, resp)

	id := s.Node.Controller().NodeID()
	if b := s.Node.Metadata().Image().Brokers[id]; b == nil || b.KafkaAddress != addr {
		t.Fatalf("registration %+v, want Kafka address %s", b, addr)
	}
}

// An empty KafkaListen opens no Kafka listener, and the broker registers
// no Kafka address (Kafka Metadata leaves it out).
func TestKafkaListenerOffWhenEmpty(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) { cfg.KafkaListen = "" })
	if addr := s.Node.KafkaAddr(); addr != "" {
		t.Fatalf("Kafka listener at %s with KafkaListen empty", addr)
	}
	id := s.Node.Controller().NodeID()
	if b := s.Node.Metadata().Image().Brokers[id]; b == nil || b.KafkaAddress != "" {
		t.Fatalf("registration %+v, want no Kafka address", b)
	}
}

// With TLS on, the Kafka listener is not a plaintext door into a TLS
// cluster: it speaks TLS with the client listener's certificate, and a
// plaintext Kafka request gets no answer.
func TestKafkaListenerSpeaksTLSWithTLSOn(t *testing.T) {
	p := newPKI(t)
	p.Node("node1", auth.DefaultClusterName, p.CA)
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) { p.UseTLS(cfg, "node1"); cfg.KafkaListen = "127.0.0.1:0" })
	addr := s.Node.KafkaAddr()

	plain, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if resp, err := kafkaAPIVersions(plain, 1); err == nil {
		t.Fatalf("a plaintext ApiVersions was answered on a TLS node's Kafka listener: %+v", resp)
	}

	cfg := p.ClientTLS("")
	cfg.ServerName = "localhost"
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS handshake with the Kafka listener: %v", err)
	}
	defer conn.Close()
	resp, err := kafkaAPIVersions(conn, 2)
	if err != nil {
		t.Fatal(err)
	}
	checkAPIVersions(t, resp)
}

// A Kafka listener whose address is taken stops the start, naming it,
// and leaves nothing behind: the data dir starts again.
func TestKafkaListenerBindFailureStopsStart(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dir := t.TempDir()
	cfg := nodetest.Config(t, dir)
	cfg.KafkaListen = held.Addr().String()
	if n, err := node.Start(cfg); err == nil {
		n.Abort()
		t.Fatalf("a node started with its Kafka listener on %s, a port in use", cfg.KafkaListen)
	} else if !strings.Contains(err.Error(), "listen kafka") {
		t.Errorf("start error %q does not name the Kafka listener", err)
	}
	nodetest.StartSingle(t, dir, nil)
}

// In a cluster every broker's Kafka address reaches every node's metadata
// image (so a Kafka client bootstrapped on one node follows leaders to the
// others), and a broker that comes back on another Kafka port registers
// the new one.
func TestClusterImageCarriesKafkaAddresses(t *testing.T) {
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.StartAll()
	want := func() map[int32]string {
		out := map[int32]string{}
		for id, n := range c.Nodes() {
			out[id] = n.KafkaAddr()
		}
		return out
	}
	check := func(what string, want map[int32]string) {
		t.Helper()
		wait.For(t, 20*time.Second, what, func() error {
			for id, n := range c.Nodes() {
				im := n.Metadata().Image()
				for b, addr := range want {
					if addr == "" {
						return fmt.Errorf("node %d has no Kafka listener", b)
					}
					if got := im.Brokers[b]; got == nil || got.KafkaAddress != addr {
						return fmt.Errorf("node %d's image has broker %d as %+v, want Kafka address %s", id, b, got, addr)
					}
				}
			}
			return nil
		})
	}
	before := want()
	check("every broker's Kafka address in every image", before)

	if err := c.Stop(3); err != nil {
		t.Fatal(err)
	}
	c.Configure(3, func(cfg *node.Config) { cfg.KafkaListen = nodetest.FreeAddr(t) })
	c.Start(3)
	c.WaitReady(3)
	after := want()
	if after[3] == before[3] || after[3] != c.Config(3).KafkaListen {
		t.Fatalf("node 3 came back with Kafka address %s (before %s), want %s", after[3], before[3], c.Config(3).KafkaListen)
	}
	check("node 3's new Kafka address in every image", after)
}
